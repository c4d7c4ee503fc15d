package policy

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestLiveBackfillHandCases: a wide task waiting for a busy machine.
// Machine big (4 cpus) runs a 2-cpu task for 10 s more; small (1 cpu) is
// free. The queue: wide (4 cpus, 20 s), then narrow tasks.
func TestLiveBackfillHandCases(t *testing.T) {
	base := func() *State {
		return &State{
			Orgs: []Org{{Name: "a", LimitMilliW: 10_000}, {Name: "b", LimitMilliW: 10_000}},
			Machines: []Machine{
				{ID: "big", Owner: 0, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 4}},
				{ID: "small", Owner: 1, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 1}},
			},
			Running: []Running{{Task: Task{ID: "run", Org: 1, SizeMFlop: 1, Seq: 1, Request: Resources{CPUs: 2}, WallLimitMs: 30_000}, Machine: 0, RunSeconds: 20}},
			Queued: []Task{
				{ID: "wide", Org: 0, SizeMFlop: 1, Seq: 2, Request: Resources{CPUs: 4}, WallLimitMs: 20_000},
				// Would hold big's 2 free cpus past 10 s: delays wide.
				{ID: "long", Org: 1, SizeMFlop: 1, Seq: 3, Request: Resources{CPUs: 2}, WallLimitMs: 60_000},
				// Ends by 10 s: fits before wide's reservation.
				{ID: "short", Org: 1, SizeMFlop: 1, Seq: 4, Request: Resources{CPUs: 2}, WallLimitMs: 9_000},
				// One cpu, any length: small is free and wide cannot use it.
				{ID: "tiny", Org: 0, SizeMFlop: 1, Seq: 5, Request: Resources{CPUs: 1}},
			},
		}
	}
	cases := []struct {
		mode     string
		starts   []string
		reserved map[string]int64
	}{
		{"fcfs", nil, nil},
		// long would run on big until 60 s: refused; short ends at 9 s;
		// tiny takes small (least energy equal, ID order: big first,
		// but big's room is wide's at 10 s and tiny never ends).
		{"easy", []string{"short", "tiny"}, map[string]int64{"wide": 10_000}},
		// long is reserved after wide (30 s, on big beside nothing);
		// short fits before wide and beside nothing else; tiny takes small.
		{"conservative", []string{"short", "tiny"}, map[string]int64{"wide": 10_000, "long": 30_000}},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			s := base()
			p, err := LiveBackfill{Mode: c.mode}.Plan(s)
			if err != nil {
				t.Fatal(err)
			}
			var starts []string
			for _, d := range p.Starts {
				starts = append(starts, d.Task)
			}
			res := map[string]int64{}
			for _, r := range p.Reservations {
				res[r.Task] = r.AtMs
				if r.Machine != 0 {
					t.Errorf("%s reserved on %s, want big", r.Task, s.Machines[r.Machine].ID)
				}
			}
			if len(c.reserved) == 0 {
				c.reserved = map[string]int64{}
			}
			if !reflect.DeepEqual(starts, c.starts) || !reflect.DeepEqual(res, c.reserved) {
				t.Fatalf("starts %v reservations %v, want %v %v", starts, res, c.starts, c.reserved)
			}
		})
	}
	// Under ehosep the job policy changes nothing: the pass is the base's.
	if p, err := WithJobPolicy(EHOSEP{}, "ehosep"); err != nil || p.Name() != "ehosep" {
		t.Fatalf("WithJobPolicy(ehosep) = %v, %v", p, err)
	}
	if _, err := WithJobPolicy(EHOSEP{}, "sjf"); err == nil {
		t.Fatal("WithJobPolicy accepted an unknown job policy")
	}
}

