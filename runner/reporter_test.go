package runner

import (
	"context"
	"errors"
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
	machineOf := assignedMachines(t, l, ids)

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

// TestReportLingerGathersCloseReports: on a real single-peer ledger, the
// reporter's linger holds a report that arrives while the peer is reporting
// steadily, so that the next one shares its entry, and never holds one that
// finds the peer quiet.
func TestReportLingerGathersCloseReports(t *testing.T) {
	l := startLedger(t, simMachines(4), nil)
	ids := l.submit(1000, 1000, 1000, 1000)
	machineOf := assignedMachines(t, l, ids)
	start := func(task string) func(*ledger.Command) {
		return func(c *ledger.Command) { c.TaskStarted = &ledger.TaskStarted{Task: task, Machine: machineOf[task]} }
	}
	run := func(linger, busyWindow time.Duration) (*reporter, context.CancelFunc, *sync.WaitGroup) {
		cfg := l.config(nil)
		cfg.Now = time.Now
		cfg.ReportLinger = linger
		rep := newReporter(cfg)
		rep.busyWindow = busyWindow
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { rep.loop(ctx) })
		return rep, cancel, &wg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A peer that reports rarely (every report outside the busy window)
	// never lingers, however long the linger: both reports commit alone.
	rep, stop, wg := run(time.Hour, time.Nanosecond)
	for _, id := range ids[:2] {
		if _, err := rep.report(ctx, start(id)); err != nil {
			t.Fatalf("quiet report of %s: %v", id, err)
		}
	}
	stop()
	wg.Wait()
	if c, s := rep.commands.Load(), rep.sent.Load(); c != 2 || s != 2 {
		t.Fatalf("quiet peer: %d reports in %d commands, want 2 in 2", s, c)
	}

	// A busy peer: the first report ever finds it quiet and goes at
	// once; the next one, close behind, lingers, and a third arriving
	// within the linger joins it in one `reports` entry.
	rep, stop, wg = run(2*time.Second, time.Hour)
	defer func() { stop(); wg.Wait() }()
	first, err := rep.report(ctx, start(ids[2]))
	if err != nil {
		t.Fatalf("first report: %v", err)
	}
	type outcome struct {
		res ledger.Result
		err error
	}
	out := make([]outcome, 2)
	var callers sync.WaitGroup
	for i, body := range []func(*ledger.Command){start(ids[3]), start(ids[2])} {
		callers.Go(func() {
			res, err := rep.report(ctx, body)
			out[i] = outcome{res, err}
		})
	}
	callers.Wait()
	if c, s := rep.commands.Load(), rep.sent.Load(); c != 2 || s != 3 {
		t.Fatalf("busy peer: %d reports in %d commands, want 3 in 2 (a lone one, then a batch of two)", s, c)
	}
	if out[0].err != nil || out[0].res.Index <= first.Index || out[1].res.Index != out[0].res.Index {
		t.Fatalf("lingering reports: %+v after the first at %d; want both in one later entry", out, first.Index)
	}
	if ledger.CodeOf(out[1].err) != ledger.CodeBadState {
		t.Fatalf("duplicate start in the batch: %v, want %s", out[1].err, ledger.CodeBadState)
	}
}

// TestReportLingerHoldsABusyPeersReport: a report close behind the previous
// one is held for the linger (here an hour) and, when the reporter closes
// meanwhile, fails as closed without reaching the log.
func TestReportLingerHoldsABusyPeersReport(t *testing.T) {
	l := startLedger(t, simMachines(2), nil)
	ids := l.submit(1000, 1000)
	waitFor(t, 20*time.Second, "every task assigned", func() bool {
		return l.task(ids[0]).State == ledger.TaskAssigned && l.task(ids[1]).State == ledger.TaskAssigned
	})
	cfg := l.config(nil)
	cfg.Now = time.Now
	cfg.ReportLinger = time.Hour
	rep := newReporter(cfg)
	rep.busyWindow = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { rep.loop(ctx) })
	start := func(task string) func(*ledger.Command) {
		m := l.task(task).Machine
		return func(c *ledger.Command) { c.TaskStarted = &ledger.TaskStarted{Task: task, Machine: m} }
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if _, err := rep.report(rctx, start(ids[0])); err != nil {
		t.Fatalf("first report: %v", err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := rep.report(rctx, start(ids[1]))
		held <- err
	}()
	waitFor(t, 5*time.Second, "the second report queued", func() bool {
		rep.mu.Lock()
		defer rep.mu.Unlock()
		return len(rep.q) == 1
	})
	time.Sleep(100 * time.Millisecond)
	if c := rep.commands.Load(); c != 1 {
		t.Fatalf("%d commands sent while the second report lingers, want 1", c)
	}
	cancel()
	wg.Wait()
	if err := <-held; !errors.Is(err, errClosed) {
		t.Fatalf("held report after close: %v, want %v", err, errClosed)
	}
	if tk := l.task(ids[1]); tk.State != ledger.TaskAssigned {
		t.Fatalf("%s is %s: the held report reached the log", ids[1], tk.State)
	}
}
