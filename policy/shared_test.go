package policy

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// asShared returns s with every machine declaring a memory capacity that no
// task asks for: nothing changes in what a task may use or counts for (its
// share stays 1/1), but the state is no longer one-slot, so EHOSEP decides
// through the shared-machine pass.
func asShared(s *State) *State {
	c := *s
	c.Federation = nil
	c.Machines = append([]Machine(nil), s.Machines...)
	for i := range c.Machines {
		c.Machines[i].Capacity = Resources{CPUs: 1, MemoryBytes: 1 << 40}
	}
	return &c
}

// TestSharedPassDecidesAsIndexedOnOneSlot is the compatibility property of
// issue 14: with whole-machine tasks the shared-machine pass decides exactly
// what the indexed EHOSEP (and so the dissertation's) does, decision for
// decision, bit for bit, on the random federations of TestEHOSEPProperties
// and on model 1.
func TestSharedPassDecidesAsIndexedOnOneSlot(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	states := []*State{}
	for range n {
		states = append(states, randomState(r))
	}
	m1 := model1(w(4000))
	for k := range 200 {
		m1.Queued = append(m1.Queued, Task{ID: "t" + itoa(k), Org: k % 4, SizeMFlop: int64(1+k%7) * 1_000_000, Seq: uint64(k)})
	}
	states = append(states, m1)
	for iter, s := range states {
		sh := asShared(s)
		if !s.OneSlot() || sh.OneSlot() {
			t.Fatalf("case %d: OneSlot %v / shared %v", iter, s.OneSlot(), sh.OneSlot())
		}
		for _, bestFit := range []bool{false, true} {
			p := EHOSEP{BestFit: bestFit}
			want, err := p.Schedule(s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Schedule(sh)
			if err != nil {
				t.Fatalf("case %d: %v", iter, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d (bestFit %v): shared %q != indexed %q", iter, bestFit, summary(s, got), summary(s, want))
			}
			ref, err := referenceEHOSEP(sh, bestFit)
			if err != nil || !reflect.DeepEqual(ref, want) {
				t.Fatalf("case %d: reference on the shared form %q (%v) != %q", iter, summary(s, ref), err, summary(s, want))
			}
		}
	}
}

// randomSharedState draws a federation of multi-core machines with memory,
// GPUs, labels and owner policies, and tasks with requests and
// requirements.
func randomSharedState(r *rand.Rand) *State {
	s := randomState(r)
	s.Running = nil
	labels := []string{"matlab", "infiniband"}
	for i := range s.Machines {
		m := &s.Machines[i]
		m.Capacity = Resources{CPUs: int64(1 << r.IntN(4)), GPUs: int64(r.IntN(3))}
		if r.IntN(2) == 0 {
			m.Capacity.MemoryBytes = int64(4+4*r.IntN(3)) << 30
		}
		m.Attrs = map[string]string{"os": []string{"linux", "darwin"}[r.IntN(2)]}
		if r.IntN(3) == 0 {
			m.Attrs["label."+labels[r.IntN(2)]] = ""
		}
		switch r.IntN(4) {
		case 0:
			m.Policy = &OwnerPolicy{}
		case 1:
			m.Policy = &OwnerPolicy{Allow: []string{"/bin/sh"}}
		case 2:
			m.Policy = &OwnerPolicy{AllowAny: true, Orgs: []string{s.Orgs[r.IntN(len(s.Orgs))].Name}}
		}
	}
	for k := range s.Queued {
		t := &s.Queued[k]
		t.Request = Resources{CPUs: int64(r.IntN(5)), MemoryBytes: int64(r.IntN(3)) << 31, GPUs: int64(r.IntN(4) / 3)}
		t.Executable = []string{"", "/bin/sh", "sh", "/usr/bin/python3"}[r.IntN(4)]
		for range r.IntN(4) / 3 * (1 + r.IntN(3)) { // a quarter avoid 1-3 machines
			t.Avoid = append(t.Avoid, s.Machines[r.IntN(len(s.Machines))].ID)
		}
		t.Avoid = slices.Compact(slices.Sorted(slices.Values(t.Avoid)))
		switch r.IntN(5) {
		case 0:
			t.Requirements = []Requirement{{"os", "=", "linux"}}
		case 1:
			t.Requirements = []Requirement{{"label." + labels[r.IntN(2)], "is_set", ""}}
		case 2:
			t.Requirements = []Requirement{{"os", "in", "darwin, freebsd"}}
		}
	}
	// Start some of them where they fit, as a committed state would.
	if pre, err := (EHOSEP{}).Schedule(s); err == nil && len(pre) > 0 {
		after, err := ApplyDecisions(s, pre[:r.IntN(len(pre)+1)])
		if err == nil {
			for i := range after.Running {
				after.Running[i].RunSeconds = float64(r.IntN(4) * 200)
			}
			s = after
		}
	}
	return s
}

// TestSharedProperties: on random shared federations the pass agrees with
// the reference, every decision applies (no machine over-committed, every
// task on a machine it matches, PI ≤ Lim), the pass is quiescent, and the
// input order does not matter.
func TestSharedProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	n := 2000
	if testing.Short() {
		n = 200
	}
	shared, avoiding, lifted := 0, 0, 0
	for iter := range n {
		s := randomSharedState(r)
		for _, bestFit := range []bool{false, true} {
			p := EHOSEP{BestFit: bestFit}
			got, err := p.Schedule(s)
			if err != nil {
				t.Fatalf("case %d: %v", iter, err)
			}
			ref, err := referenceEHOSEP(s, bestFit)
			if err != nil || !reflect.DeepEqual(got, ref) {
				t.Fatalf("case %d (bestFit %v): %q != reference %q (%v)", iter, bestFit, summary(s, got), summary(s, ref), err)
			}
			after, err := ApplyDecisions(s, got)
			if err != nil {
				t.Fatalf("case %d: %v", iter, err)
			}
			if err := Validate(after); err != nil {
				t.Fatalf("case %d: after: %v", iter, err)
			}
			if again, err := p.Schedule(after); err != nil || len(again) != 0 {
				t.Fatalf("case %d: second pass decided %q (%v)", iter, summary(after, again), err)
			}
			for _, r := range after.Running {
				if slices.Contains(r.Task.Avoid, after.Machines[r.Machine].ID) {
					if !refMay(after, r.Task, r.Machine) {
						t.Fatalf("case %d: %s placed on %s, which it avoids, while another machine matches it", iter, r.Task.ID, after.Machines[r.Machine].ID)
					}
					lifted++
				}
				if len(r.Task.Avoid) > 0 {
					avoiding++
				}
			}
			perMachine := map[int]int{}
			for _, r := range after.Running {
				perMachine[r.Machine]++
				if perMachine[r.Machine] > 1 {
					shared++
				}
			}
			sh := *s
			sh.Queued = append([]Task(nil), s.Queued...)
			r.Shuffle(len(sh.Queued), func(a, b int) { sh.Queued[a], sh.Queued[b] = sh.Queued[b], sh.Queued[a] })
			if g2, _ := p.Schedule(&sh); !reflect.DeepEqual(g2, got) {
				t.Fatalf("case %d: input order changed the decisions", iter)
			}
		}
	}
	if shared == 0 {
		t.Fatal("no random case ever shared a machine: the generator tests nothing")
	}
	if avoiding == 0 || lifted == 0 {
		t.Fatalf("%d placed tasks avoided a machine, %d of them on one they avoid (every match avoided): the generator tests too little", avoiding, lifted)
	}
}

// TestSharedHandWorked: the scenarios on one pass.
func TestSharedHandWorked(t *testing.T) {
	orgs := []Org{{"A", 1 << 40}, {"B", 1 << 40}, {"C", 1 << 40}}
	var ms []Machine
	for k := range 4 { // A's fast, efficient machines allow nothing
		ms = append(ms, Machine{ID: "a" + itoa(k), Owner: 0, MFLOPS: 100_000, BusyMilliW: 10_000, Policy: &OwnerPolicy{}})
	}
	for k := range 2 {
		ms = append(ms, Machine{ID: "b" + itoa(k), Owner: 1, MFLOPS: 10_000, BusyMilliW: 100_000, Policy: &OwnerPolicy{Allow: []string{"/bin/sh"}}})
		ms = append(ms, Machine{ID: "c" + itoa(k), Owner: 2, MFLOPS: 10_000, BusyMilliW: 100_000, Policy: &OwnerPolicy{Allow: []string{"sh"}}})
	}
	s := &State{Orgs: orgs, Machines: ms}
	for k := range 12 {
		s.Queued = append(s.Queued, Task{ID: "t" + itoa(k), Org: 1, SizeMFlop: 1000, Seq: uint64(k), Executable: "/bin/sh"})
	}
	ds, err := (EHOSEP{}).Schedule(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 4 {
		t.Fatalf("decisions %q: want 4 (B's and C's machines)", summary(s, ds))
	}
	for _, d := range ds {
		if strings.HasPrefix(ms[d.Machine].ID, "a") {
			t.Fatalf("task %s placed on %s, whose owner allows nothing", d.Task, ms[d.Machine].ID)
		}
	}

	// 4-cpu tasks on one 8-cpu machine: two at once.
	big := &State{Orgs: orgs[:1], Machines: []Machine{{ID: "m", Owner: 0, MFLOPS: 80_000, BusyMilliW: 80_000, Capacity: Resources{CPUs: 8}}}}
	for k := range 3 {
		big.Queued = append(big.Queued, Task{ID: "q" + itoa(k), Org: 0, SizeMFlop: 1000, Seq: uint64(k), Request: Resources{CPUs: 4}})
	}
	ds, err = (EHOSEP{}).Schedule(big)
	if err != nil || len(ds) != 2 {
		t.Fatalf("decisions %q (%v): want q0 and q1 on m", summary(big, ds), err)
	}
	after, _ := ApplyDecisions(big, ds)
	u := ComputeUsage(after)
	if u.AllocatedMFLOPS[0] != 80_000 || u.PIMilliW[0] != 80_000 {
		t.Fatalf("two half-machine tasks count %d MFLOPS %d mW, want the whole machine", u.AllocatedMFLOPS[0], u.PIMilliW[0])
	}
}

func newRand(a, b uint64) *rand.Rand { return rand.New(rand.NewPCG(a, b)) }

// TestSharedPassHonoursHeld: on shared machines (the pass of shared.go) a
// held machine is neither free nor a victim, as on one-slot ones
// (TestHeldMachineIsNeverFree, TestHeldMachineIsNeverAVictim); and on
// random shared federations with random held machines the pass agrees
// with the reference, which leaves held machines alone.
func TestSharedPassHonoursHeld(t *testing.T) {
	free := asShared(heldState())
	free.Held = []bool{true, false}
	if ds, err := (EHOSEP{}).Schedule(free); err != nil || len(ds) != 1 || ds[0].Machine != 1 {
		t.Errorf("m-fast held: %+v, %v; want t1 on m-slow", ds, err)
	}
	free.Held = []bool{true, true}
	if ds, err := (EHOSEP{}).Schedule(free); err != nil || len(ds) != 0 {
		t.Errorf("both held: %+v, %v; want no decision", ds, err)
	}
	// B runs on both machines, A waits: the only victims are held.
	victim := asShared(&State{
		Orgs: []Org{{"A", w(1000)}, {"B", w(1000)}},
		Machines: []Machine{
			{ID: "a1", Owner: 0, MFLOPS: 100, BusyMilliW: w(100)},
			{ID: "b1", Owner: 1, MFLOPS: 100, BusyMilliW: w(100)},
		},
		Queued:  []Task{{ID: "ta", Org: 0, SizeMFlop: 1000, Seq: 3}},
		Running: []Running{{Task: Task{ID: "tb1", Org: 1, SizeMFlop: 1000, Seq: 1}, Machine: 0, RunSeconds: 1}, {Task: Task{ID: "tb2", Org: 1, SizeMFlop: 1000, Seq: 2}, Machine: 1, RunSeconds: 50}},
	})
	if ds, err := (EHOSEP{}).Schedule(victim); err != nil || len(ds) == 0 || ds[0].Kind != Preempt || ds[0].Machine != 0 {
		t.Fatalf("nothing held: %+v, %v; want the preemption on a1", ds, err)
	}
	victim.Held = []bool{true, false}
	if ds, err := (EHOSEP{}).Schedule(victim); err != nil || len(ds) == 0 || ds[0].Machine != 1 {
		t.Errorf("a1 held: %+v, %v; want the preemption on b1", ds, err)
	}
	victim.Held = []bool{true, true}
	if ds, err := (EHOSEP{}).Schedule(victim); err != nil || len(ds) != 0 {
		t.Errorf("both held: %+v, %v; want none", ds, err)
	}

	r := rand.New(rand.NewPCG(21, 3))
	decided := 0
	for iter := range 400 {
		s := randomSharedState(r)
		s.Held = make([]bool, len(s.Machines))
		for m := range s.Held {
			s.Held[m] = r.IntN(3) == 0
		}
		got, err := (EHOSEP{}).Schedule(s)
		if err != nil {
			t.Fatalf("case %d: %v", iter, err)
		}
		ref, err := referenceEHOSEP(s, false)
		if err != nil || !reflect.DeepEqual(got, ref) {
			t.Fatalf("case %d: %q != reference %q (%v)", iter, summary(s, got), summary(s, ref), err)
		}
		for _, d := range got {
			if s.Held[d.Machine] {
				t.Fatalf("case %d: %v on held machine %s", iter, d.Kind, s.Machines[d.Machine].ID)
			}
		}
		decided += len(got)
	}
	if decided == 0 {
		t.Fatal("no random case decided anything: the generator tests nothing")
	}
}