// TestLiveBackfillPowerReservation: the head's organisation may draw 100
// mW; one of its tasks draws 100 mW for 5 s more on m1. The head (on the
// free m2) must wait for that power; a later task of the same
// organisation that would still draw at 5 s is not started, one that
// ends by then is.
func TestLiveBackfillPowerReservation(t *testing.T) {
	s := &State{
		Orgs: []Org{{Name: "a", LimitMilliW: 200}},
		Machines: []Machine{
			{ID: "m1", Owner: 0, MFLOPS: 100, BusyMilliW: 100},
			{ID: "m2", Owner: 0, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 4}},
		},
		Running: []Running{{Task: Task{ID: "run", Org: 0, SizeMFlop: 1, Seq: 1, WallLimitMs: 5_000}, Machine: 0}},
		Queued: []Task{
			{ID: "head", Org: 0, SizeMFlop: 1, Seq: 2, Request: Resources{CPUs: 4}, WallLimitMs: 1_000},
			{ID: "late", Org: 0, SizeMFlop: 1, Seq: 3, Request: Resources{CPUs: 2}, WallLimitMs: 6_000},
			{ID: "early", Org: 0, SizeMFlop: 1, Seq: 4, Request: Resources{CPUs: 2}, WallLimitMs: 5_000},
		},
	}
	// head draws all of m2 (100 mW): 100 + 100 ≤ 200 now, so it starts.
	p, _ := LiveBackfill{Mode: "easy"}.Plan(s)
	if len(p.Starts) != 1 || p.Starts[0].Task != "head" {
		t.Fatalf("with room for its power the head starts: %+v", p)
	}
	s.Orgs[0].LimitMilliW = 150
	p, _ = LiveBackfill{Mode: "easy"}.Plan(s)
	want := LivePlan{
		Starts:       []Decision{{Kind: Allocate, Task: "early", Org: 0, Machine: 1}},
		Reservations: []LiveReservation{{Task: "head", Org: 0, Machine: 1, AtMs: 5_000}},
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("power reservation:\n got %+v\nwant %+v", p, want)
	}
}

// liveRun is a task running in the event-driven check: from start until
// end (absolute ms), on machine m.
type liveRun struct {
	t          Task
	m          int
	start, end int64
}

// TestLiveBackfillProperties drives random federations event by event, as
// a live federation's passes would see them, and checks after every pass:
// the starts apply (ApplyDecisions: room on each machine, PI ≤ Lim after
// each decision); a start delays no reservation of the same pass; and over
// time no task starts after a reservation it was given, nor is its
// reservation moved later. For easy this holds with tasks ending before
// their limit; for conservative, whose reservations are recomputed every
// pass, with tasks running their limit; for ehosep-easy, whose head
// changes with the organisations' DP, only within a pass (docs/POLICY.md
// §8).
func TestLiveBackfillProperties(t *testing.T) {
	for _, c := range []struct {
		mode  string
		early bool
	}{{"fcfs", true}, {"easy", true}, {"easy", false}, {"conservative", false}, {EHOSEPEasy, true}} {
		t.Run(fmt.Sprintf("%s/early=%v", c.mode, c.early), func(t *testing.T) {
			r := rand.New(rand.NewPCG(6, uint64(len(c.mode))))
			checked := 0
			for i := range 300 {
				checked += liveEventRun(t, r, c.mode, c.early, i)
			}
			if c.mode != "fcfs" && checked < 100 {
				t.Fatalf("only %d reservations checked", checked)
			}
		})
	}
}

func liveEventRun(t *testing.T, r *rand.Rand, mode string, early bool, run int) (checked int) {
	s0 := randomLiveState(r)
	b0 := &livePass{s: s0}
	var running []liveRun
	for _, x := range s0.Running {
		end := int64(1 << 40)
		if l := b0.limitOn(x.Task, x.Machine); l > 0 {
			end = max(1, l-int64(x.RunSeconds*1000+0.5))
			if early {
				end = 1 + r.Int64N(end)
			}
		} else if early {
			end = 1 + r.Int64N(20_000)
		}
		running = append(running, liveRun{x.Task, x.Machine, -int64(x.RunSeconds*1000 + 0.5), end})
	}
	if !early {
		// Tasks end at their limits: the ones in the queue must have one.
		for i := range s0.Queued {
			if s0.Queued[i].WallLimitMs == 0 {
				s0.Queued[i].WallLimitMs = 4_000
			}
		}
	}
	queued := s0.Queued
	promised := map[string]int64{}
	now := int64(0)
	for step := 0; step < 200 && (len(queued) > 0 || len(running) > 0); step++ {
		s := &State{Orgs: s0.Orgs, Machines: s0.Machines, Queued: queued}
		for _, x := range running {
			s.Running = append(s.Running, Running{Task: x.t, Machine: x.m, RunSeconds: float64(now-x.start) / 1000})
		}
		p, err := LiveBackfill{Mode: mode}.Plan(s)
		if err != nil {
			t.Fatalf("run %d at %d: %v", run, now, err)
		}
		if ref, _ := referenceLiveBackfill(mode, s); !reflect.DeepEqual(ref, p) {
			t.Fatalf("run %d at %d: plan %+v, reference %+v", run, now, p, ref)
		}
		after, err := ApplyDecisions(s, p.Starts)
		if err != nil {
			t.Fatalf("run %d at %d: the plan does not apply: %v", run, now, err)
		}
		checkNoStartDelays(t, after, p, run, now)
		for _, d := range p.Starts {
			if at, ok := promised[d.Task]; ok && now > at && mode != EHOSEPEasy {
				t.Fatalf("run %d: %s starts at %d, after its reservation at %d", run, d.Task, now, at)
			}
		}
		for _, x := range p.Reservations {
			checked++
			abs := now + x.AtMs
			// ehosep-easy's head is EHOSEP's pick, which changes with the
			// organisations' DP between passes: only within a pass is its
			// reservation protected (docs/POLICY.md §8).
			if at, ok := promised[x.Task]; ok && abs > at && mode != EHOSEPEasy {
				t.Fatalf("run %d at %d: %s's reservation moved from %d to %d", run, now, x.Task, at, abs)
			}
			promised[x.Task] = abs
		}
		// Start the decided tasks; end them at their limit, or earlier.
		b := &livePass{s: s}
		var left []Task
		started := map[string]int{}
		for _, d := range p.Starts {
			started[d.Task] = d.Machine
		}
		for _, q := range queued {
			m, ok := started[q.ID]
			if !ok {
				left = append(left, q)
				continue
			}
			end := int64(1 << 40)
			if l := b.limitOn(q, m); l > 0 {
				end = now + l
				if early {
					end = now + 1 + r.Int64N(l)
				}
			} else if early {
				end = now + 1 + r.Int64N(20_000)
			}
			running = append(running, liveRun{q, m, now, end})
		}
		queued = left
		next := int64(1 << 40)
		for _, x := range running {
			next = min(next, x.end)
		}
		for _, x := range p.Reservations {
			next = min(next, now+x.AtMs)
		}
		if next == 1<<40 || next <= now {
			break
		}
		now = next
		running = slicesDeleteFunc(running, func(x liveRun) bool { return x.end <= now })
	}
	return checked
}

