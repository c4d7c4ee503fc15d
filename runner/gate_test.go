package runner

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
)

// A start on a stale view runs nothing: between the placement this peer
// applied and its start report, the ledger declares the machine lost (as
// the leader does while the peer is paused). The start report is refused,
// and the task's process — which would create a file — never runs: the
// journal has the spawned supervisor's run with NotRun set. Once the
// machine is up again the task runs there for real.
func TestStartOnAStaleViewRunsNothing(t *testing.T) {
	l := startLedger(t, simMachines(1), nil)
	dir := t.TempDir()
	journal := filepath.Join(dir, executor.RunJournalFile)
	exec, err := executor.NewProcessExecutor(executor.ProcessConfig{
		TasksDir: filepath.Join(dir, "tasks"), Machines: l.machines, DisableRAPL: true, JournalPath: journal,
		Policy: executor.Policy{Allow: []string{"sh"}, KillGrace: 200 * time.Millisecond, UnsafeRunAsPeerUser: true},
		Logger: testLogger(l.org),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.config(exec)
	var lostFirst atomic.Bool
	propose := cfg.Propose
	cfg.Propose = func(ctx context.Context, body func(*ledger.Command)) (ledger.Result, error) {
		var c ledger.Command
		body(&c)
		if c.TaskStarted != nil && lostFirst.CompareAndSwap(false, true) {
			if _, err := l.propose(ctx, func(c2 *ledger.Command) {
				c2.MachineLost = &ledger.MachineLostCmd{Machine: c.TaskStarted.Machine}
			}); err != nil {
				t.Errorf("declare lost: %v", err)
			}
		}
		return propose(ctx, body)
	}
	marker := filepath.Join(dir, "ran")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := l.propose(ctx, func(c *ledger.Command) {
		c.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"sh", "-c", "echo x >> " + marker}}}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res.TaskIDs[0]
	r := newRunner(t, cfg)
	r.Start()

	waitFor(t, 20*time.Second, "the refused run journaled", func() bool {
		recs, err := executor.ReadRunJournal(journal)
		return err == nil && len(executor.JournalRuns(recs)) > 0 && !executor.JournalRuns(recs)[0].Open()
	})
	recs, _ := executor.ReadRunJournal(journal)
	first := executor.JournalRuns(recs)[0]
	if !first.Process || !first.NotRun || first.Task != id {
		t.Fatalf("first run %+v: want a spawned run of %s that never ran", first, id)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the task ran although its start was refused")
	}
	if tk := l.task(id); tk.State == ledger.TaskRunning {
		t.Fatalf("%s runs in the ledger: %+v", id, tk)
	}
}
