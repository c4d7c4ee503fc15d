package policy

import (
	"fmt"
	"slices"
	"testing"
)

// gangStarvationRun drives passes of pol on a federation of four
// one-slot machines of one organisation: a gang of four waits, the
// machines run 1-machine tasks ending one per second (staggered), and two
// new 1-machine tasks arrive before every pass, so the queue never
// empties. Each pass is followed by one second of time; every task runs
// exactly its 4 s limit. It returns the pass (from 1) in which the gang
// started, or 0 if it had not after passes.
func gangStarvationRun(t *testing.T, pol Policy, passes int) int {
	t.Helper()
	const limit = 4000
	s := &State{Orgs: []Org{{Name: "a", LimitMilliW: 1 << 40}}}
	for m := range 4 {
		s.Machines = append(s.Machines, Machine{ID: fmt.Sprintf("m%d", m), Owner: 0, MFLOPS: 100, BusyMilliW: 100})
		s.Running = append(s.Running, Running{Task: Task{ID: fmt.Sprintf("r%d", m), SizeMFlop: 400, Seq: uint64(m), WallLimitMs: limit}, Machine: m, RunSeconds: float64(m)})
	}
	g := GangJob{ID: "g-0"}
	for r := range 4 {
		g.Parts = append(g.Parts, Task{ID: fmt.Sprintf("g-%d", r), SizeMFlop: 400, Seq: 10, WallLimitMs: limit})
	}
	s.Gangs = []GangJob{g}
	seq := uint64(100)
	for pass := 1; pass <= passes; pass++ {
		for range 2 {
			seq++
			s.Queued = append(s.Queued, Task{ID: fmt.Sprintf("q%d", seq), SizeMFlop: 400, Seq: seq, WallLimitMs: limit})
		}
		ds, err := pol.Schedule(s)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		gangParts := 0
		for _, d := range ds {
			if d.Kind != Allocate {
				t.Fatalf("pass %d: %v", pass, d)
			}
			for _, r := range s.Running {
				if r.Machine == d.Machine {
					t.Fatalf("pass %d: %s placed on busy machine %d", pass, d.Task, d.Machine)
				}
			}
			if k := slices.IndexFunc(s.Queued, func(q Task) bool { return q.ID == d.Task }); k >= 0 {
				s.Running = append(s.Running, Running{Task: s.Queued[k], Machine: d.Machine})
				s.Queued = slices.Delete(s.Queued, k, k+1)
				continue
			}
			gangParts++
			s.Running = append(s.Running, Running{Task: g.Parts[gangParts-1], Machine: d.Machine})
		}
		switch gangParts {
		case 0:
		case 4:
			return pass
		default:
			t.Fatalf("pass %d: %d of the gang's 4 parts placed", pass, gangParts)
		}
		next := s.Running[:0]
		for _, r := range s.Running {
			r.RunSeconds++
			if r.RunSeconds*1000 < limit {
				next = append(next, r)
			}
		}
		s.Running = next
	}
	return 0
}

// startNowOnly is the gang step before this one (s6gang's placeGangs): a
// gang starts when its machines are all free now, else the base runs as
// if it did not exist. The baseline the starvation test compares with.
type startNowOnly struct{ base Policy }

func (p startNowOnly) Name() string { return "start-now-only" }

func (p startNowOnly) Schedule(s *State) ([]Decision, error) {
	st, err := PlanGangStep(s)
	if err != nil {
		return nil, err
	}
	rest := *st.Rest
	if st.Head != "" { // forget the reservation
		rest = *s
		rest.Gangs = nil
		rest.Held = nil
	}
	ds, err := p.base.Schedule(&rest)
	return append(st.Starts, ds...), err
}

// TestGangNotStarvedByAStreamOfSmallTasks: a gang of 4 on a 4-machine
// federation under a continuous stream of 1-machine tasks starts at pass
// 5, as soon as the four tasks running when it arrived have ended (the
// head's machines are held as they free up, one a pass)
// under every job policy; with the gang step of before (start when all
// are free now, no reservation) every freed machine goes to a small task
// and the gang is still waiting after 200 passes.
func TestGangNotStarvedByAStreamOfSmallTasks(t *testing.T) {
	if got := gangStarvationRun(t, startNowOnly{EHOSEP{}}, 200); got != 0 {
		t.Fatalf("without a reservation the gang started at pass %d: the stream does not starve it, the test shows nothing", got)
	}
	for _, job := range append([]string{"ehosep"}, JobModes()...) {
		pol, err := WithJobPolicy(EHOSEP{}, job)
		if err != nil {
			t.Fatal(err)
		}
		if got := gangStarvationRun(t, pol, 200); got != 5 {
			t.Errorf("%s: the gang started at pass %d, want pass 5 (the last of the four running tasks ends after pass 4)", job, got)
		}
	}
}

