package runner

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// TestRunsAllocationsAndReportsThem: on a real single-peer ledger, the
// runner alone (no node) runs what the scheduler places on its machines
// with the simulated executor and reports each run: every task ends done,
// with one closed segment carrying the executor's energy, after one start
// and one end report each.
func TestRunsAllocationsAndReportsThem(t *testing.T) {
	l := startLedger(t, simMachines(3), nil)
	r := newRunner(t, l.config(l.simExecutor()))
	r.Start()

	ids := l.submit(1_000_000, 1_000_000, 2_000_000, 500_000, 1_000_000, 250_000)
	for _, id := range ids {
		waitFor(t, 30*time.Second, id+" done", func() bool {
			s := l.task(id).State
			if s.Terminal() && s != ledger.TaskDone {
				t.Fatalf("task %s ended %s: %+v", id, s, l.task(id))
			}
			return s == ledger.TaskDone
		})
	}
	for _, id := range ids {
		tk := l.task(id)
		// 100 W over size / 10,000 MFLOPS seconds, in mJ.
		want := 100_000 * tk.SizeMFlop / 10_000
		if tk.Attempts != 1 || len(tk.Segments) != 1 || tk.Segments[0].Outcome != ledger.OutcomeDone ||
			tk.Segments[0].Source != ledger.EnergySimulated || abs(tk.Segments[0].EnergyMilliJ-want) > 1 {
			t.Fatalf("task %s: attempts %d, segments %+v (want %d mJ simulated)", id, tk.Attempts, tk.Segments, want)
		}
	}
	if _, sent := r.ReportCounts(); sent != uint64(2*len(ids)) {
		t.Fatalf("%d reports sent, want %d (a start and an end per task)", sent, 2*len(ids))
	}
	if running := r.RunningByMachine(); len(running) != 0 {
		t.Fatalf("runs still tracked after every task ended: %v", running)
	}
}

// TestCloseWaitsForItsGoroutines: Close returns only once every goroutine
// the runner started has ended, so that nothing the runner was given (the
// proposer, the output shipping) is still in use or called afterwards, and
// no report is proposed after Close. A run ends while the shipping of its
// outputs blocks; Close cancels the shipping, which takes a while to give
// up. Without Close waiting, the shipping would still be in progress when
// Close returns, and the end report would follow it.
func TestCloseWaitsForItsGoroutines(t *testing.T) {
	l := startLedger(t, simMachines(1), nil)
	cfg := l.config(l.simExecutor())

	var (
		active, late atomic.Int32
		closed       atomic.Bool
	)
	// enter counts a call into the runner's dependencies; the func it
	// returns ends it.
	enter := func() func() {
		if closed.Load() {
			late.Add(1)
		}
		active.Add(1)
		return func() { active.Add(-1) }
	}
	propose := cfg.Propose
	cfg.Propose = func(ctx context.Context, body func(*ledger.Command)) (ledger.Result, error) {
		defer enter()()
		return propose(ctx, body)
	}
	shipping := make(chan struct{})
	cfg.ShipOutputs = func(ctx context.Context, _ ledger.Task, _ string, _ map[string]string) error {
		defer enter()()
		close(shipping)
		<-ctx.Done()
		time.Sleep(300 * time.Millisecond) // slow to give up
		return ctx.Err()
	}
	r := newRunner(t, cfg)
	r.Start()

	id := l.submit(1_000_000)[0]
	select {
	case <-shipping:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s's outputs never shipped: %+v", id, l.task(id))
	}
	// As the node closes: drop the work, close the executor, close.
	r.SetClosing(true)
	if err := cfg.Executor.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Close()
	closed.Store(true)
	if n := active.Load(); n != 0 {
		t.Fatalf("Close returned with %d calls of the runner still in progress", n)
	}
	time.Sleep(500 * time.Millisecond)
	if n := late.Load(); n != 0 {
		t.Fatalf("%d calls made by the runner after Close", n)
	}
	if tk := l.task(id); tk.State != ledger.TaskRunning || len(tk.Segments) != 1 || tk.Segments[0].Outcome != ledger.OutcomeRunning {
		t.Fatalf("after Close, %s is %s with segments %+v: a report went out", id, tk.State, tk.Segments)
	}
}

func abs(x int64) int64 { return max(x, -x) }
