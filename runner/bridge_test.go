package runner

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// startedByAnEarlierDaemon submits one task, waits until the scheduler
// assigns it, and records its start as the previous run of the daemon would
// have, before any runner runs: the ledger then says the task runs on one
// of this peer's machines, while no run of the runner carries it.
func startedByAnEarlierDaemon(t *testing.T, l *testLedger) (id, machine string, startMs int64) {
	t.Helper()
	id = l.submit(1_000_000)[0]
	waitFor(t, 20*time.Second, id+" assigned", func() bool { return l.task(id).State == ledger.TaskAssigned })
	machine = l.task(id).Machine
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	startMs = time.Now().UnixMilli()
	if _, err := l.propose(ctx, func(c *ledger.Command) { c.TaskStarted = &ledger.TaskStarted{Task: id, Machine: machine} }); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	return id, machine, startMs
}

// TestOrphanRunIsQueuedAgain: a task the ledger says runs here, which no
// run of the runner carries (its run died with a restart), makes the
// runner declare the machine lost, which closes the run's segment and
// queues the task, then bring the machine up again, where the task then
// runs to the end.
func TestOrphanRunIsQueuedAgain(t *testing.T) {
	l := startLedger(t, simMachines(1), nil)
	id, machine, _ := startedByAnEarlierDaemon(t, l)

	r := newRunner(t, l.config(l.simExecutor()))
	r.Start()
	waitFor(t, 30*time.Second, id+" done", func() bool { return l.task(id).State == ledger.TaskDone })
	tk := l.task(id)
	if tk.Attempts != 2 || len(tk.Segments) != 2 ||
		tk.Segments[0].Machine != machine || tk.Segments[0].Outcome != ledger.OutcomeLost || tk.Segments[0].Source != ledger.EnergyDeclared ||
		tk.Segments[1].Machine != machine || tk.Segments[1].Outcome != ledger.OutcomeDone || tk.Segments[1].Source != ledger.EnergySimulated {
		t.Fatalf("%s: attempts %d, segments %+v", id, tk.Attempts, tk.Segments)
	}
	var m ledger.Machine
	l.cons.View(func(lg *ledger.Ledger) { m, _ = lg.Machine(machine) })
	if m.State != ledger.MachineUp {
		t.Fatalf("machine %s is %s after the orphan was handled", machine, m.State)
	}
}

// TestOrphanStopIsReportedWithTheDeclaredEstimate: a stop the ledger waits
// for on a run no run of the runner carries is reported with the declared
// estimate, the machine's busy power over the time since the run started.
func TestOrphanStopIsReportedWithTheDeclaredEstimate(t *testing.T) {
	l := startLedger(t, simMachines(1), nil)
	id, _, startMs := startedByAnEarlierDaemon(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := l.propose(ctx, func(c *ledger.Command) { c.CancelTask = &ledger.CancelTask{Task: id} }); err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
	time.Sleep(200 * time.Millisecond)

	r := newRunner(t, l.config(l.simExecutor()))
	r.Start()
	waitFor(t, 30*time.Second, id+"'s stop reported", func() bool {
		s := l.task(id).Segments
		return len(s) == 1 && s[0].Outcome == ledger.OutcomeCancelled
	})
	seg := l.task(id).Segments[0]
	// 100 W = 100 mJ per ms, from the start report to the stop report.
	lo, hi := 100*(seg.EndMs-seg.StartMs)-100*50, 100*(time.Now().UnixMilli()-startMs)
	if seg.Source != ledger.EnergyDeclared || seg.EnergyMilliJ < lo || seg.EnergyMilliJ > hi {
		t.Fatalf("segment %+v: want the declared estimate, %d to %d mJ", seg, lo, hi)
	}
	if st := l.task(id).State; st != ledger.TaskCancelled {
		t.Fatalf("%s is %s", id, st)
	}
}