// TestGangFirstHandWorked: the gang step on a small federation, each rule
// by hand.
func TestGangFirstHandWorked(t *testing.T) {
	base := func() *State {
		return &State{
			Orgs: []Org{{Name: "a", LimitMilliW: 1000}, {Name: "b", LimitMilliW: 1000}},
			Machines: []Machine{
				{ID: "a0", Owner: 0, MFLOPS: 100, BusyMilliW: 100},
				{ID: "a1", Owner: 0, MFLOPS: 100, BusyMilliW: 100},
				{ID: "a2", Owner: 0, MFLOPS: 100, BusyMilliW: 100},
				{ID: "b0", Owner: 1, MFLOPS: 100, BusyMilliW: 100},
				{ID: "b1", Owner: 1, MFLOPS: 100, BusyMilliW: 100},
			},
			Gangs: []GangJob{{ID: "g-1", Parts: []Task{{ID: "g-1", Org: 1, SizeMFlop: 10, Seq: 1}, {ID: "g-2", Org: 1, SizeMFlop: 10, Seq: 1}}}},
		}
	}
	t.Run("starts on the first owner with two free machines", func(t *testing.T) {
		st, err := PlanGangStep(base())
		want := []Decision{{Kind: Allocate, Task: "g-1", Org: 1, Machine: 0}, {Kind: Allocate, Task: "g-2", Org: 1, Machine: 1}}
		if err != nil || !slices.Equal(st.Starts, want) || st.Head != "" {
			t.Fatalf("%+v, %v", st, err)
		}
		if !st.Rest.Held[0] || !st.Rest.Held[1] || st.Rest.Held[2] || len(st.Rest.Running) != 2 {
			t.Fatalf("rest: held %v, running %d", st.Rest.Held, len(st.Rest.Running))
		}
	})
	t.Run("the gang's power counts whole", func(t *testing.T) {
		s := base()
		s.Orgs[1].LimitMilliW = 150 // one part's draw, not two
		st, err := PlanGangStep(s)
		if err != nil || len(st.Starts) != 0 || st.Head != "" {
			t.Fatalf("%+v, %v; want neither a start nor a reservation (the gang never fits the limit)", st, err)
		}
	})
	t.Run("the owner in deficit with tasks waiting keeps its machines", func(t *testing.T) {
		s := base()
		s.Queued = []Task{{ID: "a-9", Org: 0, SizeMFlop: 10, Seq: 2}}
		st, err := PlanGangStep(s)
		want := []Decision{{Kind: Allocate, Task: "g-1", Org: 1, Machine: 3}, {Kind: Allocate, Task: "g-2", Org: 1, Machine: 4}}
		if err != nil || !slices.Equal(st.Starts, want) {
			t.Fatalf("%+v, %v; want the gang on its own organisation's b0, b1", st.Starts, err)
		}
	})
	t.Run("the head reserves the machines that free first and takes its power off", func(t *testing.T) {
		s := base()
		s.Running = []Running{
			{Task: Task{ID: "x", Org: 0, SizeMFlop: 10, WallLimitMs: 5000}, Machine: 0, RunSeconds: 1},
			{Task: Task{ID: "y", Org: 0, SizeMFlop: 10, WallLimitMs: 5000}, Machine: 1, RunSeconds: 3},
			{Task: Task{ID: "z", Org: 0, SizeMFlop: 10}, Machine: 2},
			{Task: Task{ID: "w", Org: 1, SizeMFlop: 10}, Machine: 3}, // b's own: no claim
		}
		s.Queued = []Task{{ID: "b-9", Org: 1, SizeMFlop: 10, Seq: 5}}
		st, err := PlanGangStep(s)
		// a1 frees at 2 s, a0 at 4 s (a's k-th: 4 s); b1 is free now but b0
		// never frees (no limit): a's machines are reserved.
		if err != nil || len(st.Starts) != 0 || st.Head != "g-1" || !slices.Equal(st.Reserved, []int{0, 1}) {
			t.Fatalf("%+v, %v; want g-1 reserving a0, a1", st, err)
		}
		if st.Rest.Orgs[1].LimitMilliW != 800 {
			t.Fatalf("b's limit for the base: %d, want 1000 − the gang's 200", st.Rest.Orgs[1].LimitMilliW)
		}
		ds, err := GangFirst{Base: EHOSEP{}}.Schedule(s)
		if err != nil || len(ds) != 1 || ds[0].Task != "b-9" || ds[0].Machine != 4 {
			t.Fatalf("decisions %+v, %v; want b-9 on b1 (a0, a1 held)", ds, err)
		}
	})
	t.Run("the owner's claim preempts guests for its gang", func(t *testing.T) {
		s := &State{
			Orgs: []Org{{Name: "a", LimitMilliW: 1000}, {Name: "b", LimitMilliW: 1000}},
			Machines: []Machine{
				{ID: "a0", Owner: 0, MFLOPS: 100, BusyMilliW: 100},
				{ID: "b0", Owner: 1, MFLOPS: 100, BusyMilliW: 100},
				{ID: "b1", Owner: 1, MFLOPS: 100, BusyMilliW: 100},
			},
			// a runs on all three (DP 2 > 0), b on none (DP −1).
			Running: []Running{
				{Task: Task{ID: "x", Org: 0, SizeMFlop: 10_000, Seq: 1}, Machine: 0, RunSeconds: 5},
				{Task: Task{ID: "y", Org: 0, SizeMFlop: 10_000, Seq: 2}, Machine: 1, RunSeconds: 5},
				{Task: Task{ID: "z", Org: 0, SizeMFlop: 10_000, Seq: 3}, Machine: 2, RunSeconds: 9},
			},
			Gangs: []GangJob{{ID: "g-1", Parts: []Task{{ID: "g-1", Org: 1, SizeMFlop: 10, Seq: 4}, {ID: "g-2", Org: 1, SizeMFlop: 10, Seq: 4}}}},
		}
		st, err := PlanGangStep(s)
		if err != nil || len(st.Starts) != 2 || st.Starts[0].Kind != Preempt || st.Starts[0].Victim != "y" || st.Starts[0].Machine != 1 ||
			st.Starts[1].Kind != Preempt || st.Starts[1].Victim != "z" || st.Starts[1].Machine != 2 || st.Head != "" {
			t.Fatalf("%+v, %v; want g-1 preempting y on b0 and g-2 preempting z on b1", st.Starts, err)
		}
		if len(st.Rest.Queued) != 2 || st.Rest.Queued[0].ID != "y" || st.Rest.Queued[0].SizeMFlop != 10_000 {
			t.Fatalf("the victims back in the queue (no checkpointing: they keep nothing): %+v", st.Rest.Queued)
		}
		// A guest that is a gang's part is never a victim: no claim, the
		// gang is the head instead.
		s.Running[2].Task.Gang = true
		if st, err = PlanGangStep(s); err != nil || len(st.Starts) != 0 || st.Head != "g-1" {
			t.Fatalf("%+v, %v; want no preemption of a gang's part", st, err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for name, mutate := range map[string]func(*State){
			"one part":           func(s *State) { s.Gangs[0].Parts = s.Gangs[0].Parts[:1] },
			"two organisations":  func(s *State) { s.Gangs[0].Parts[1].Org = 0 },
			"two requests":       func(s *State) { s.Gangs[0].Parts[1].Request = Resources{CPUs: 2} },
			"a part also queued": func(s *State) { s.Queued = []Task{s.Gangs[0].Parts[1]} },
			"org out of range":   func(s *State) { s.Gangs[0].Parts[0].Org = 7 },
		} {
			s := base()
			mutate(s)
			if _, err := (GangFirst{Base: EHOSEP{}}).Schedule(s); err == nil {
				t.Errorf("%s: accepted", name)
			}
			if _, err := (LiveBackfill{Mode: "easy"}).Plan(s); err == nil {
				t.Errorf("%s: accepted by easy", name)
			}
		}
	})
}

// TestTruncateKeepsGangsWhole: cutting a pass's decisions never splits a
// gang.
func TestTruncateKeepsGangsWhole(t *testing.T) {
	s := &State{Gangs: []GangJob{{ID: "g-1", Parts: []Task{{ID: "g-1"}, {ID: "g-2"}, {ID: "g-3"}}}}}
	ds := []Decision{{Task: "t-1"}, {Task: "g-1"}, {Task: "g-2"}, {Task: "g-3"}, {Task: "t-2"}}
	for n, want := range map[int]int{0: 0, 1: 1, 2: 1, 3: 1, 4: 4, 5: 5, 9: 5} {
		if got := Truncate(s, ds, n); len(got) != want {
			t.Errorf("Truncate to %d: %d decisions, want %d", n, len(got), want)
		}
	}
}
