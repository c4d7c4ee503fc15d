package sim

import (
	"context"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// Hand-worked cases of the iSPD engine's rules (ispd.go). Machines of 100
// MFLOPS and 100 W unless said otherwise: a task of S MFlop runs S/100 s.

func ispdInst(orgs []string, owners []int, mflops []int64, tasks []scenario.TaskSpec) *scenario.Instance {
	in := &scenario.Instance{Name: "ispd-tiny", Tasks: tasks}
	for _, o := range orgs {
		in.Orgs = append(in.Orgs, policy.Org{Name: o, LimitMilliW: 1_000_000})
	}
	for k, o := range owners {
		in.Machines = append(in.Machines, policy.Machine{ID: "m" + string(rune('1'+k)), Owner: o, MFLOPS: mflops[k], BusyMilliW: 100_000})
	}
	return in
}

func runISPD1(t *testing.T, in *scenario.Instance, pol string, cfg Config) *Result {
	t.Helper()
	cfg.Engine = EngineISPD
	cfg.CheckInvariants = true
	r, err := Run(context.Background(), in, mustPolicy(t, pol), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func record(t *testing.T, r *Result, id string) TaskRecord {
	t.Helper()
	for _, rec := range r.Tasks {
		if rec.ID == id {
			return rec
		}
	}
	t.Fatalf("no task %q", id)
	return TaskRecord{}
}

// TestISPDArrivalGatedTrigger: one machine. t1 arrives at 0 and runs
// 0-100 s. t2 (200 s) arrives at 50: the master is idle, the call finds no
// machine and decides nothing, so the master stays busy. t3 (50 s) arrives
// at 60: no call. At 100 t1's completion calls: t3, the smaller, starts
// (had t3's arrival been lost, t2 would), the dispatch calls again (nothing);
// at 150 t3's completion calls: t2 starts, the dispatch finds the queue
// empty. Calls: 0, 50, 100, 100, 150 = 5 (6 if every arrival called).
func TestISPDArrivalGatedTrigger(t *testing.T) {
	in := ispdInst([]string{"A"}, []int{0}, []int64{10}, []scenario.TaskSpec{
		{ID: "t1", Org: 0, SizeMFlop: 1000, SubmitSeconds: 0},
		{ID: "t2", Org: 0, SizeMFlop: 2000, SubmitSeconds: 50},
		{ID: "t3", Org: 0, SizeMFlop: 500, SubmitSeconds: 60},
	})
	r := runISPD1(t, in, "ehosep", Config{})
	if r.Passes != 5 || r.Decisions != 3 {
		t.Errorf("%d calls, %d decisions; want 5 and 3", r.Passes, r.Decisions)
	}
	for _, w := range []struct {
		id          string
		start, done float64
	}{{"t1", 0, 100}, {"t3", 100, 150}, {"t2", 150, 350}} {
		if rec := record(t, r, w.id); rec.FirstStartSeconds != w.start || rec.CompletionSeconds != w.done {
			t.Errorf("%s: %v-%v s, want %v-%v", w.id, rec.FirstStartSeconds, rec.CompletionSeconds, w.start, w.done)
		}
	}
}

// TestISPDOneDecisionPerCall: three free machines, three tasks at t = 0.
// The default engine places them in one pass; iSPD calls the scheduler
// once per decision (each arrival, or each dispatch, calls it again).
func TestISPDOneDecisionPerCall(t *testing.T) {
	var tasks []scenario.TaskSpec
	for _, id := range []string{"a", "b", "c"} {
		tasks = append(tasks, scenario.TaskSpec{ID: id, Org: 0, SizeMFlop: 100_000})
	}
	in := ispdInst([]string{"A"}, []int{0, 0, 0}, []int64{100, 100, 100}, tasks)
	r := runISPD1(t, in, "ehosep", Config{})
	if r.Passes != 3 || r.Decisions != 3 {
		t.Errorf("iSPD: %d calls, %d decisions; want 3 and 3", r.Passes, r.Decisions)
	}
	d, err := Run(context.Background(), in, mustPolicy(t, "ehosep"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Passes != 1 || d.Decisions != 3 {
		t.Errorf("default: %d passes, %d decisions; want 1 and 3", d.Passes, d.Decisions)
	}
}

// blockedCase: A owns m1, B owns m2. B's two tasks (500 s each) arrive at
// 0 and take both machines; A's task arrives at `at`. A (DP −1) may preempt
// B (DP +1) on A's m1 or on m2 — unless the machine is still blocked: each
// was given a task at 0, so it is "Bloqueado" until the update at 15 and
// "Incerto" until the one at 30.
func blockedCase(at float64) *scenario.Instance { return blockedCaseFrom(0, at) }

// blockedCaseFrom is blockedCase with B's tasks arriving at t0 (and A's at
// t0 + at).
func blockedCaseFrom(t0, at float64) *scenario.Instance {
	return ispdInst([]string{"A", "B"}, []int{0, 1}, []int64{100, 100}, []scenario.TaskSpec{
		{ID: "b1", Org: 1, SizeMFlop: 50_000, SubmitSeconds: t0},
		{ID: "b2", Org: 1, SizeMFlop: 50_000, SubmitSeconds: t0},
		{ID: "a1", Org: 0, SizeMFlop: 100_000, SubmitSeconds: t0 + at},
	})
}

func TestISPDMachineBlocking(t *testing.T) {
	for _, c := range []struct {
		at, start   float64
		preemptions int
	}{
		{5, 500, 0},  // blocked: no victim; nothing calls again until 500
		{20, 500, 0}, // uncertain after one update: still no victim
		{40, 40, 1},  // two updates: m1 and m2 are "Ocupado", B loses one
	} {
		r := runISPD1(t, blockedCase(c.at), "ehosep", Config{})
		a1 := record(t, r, "a1")
		if a1.FirstStartSeconds != c.start || r.Total.Preemptions != c.preemptions {
			t.Errorf("A's task at %v s: starts at %v s with %d preemptions; want %v s and %d",
				c.at, a1.FirstStartSeconds, r.Total.Preemptions, c.start, c.preemptions)
		}
	}
	// The same after a long time with nothing held: B's tasks arrive at
	// 1000 s, and the machines stay blocked until the second update after
	// (1005: "Incerto"; 1020: "Ocupado"), not until the next two updates
	// of a clock left behind while nothing was held.
	for _, c := range []struct {
		at, start   float64
		preemptions int
	}{{5, 1500, 0}, {15, 1500, 0}, {25, 1025, 1}} {
		r := runISPD1(t, blockedCaseFrom(1000, c.at), "ehosep", Config{})
		if a1 := record(t, r, "a1"); a1.FirstStartSeconds != c.start || r.Total.Preemptions != c.preemptions {
			t.Errorf("B at 1000 s, A at +%v s: A starts at %v s with %d preemptions; want %v s and %d",
				c.at, a1.FirstStartSeconds, r.Total.Preemptions, c.start, c.preemptions)
		}
	}
	// The default engine preempts at once, blocked or not.
	d, err := Run(context.Background(), blockedCase(5), mustPolicy(t, "ehosep"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a1 := record(t, d, "a1"); a1.FirstStartSeconds != 5 {
		t.Errorf("default engine: A's task starts at %v s, want 5", a1.FirstStartSeconds)
	}
}

// TestISPDZeroCheckpoint: A's task preempts one of B's at 400 s, with a
// 5-minute checkpoint block configured. The default engine keeps one block
// (300 s · 100 MFLOPS), wasting 100 s of work; iSPD's getCheckPoint() = 0
// keeps nothing, wasting all 400 s, and the victim restarts from zero when
// B's other task frees m2 at 500 s: 500 + 500 = 1000 s.
func TestISPDZeroCheckpoint(t *testing.T) {
	victim := func(r *Result) TaskRecord {
		for _, rec := range r.Tasks {
			if rec.Preemptions == 1 {
				return rec
			}
		}
		t.Fatalf("no task was preempted: %+v", r.Tasks)
		return TaskRecord{}
	}
	cfg := Config{CheckpointBlockSeconds: DefaultCheckpointBlockSeconds}
	r := runISPD1(t, blockedCase(400), "ehosep", cfg)
	if v := victim(r); v.WastedMFlop != 40_000 || v.CompletionSeconds != 1000 {
		t.Errorf("iSPD: victim %s wasted %v MFlop, completed at %v s; want 40000 and 1000", v.ID, v.WastedMFlop, v.CompletionSeconds)
	}
	d, err := Run(context.Background(), blockedCase(400), mustPolicy(t, "ehosep"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v := victim(d); v.WastedMFlop != 10_000 {
		t.Errorf("default: victim %s wasted %v MFlop, want 10000 (one 300 s block kept)", v.ID, v.WastedMFlop)
	}
}

func TestISPDEngineName(t *testing.T) {
	_, err := Run(context.Background(), blockedCase(5), mustPolicy(t, "ehosep"), Config{Engine: "java"})
	if err == nil {
		t.Fatal("unknown engine accepted")
	}
}
