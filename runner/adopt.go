package runner

import (
	"context"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
)

// adopter is an executor whose runs outlive the daemon (a batch system's
// jobs: executor/slurm). At start the bridge takes over the runs a
// previous daemon left that the ledger still places on the same machine,
// instead of handling them as orphans (machine lost, task queued again),
// and has the executor end the others. The process executor is not one:
// its orphans are handled as before.
type adopter interface {
	// Leftovers are the runs a previous daemon left: task ID → machine
	// name.
	Leftovers() map[string]string
	// Adopt follows the leftover run of spec.ID on machine as a run Start
	// began and whose gate opened: its Result comes on Results.
	Adopt(ctx context.Context, machine string, spec executor.TaskSpec) error
	// EndLeftovers ends the leftovers not adopted.
	EndLeftovers(ctx context.Context) error
}

// adoptTimeout bounds the consistent read that decides the adoptions.
const adoptTimeout = 30 * time.Second

// adoptLeftovers runs once, before the first reconcile: each leftover run
// whose task the ledger (read consistently) says runs on that machine is
// tracked as a running run whose start is committed, and adopted; the
// executor ends the rest. A read that fails adopts nothing: the tasks are
// then orphans, as without adoption.
func (b *bridge) adoptLeftovers(ctx context.Context) {
	a, ok := b.exec.(adopter)
	if !ok {
		return
	}
	left := a.Leftovers()
	if len(left) == 0 {
		return
	}
	var tasks []ledger.Task
	rctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	err := b.cfg.Ledger.ReadConsistent(rctx, func(l *ledger.Ledger) {
		for id, mname := range left {
			if t, ok := l.Task(id); ok && t.State == ledger.TaskRunning && t.Machine == b.cfg.Org+"/"+mname && b.offered[mname] {
				tasks = append(tasks, t)
			}
		}
	})
	cancel()
	if err != nil {
		b.log.Warn("cannot read the ledger to adopt the runs a previous daemon left: ending them", "err", err)
		tasks = nil
	}
	for _, t := range tasks {
		b.adopt(ctx, a, t, left[t.ID])
	}
	if err := a.EndLeftovers(ctx); err != nil {
		b.log.Warn("end the runs a previous daemon left", "err", err)
	}
}

// adopt tracks task t, running on machine mname, and has the executor
// follow it.
func (b *bridge) adopt(ctx context.Context, a adopter, t ledger.Task, mname string) {
	startDone := make(chan struct{})
	close(startDone)
	r := &run{task: t, machine: t.Machine, mname: mname, attempt: t.Attempts, phase: phaseRunning,
		started: true, startCommitted: true, startDone: startDone, ended: make(chan struct{})}
	if n := len(t.Segments); n > 0 {
		r.doneMFlop = t.Segments[n-1].FromMFlop
	}
	ckDir := ""
	if t.Spec.Checkpointable {
		ckDir = b.ck.dir(t.ID)
	}
	spec := executor.TaskSpec{ID: t.ID, Argv: t.Spec.Argv, Env: t.Spec.Env,
		WallClockLimit: time.Duration(t.Spec.WallLimitMs) * time.Millisecond, OutputPatterns: t.Spec.Outputs,
		Checkpointable: t.Spec.Checkpointable, CheckpointDir: ckDir, SizeMFlop: t.SizeMFlop, DoneMFlop: r.doneMFlop,
		CPUs: t.Spec.CPUs, MemoryBytes: t.Spec.MemoryBytes, GPUs: t.Spec.GPUs}
	b.mu.Lock()
	b.runs[t.ID] = r
	b.mu.Unlock()
	if err := a.Adopt(ctx, mname, spec); err != nil {
		b.log.Warn("adopt a previous daemon's run", "task", t.ID, "machine", t.Machine, "err", err)
		b.forget(r, 0)
		return
	}
	b.log.Info("task adopted: its run outlived the previous daemon", "task", t.ID, "machine", t.Machine, "attempt", r.attempt)
	b.watchRun(ctx, r, ckDir)
}
