package runner

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestReportsBatchBehindAnEntryInFlight: on a real single-peer ledger
// whose log writes are slow, a lone report goes out as a command of its
// own, and the reports that arrive while it is being committed go out
// together as one `reports` entry. Each caller gets its own report's
// verdict: the two valid starts are applied, a duplicate start of the
// first task is refused as bad_state, and all three carry the batch's
// index.
func TestReportsBatchBehindAnEntryInFlight(t *testing.T) {
	const delay = 300 * time.Millisecond
	l := startLedger(t, simMachines(3), func(c *consensus.Config) {
		c.StoreDelay = func() time.Duration { return delay }
	})
	ids := l.submit(1000, 1000, 1000)
	machineOf := map[string]string{}
	waitFor(t, 20*time.Second, "every task assigned", func() bool {
		for _, id := range ids {
			tk := l.task(id)
			if tk.State != ledger.TaskAssigned {
				return false
			}
			machineOf[id] = tk.Machine
		}
		return true
	})

	cfg := l.config(nil)
	cfg.Now = time.Now
	rep := newReporter(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { rep.loop(ctx) })
	defer func() { cancel(); wg.Wait() }()

	start := func(task string) func(*ledger.Command) {
		return func(c *ledger.Command) { c.TaskStarted = &ledger.TaskStarted{Task: task, Machine: machineOf[task]} }
	}
	type outcome struct {
		res ledger.Result
		err error
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	first := make(chan outcome, 1)
	go func() {
		res, err := rep.report(rctx, start(ids[0]))
		first <- outcome{res, err}
	}()
	// The first report is being committed (one command taken, sent).
	waitFor(t, 5*time.Second, "the first report in flight", func() bool { return rep.commands.Load() == 1 })

	bodies := []func(*ledger.Command){start(ids[1]), start(ids[2]), start(ids[0])}
	out := make([]outcome, len(bodies))
	var callers sync.WaitGroup
	for i, body := range bodies {
		callers.Go(func() {
			res, err := rep.report(rctx, body)
			out[i] = outcome{res, err}
		})
	}
	waitFor(t, 5*time.Second, "three reports queued", func() bool {
		rep.mu.Lock()
		defer rep.mu.Unlock()
		return len(rep.q) == 3 || rep.commands.Load() > 1
	})
	f := <-first
	callers.Wait()

	if f.err != nil {
		t.Fatalf("lone report: %v", f.err)
	}
	if commands, sent := rep.commands.Load(), rep.sent.Load(); commands != 2 || sent != 4 {
		t.Fatalf("%d reports in %d commands, want 4 in 2 (a lone one, then a batch of three)", sent, commands)
	}
	batch := out[0].res.Index
	if batch <= f.res.Index {
		t.Fatalf("batch at index %d, after the lone report's %d", batch, f.res.Index)
	}
	for i, o := range out {
		if o.res.Index != batch {
			t.Fatalf("report %d committed at %d, the batch at %d", i, o.res.Index, batch)
		}
	}
	if out[0].err != nil || out[1].err != nil {
		t.Fatalf("valid reports in the batch refused: %v, %v", out[0].err, out[1].err)
	}
	if ledger.CodeOf(out[2].err) != ledger.CodeBadState {
		t.Fatalf("duplicate start: %v, want %s", out[2].err, ledger.CodeBadState)
	}
	for _, id := range ids {
		if tk := l.task(id); tk.State != ledger.TaskRunning || tk.Machine != machineOf[id] || len(tk.Segments) != 1 {
			t.Fatalf("%s is %s on %q with segments %+v", id, tk.State, tk.Machine, tk.Segments)
		}
	}
}