func slicesDeleteFunc(rs []liveRun, del func(liveRun) bool) []liveRun {
	out := rs[:0]
	for _, x := range rs {
		if !del(x) {
			out = append(out, x)
		}
	}
	return out
}

// checkNoStartDelays: on the state after the pass's starts (the started
// tasks running from now), each reservation, taken in order beside the
// ones before it, is still available at its instant: no start delayed it.
func checkNoStartDelays(t *testing.T, after *State, p LivePlan, run int, now int64) {
	t.Helper()
	b := newLivePass(after)
	byID := map[string]Task{}
	for _, q := range after.Queued {
		byID[q.ID] = q
	}
	for _, x := range p.Reservations {
		q := byID[x.Task]
		if !b.fitsFrom(q, x.Machine, x.AtMs) {
			t.Fatalf("run %d at %d: the starts delay %s's reservation at %d on machine %d", run, now, x.Task, x.AtMs, x.Machine)
		}
		_, at := b.earliest(q, Eligible(after.Machines, q, after.Orgs), Unbounded)
		if at > x.AtMs {
			t.Fatalf("run %d at %d: %s's earliest start %d is after its reservation %d", run, now, x.Task, at, x.AtMs)
		}
		b.add(q, x.Machine, x.AtMs)
	}
}

// TestLiveBackfillUnbounded: a task behind the head whose own earliest
// start is unbounded (it may only use a machine held by a task without a
// limit) does not stop backfilling; a head whose earliest start is
// unbounded does: nothing starts past it.
func TestLiveBackfillUnbounded(t *testing.T) {
	state := func(blockerLimit int64) *State {
		return &State{
			Orgs: []Org{{Name: "a", LimitMilliW: 10_000}, {Name: "b", LimitMilliW: 10_000}},
			Machines: []Machine{
				{ID: "big", Owner: 0, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 4}, Policy: &OwnerPolicy{AllowAny: true, Orgs: []string{"a"}}},
				{ID: "mid", Owner: 1, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 2}},
			},
			Running: []Running{
				{Task: Task{ID: "r1", Org: 0, SizeMFlop: 1, Seq: 1, Request: Resources{CPUs: 2}, WallLimitMs: blockerLimit}, Machine: 0},
				{Task: Task{ID: "r2", Org: 1, SizeMFlop: 1, Seq: 2, Request: Resources{CPUs: 1}}, Machine: 1},
			},
			Queued: []Task{
				{ID: "wide", Org: 0, SizeMFlop: 1, Seq: 3, Request: Resources{CPUs: 4}, WallLimitMs: 20_000},
				{ID: "stuck", Org: 1, SizeMFlop: 1, Seq: 4, Request: Resources{CPUs: 2}, WallLimitMs: 1_000},
				{ID: "tiny", Org: 0, SizeMFlop: 1, Seq: 5, Request: Resources{CPUs: 1}, WallLimitMs: 5_000},
			},
		}
	}
	p, err := LiveBackfill{Mode: "easy"}.Plan(state(10_000))
	want := LivePlan{
		Starts:       []Decision{{Kind: Allocate, Task: "tiny", Org: 0, Machine: 0}},
		Reservations: []LiveReservation{{Task: "wide", Org: 0, Machine: 0, AtMs: 10_000}},
	}
	if err != nil || !reflect.DeepEqual(p, want) {
		t.Fatalf("an unbounded task behind the head:\n got %+v, %v\nwant %+v", p, err, want)
	}
	p, err = LiveBackfill{Mode: "easy"}.Plan(state(0))
	if err != nil || len(p.Starts) != 0 || len(p.Reservations) != 0 {
		t.Fatalf("an unbounded head: %+v, %v; want nothing started past it", p, err)
	}
}

