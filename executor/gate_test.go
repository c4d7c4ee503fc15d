package executor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A run's gate (TaskSpec.Gate) decides whether the task runs at all: the
// task writes a file, which must exist only when the gate said true. A run
// turned away at the gate ends `stopped`, and its journal says nothing of
// the task ran, so that the run check counts no interval for it.
func TestGateDecidesWhetherTheTaskRuns(t *testing.T) {
	for _, c := range []struct {
		name       string
		open       func(gate chan bool, stop func())
		wantRan    bool
		wantReason string
	}{
		{"confirmed", func(g chan bool, _ func()) { g <- true }, true, ReasonOK},
		{"refused", func(g chan bool, _ func()) { g <- false }, false, ReasonStopped},
		{"closed", func(g chan bool, _ func()) { close(g) }, false, ReasonStopped},
		{"stopped-at-the-gate", func(_ chan bool, stop func()) { stop() }, false, ReasonStopped},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, path := newJournaled(t, allowShell(), JournalOptions{})
			gate := make(chan bool, 1)
			spec := sh(c.name, "echo ran > ran")
			spec.Gate = gate
			if err := e.Start(context.Background(), "m1", spec); err != nil {
				t.Fatal(err)
			}
			c.open(gate, func() {
				go func() { _ = e.Stop(context.Background(), c.name, 0) }()
			})
			res := next(t, e)
			_, err := os.Stat(filepath.Join(workDir(e, c.name), "ran"))
			if ran := err == nil; ran != c.wantRan || res.Reason != c.wantReason {
				t.Fatalf("task ran %v with reason %q, want ran %v reason %q (%s)", ran, res.Reason, c.wantRan, c.wantReason, res.Detail)
			}
			runs := runsOf(t, path, c.name)
			if len(runs) != 1 || !runs[0].Process || runs[0].NotRun == c.wantRan || runs[0].Ending != JournalEnd {
				t.Fatalf("journal runs %+v, want one spawned run with NotRun %v", runs, !c.wantRan)
			}
		})
	}
}

// The simulated executor holds a gated run the same way: refused, it
// reports no work done and no energy.
func TestSimGateRefusedRunsNothing(t *testing.T) {
	e, err := NewSimExecutor(SimConfig{Machines: testMachines, Compression: 1000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	gate := make(chan bool, 1)
	gate <- false
	if err := e.Start(context.Background(), "m1", TaskSpec{ID: "t", SizeMFlop: 2000, Gate: gate}); err != nil {
		t.Fatal(err)
	}
	res := next(t, e)
	if res.Reason != ReasonStopped || res.DoneMFlop != 0 || res.EnergyMilliJ != 0 {
		t.Fatalf("refused simulated run: %+v", res)
	}
	gate = make(chan bool, 1)
	gate <- true
	if err := e.Start(context.Background(), "m1", TaskSpec{ID: "u", SizeMFlop: 2000, Gate: gate}); err != nil {
		t.Fatal(err)
	}
	if res := next(t, e); res.Reason != ReasonOK || res.DoneMFlop != 2000 {
		t.Fatalf("confirmed simulated run: %+v", res)
	}
}

// A gate that opens after the run's StartBy runs nothing: the supervisor
// itself refuses (a peer paused between confirming the start and opening
// the gate cannot hold it up), and the run ends as a lapsed lease, so the
// runner treats it as the machine's, not the task's.
func TestGateOpenedLateRunsNothing(t *testing.T) {
	e, path := newJournaled(t, allowShell(), JournalOptions{})
	gate := make(chan bool, 1)
	spec := sh("late", "echo ran > ran")
	spec.Gate = gate
	by := time.Now().Add(50 * time.Millisecond)
	spec.StartBy = func() time.Time { return by }
	if err := e.Start(context.Background(), "m1", spec); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the peer "paused" past StartBy
	gate <- true
	res := next(t, e)
	if _, err := os.Stat(filepath.Join(workDir(e, "late"), "ran")); err == nil {
		t.Fatal("the task ran although its gate opened after StartBy")
	}
	if !res.LeaseLapsed || res.Reason != ReasonStopped {
		t.Fatalf("result %+v: want a lapsed lease, stopped", res)
	}
	if runs := runsOf(t, path, "late"); len(runs) != 1 || !runs[0].NotRun {
		t.Fatalf("journal %+v: want one run with NotRun", runs)
	}
}