// TestPendingUnderJobPolicy: under a backfilling job policy a task with
// room waits its turn (job_policy) instead of the next pass, and none
// waits for a preemption; under ehosep the reasons are EHOSEP's.
func TestPendingUnderJobPolicy(t *testing.T) {
	rs := func() map[string]PendingReason {
		return map[string]PendingReason{"a": {PendingNextPass, "x"}, "b": {PendingFairShare, "y"}, "c": {PendingPowerLimit, "z"}}
	}
	if got := PendingUnder("ehosep", rs()); !reflect.DeepEqual(got, rs()) {
		t.Fatalf("under ehosep: %+v", got)
	}
	for _, job := range JobModes() {
		got := PendingUnder(job, rs())
		if got["a"].Code != PendingJobPolicy || got["b"].Code != PendingNoResources || got["c"] != rs()["c"] {
			t.Fatalf("under %s: %+v", job, got)
		}
	}
}

// TestEHOSEPEasyServesByDP: organisation a runs a task on half of its
// 4-CPU machine; b owns a 1-CPU machine and runs nothing (the smaller
// DP). a's narrow task was submitted before b's wide one. easy starts a's
// (first submitted) and reserves b's behind it; ehosep-easy serves b first:
// its wide task is the head, reserved when a's running task ends, and a's
// narrow task, which would hold the room past then, waits.
func TestEHOSEPEasyServesByDP(t *testing.T) {
	s := &State{
		Orgs: []Org{{Name: "a", LimitMilliW: 10_000}, {Name: "b", LimitMilliW: 10_000}},
		Machines: []Machine{
			{ID: "big", Owner: 0, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 4}},
			{ID: "small", Owner: 1, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 1}},
		},
		Running: []Running{{Task: Task{ID: "run", Org: 0, SizeMFlop: 1, Seq: 1, Request: Resources{CPUs: 2}, WallLimitMs: 10_000}, Machine: 0}},
		Queued: []Task{
			{ID: "a-narrow", Org: 0, SizeMFlop: 1, Seq: 2, Request: Resources{CPUs: 2}, WallLimitMs: 60_000},
			{ID: "b-wide", Org: 1, SizeMFlop: 1, Seq: 3, Request: Resources{CPUs: 4}, WallLimitMs: 20_000},
		},
	}
	easy, _ := LiveBackfill{Mode: "easy"}.Plan(s)
	want := LivePlan{
		Starts:       []Decision{{Kind: Allocate, Task: "a-narrow", Org: 0, Machine: 0}},
		Reservations: []LiveReservation{{Task: "b-wide", Org: 1, Machine: 0, AtMs: 60_000}},
	}
	if !reflect.DeepEqual(easy, want) {
		t.Fatalf("easy:\n got %+v\nwant %+v", easy, want)
	}
	ee, err := LiveBackfill{Mode: EHOSEPEasy}.Plan(s)
	want = LivePlan{Reservations: []LiveReservation{{Task: "b-wide", Org: 1, Machine: 0, AtMs: 10_000}}}
	if err != nil || !reflect.DeepEqual(ee, want) {
		t.Fatalf("ehosep-easy:\n got %+v, %v\nwant %+v", ee, err, want)
	}
	pol, err := WithJobPolicy(EHOSEP{}, EHOSEPEasy)
	if err != nil || pol.Name() != EHOSEPEasy {
		t.Fatalf("ehosep-easy as a job policy: %v, %v", pol, err)
	}
	if ds, err := pol.Schedule(s); err != nil || !reflect.DeepEqual(ds, ee.Starts) {
		t.Fatalf("the voted ehosep-easy decides %+v, %v; want its plan's starts %+v", ds, err, ee.Starts)
	}
	for _, bad := range []string{"ehosep_easy", "EHOSEP-EASY", "easy-ehosep", " ehosep-easy"} {
		if _, err := WithJobPolicy(EHOSEP{}, bad); err == nil {
			t.Errorf("job policy %q accepted", bad)
		}
	}
}
