package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/checkpoint"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// The bridge runs what the ledger places on this peer's machines.
//
// The ledger is the truth and the subscription's events are hints: each
// event (and a periodic tick) wakes reconcile, which compares the ledger's
// Allocations and PendingStops for this organisation with the runs the
// bridge tracks, and acts on the difference:
//
//   - an assigned task with no run: fetch its inputs, start it, report
//     TaskStarted;
//   - a run the ledger preempted or cancelled (a pending stop): stop it
//     (SIGTERM, grace, SIGKILL) and report TaskStopped with the measured
//     energy;
//   - a run the ledger no longer places here at all (the machine was
//     declared lost, or the task was taken off before it started): stop it
//     and report nothing;
//   - a task the ledger says runs here but that no run of this daemon
//     carries (an orphan, after a restart): declare the machine lost, which
//     queues the task again, then bring the machine back up (Heartbeat);
//   - a pending stop no run of this daemon carries: report it stopped with
//     the declared-power estimate.
//
// Checkpointable tasks (docs/CHECKPOINTS.md): an assigned task whose
// previous run is still being stopped elsewhere (an open preempting
// segment) waits for that stop report, which carries the checkpoint; the
// start restores the recorded checkpoint into $CHECKPOINT_DIR (or starts
// from zero when it cannot, and says so in TaskStarted); a preempted run
// gets checkpoint.grace to write its final checkpoint, which is packed,
// replicated and recorded with TaskStopped.
//
// An executor Result ships the outputs to the submitting peer, then
// reports TaskEnded (or TaskStopped for a stop the ledger asked for). A run
// stays tracked until its last report is committed, and the task is
// "settled" until the local ledger has applied that report, so a lagging
// local view never mistakes a finished run for an orphan.
//
// A run is one allocation: the task, the machine and the attempt (the
// ledger's run number of the task, Task.Attempts once the run's start is
// recorded). The ledger may preempt a task and place it on the same
// machine again while the earlier run's end is still being reported (its
// outputs waiting for an unreachable submitter, say); task and machine
// then match both runs, the attempt tells them apart. A task's next run
// starts only once its previous run here is forgotten, that is, once that
// run's last report is committed (or refused): the ledger relies on this
// order to book an end report on the right run (docs/LEDGER.md).
type bridge struct {
	cfg     Config
	log     *slog.Logger
	exec    executor.Executor
	rep     *reporter
	ck      *checkpoints
	offered map[string]bool // machine names
	// wg is the runner's: Close waits for every goroutine of the bridge.
	wg *sync.WaitGroup
	// closing is the runner's (Runner.SetClosing).
	closing *atomic.Bool

	mu      sync.Mutex
	runs    map[string]*run   // by task ID
	settled map[string]uint64 // task → index of our last report on it
	busy    map[string]bool   // orphan handling in flight, by key
	// waiting: assigned checkpointable tasks held back until the stop of
	// their previous run is reported, since when.
	waiting map[string]time.Time
	wake    chan struct{}
}

type phase int

const (
	phaseStarting  phase = iota // fetching inputs, starting, reporting the start
	phaseRunning                // TaskStarted committed
	phaseReporting              // the executor's Result arrived
)

// run is one execution of a task on one of this peer's machines.
type run struct {
	task    ledger.Task // as allocated
	machine string      // machine ID, <org>/<name>
	mname   string      // machine name in the executor
	// attempt is the run's number among the task's runs, from 1: the
	// ledger's Task.Attempts once this run's start is recorded.
	attempt int

	phase          phase
	started        bool // the executor accepted Start
	startCommitted bool // TaskStarted is in the log
	stopReason     string
	stopSent       bool
	discard        bool // report nothing for this run
	startDone      chan struct{}
	// doneMFlop is the work the run started from (restored or recorded).
	doneMFlop int64
	// ended is closed when the executor's Result arrives.
	ended chan struct{}
}

func newBridge(cfg Config, wg *sync.WaitGroup, closing *atomic.Bool, rep *reporter, ck *checkpoints) *bridge {
	offered := make(map[string]bool, len(cfg.Machines))
	for _, m := range cfg.Machines {
		offered[m] = true
	}
	return &bridge{
		cfg: cfg, log: cfg.Logger, exec: cfg.Executor, rep: rep, ck: ck, offered: offered, wg: wg, closing: closing,
		runs: map[string]*run{}, settled: map[string]uint64{}, busy: map[string]bool{}, waiting: map[string]time.Time{}, wake: make(chan struct{}, 1),
	}
}

func (b *bridge) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// loop reconciles on every committed change to this organisation's
// machines and on a tick.
func (b *bridge) loop(ctx context.Context) {
	sub := b.cfg.Ledger.Subscribe(b.cfg.Org)
	defer func() { sub.Close() }()
	events := sub.C()
	// The fallback tick ends on the wall-clock grid of its interval
	// (p2p.UntilGrid), with the peer's other periodic chores: an idle
	// peer wakes once for all of them.
	t := time.NewTimer(p2p.UntilGrid(time.Now(), b.cfg.ReconcileInterval))
	defer t.Stop()
	b.adoptLeftovers(ctx) // before any run is taken for an orphan
	for {
		var soon <-chan time.Time
		if !b.closing.Load() {
			if b.reconcile(ctx) {
				// A stop report that unblocks a waiting start comes as no
				// event of this organisation's: look again shortly.
				soon = time.After(stopWaitPoll)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-soon:
		case _, ok := <-events:
			if !ok {
				if errors.Is(sub.Err(), consensus.ErrSubscriberTooSlow) {
					sub = b.cfg.Ledger.Subscribe(b.cfg.Org)
					events = sub.C()
				} else {
					events = nil
				}
				continue
			}
			// A burst of events (one decisions entry) makes one pass.
			for drained := false; !drained; {
				select {
				case _, ok := <-events:
					drained = !ok
				default:
					drained = true
				}
			}
		case <-t.C:
			t.Reset(p2p.UntilGrid(time.Now(), b.cfg.ReconcileInterval))
		case <-b.wake:
		}
	}
}

// stopWaitPoll paces reconcile while a start waits for a stop report.
const stopWaitPoll = 100 * time.Millisecond

// reconcile compares the local view of the ledger with the tracked runs. It
// reports whether a start waits for the stop of a previous run.
//
// It runs on every wake-up (each decisions entry, each run started or
// forgotten), so it reads the ledger's Placements, which copy no task, and
// copies only the tasks it starts (startable). Lock order: b.mu, then the
// ledger's (no View callback takes b.mu).
func (b *bridge) reconcile(ctx context.Context) bool {
	var (
		placements []ledger.Placement
		stops      []ledger.PendingStop
		applied    uint64
	)
	b.cfg.Ledger.View(func(l *ledger.Ledger) {
		placements = l.Placements(b.cfg.Org)
		stops = l.PendingStops(b.cfg.Org)
		applied = l.AppliedIndex()
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, idx := range b.settled {
		if idx <= applied {
			delete(b.settled, id)
		}
	}
	// The run each placement stands for: an assigned task's next attempt,
	// a running task's current one.
	current := make(map[string]runID, len(placements)) // task → run
	for _, p := range placements {
		want := p.Attempts
		if p.State == ledger.TaskAssigned {
			want++
		}
		current[p.Task] = runID{machine: p.Machine, attempt: want}
	}
	// A machine still holding a run the executor has not finished whose
	// task the ledger no longer places there (one stopping after a
	// preemption, say) takes no new run yet: the room the new run was
	// given is the stopping run's. Runs of tasks still placed there are
	// the machine's other shares (several tasks share a multi-CPU machine).
	var occupied map[string]bool
	for _, r := range b.runs {
		if r.phase != phaseReporting && current[r.task.ID].machine != r.machine {
			if occupied == nil {
				occupied = map[string]bool{}
			}
			occupied[r.machine] = true
		}
	}
	var (
		waiting map[string]bool
		starts  []ledger.Placement
	)
	for _, p := range placements {
		if _, ok := b.settled[p.Task]; ok {
			continue
		}
		if b.runs[p.Task] != nil {
			// Ours, or a previous run of it winding down or reporting its
			// end (on another machine or this one): the next pass starts
			// it once that one is gone.
			continue
		}
		if !b.offered[p.MachineName] {
			continue
		}
		switch p.State {
		case ledger.TaskAssigned:
			if b.awaitStop(p) {
				if waiting == nil {
					waiting = map[string]bool{}
				}
				waiting[p.Task] = true
				continue
			}
			if !occupied[p.Machine] {
				starts = append(starts, p)
			}
		case ledger.TaskRunning:
			machine, task := p.Machine, p.Task
			b.orphan(ctx, "run "+machine, func(ctx context.Context) { b.orphanRun(ctx, machine, task) })
		}
	}
	b.startPlaced(ctx, starts)
	var stopping map[stoppingRun]bool
	for _, s := range stops {
		if stopping == nil {
			stopping = map[stoppingRun]bool{}
		}
		stopping[stoppingRun{task: s.Task, run: runID{machine: s.Machine, attempt: s.Attempt}}] = true
		if _, ok := b.settled[s.Task]; ok {
			continue
		}
		if r := b.runs[s.Task]; r != nil && r.machine == s.Machine && r.attempt == s.Attempt {
			b.requestStop(ctx, r, string(s.Outcome))
			continue
		}
		// No run of ours is that run (a later run of the task may be
		// tracked, even on the same machine: it is not the one to stop).
		ps := s
		b.orphan(ctx, "stop "+s.Task+"@"+runKey(s.Machine, s.Attempt), func(ctx context.Context) { b.orphanStop(ctx, ps) })
	}
	for _, r := range b.runs {
		id := runID{machine: r.machine, attempt: r.attempt}
		if r.phase == phaseReporting || current[r.task.ID] == id || stopping[stoppingRun{task: r.task.ID, run: id}] {
			continue
		}
		// The ledger took the run off this machine without a stop to
		// report: the machine was declared lost, or the task was
		// preempted or cancelled before it started.
		if !r.discard {
			b.log.Info("run no longer in the ledger: stopping it", "task", r.task.ID, "machine", r.machine)
		}
		r.discard = true
		b.requestStop(ctx, r, "taken off the machine")
	}
	for id := range b.waiting {
		if !waiting[id] {
			delete(b.waiting, id)
		}
	}
	return len(waiting) > 0
}

// runID names one run of a task: its machine and attempt (runKey as a
// map key that costs no string).
type runID struct {
	machine string
	attempt int
}

// stoppingRun is a run the ledger waits a stop report for.
type stoppingRun struct {
	task string
	run  runID
}

// startPlaced starts a run for each placement of starts, with the task as
// the ledger holds it now: a placement the ledger changed since reconcile
// read it (taken back, started elsewhere) is left to the next pass, which
// the change's event wakes. b.mu is held.
func (b *bridge) startPlaced(ctx context.Context, starts []ledger.Placement) {
	if len(starts) == 0 {
		return
	}
	allocs := make([]ledger.Allocation, 0, len(starts))
	b.cfg.Ledger.View(func(l *ledger.Ledger) {
		for _, p := range starts {
			t, ok := l.Task(p.Task)
			if !ok || t.State != ledger.TaskAssigned || t.Machine != p.Machine || t.Attempts != p.Attempts {
				continue
			}
			m, ok := l.Machine(p.Machine)
			if !ok {
				continue
			}
			allocs = append(allocs, ledger.Allocation{Machine: m, Task: t})
		}
	})
	for _, a := range allocs {
		b.startRun(ctx, a)
	}
}

// awaitStop says whether the start of assigned task t waits: it is
// checkpointable and a previous run of it is still being stopped (its
// segment is open, preempting), so the stop report may bring a checkpoint
// to resume from. The wait ends when the report is committed, when the
// machine is declared lost (which closes the segment), or after
// checkpoint.grace + 2 × checkpoint.transfer_timeout, when the task starts
// from its recorded checkpoint anyway. b.mu is held.
func (b *bridge) awaitStop(p ledger.Placement) bool {
	if !p.Checkpointable || !p.StopOpen {
		return false
	}
	since, ok := b.waiting[p.Task]
	if !ok {
		b.waiting[p.Task] = time.Now()
		b.log.Info("start waits for the stop report of the previous run (its checkpoint)", "task", p.Task)
		return true
	}
	ck := b.cfg.Checkpoint
	if time.Since(since) > ck.Grace+2*ck.TransferTimeout {
		b.log.Warn("stop report of the previous run still missing: starting from the recorded checkpoint", "task", p.Task, "waited", time.Since(since).Round(time.Second))
		return false
	}
	return true
}

// runKey names one run of a task: machine and attempt.
func runKey(machine string, attempt int) string {
	return machine + "#" + strconv.Itoa(attempt)
}

func (r *run) key() string { return runKey(r.machine, r.attempt) }

// tracks says whether a run of task is tracked here.
func (b *bridge) tracks(task string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[task] != nil
}

// startRun begins a run for an allocation; b.mu is held.
func (b *bridge) startRun(ctx context.Context, a ledger.Allocation) {
	r := &run{task: a.Task, machine: a.Machine.ID, mname: a.Machine.Name, attempt: a.Task.Attempts + 1, startDone: make(chan struct{}), ended: make(chan struct{})}
	b.runs[r.task.ID] = r
	b.wg.Go(func() { b.start(ctx, r) })
}

func (b *bridge) start(ctx context.Context, r *run) {
	defer close(r.startDone)
	t := r.task
	inputs, ferr := b.cfg.FetchInputs(ctx, t)
	// What the run starts from. A checkpointable task gets its recorded
	// checkpoint restored, or an empty directory; any task with a
	// checkpoint the run does not restore starts from zero, and the start
	// report says so, so that the ledger's remaining work is what the run
	// will do.
	var (
		ckDir    string
		restored bool
		prepErr  error
	)
	if ferr == nil && t.Spec.Checkpointable {
		ckDir = b.ck.dir(t.ID)
		restored, prepErr = b.ck.prepare(ctx, t, ckDir)
	}
	b.mu.Lock()
	taken := r.stopReason != ""
	b.mu.Unlock()
	if prepErr != nil && ctx.Err() == nil {
		// The directory could not be emptied: do not start on a state
		// the ledger does not describe. The next pass tries again.
		b.log.Warn("checkpoint directory not ready; start postponed", "task", t.ID, "err", prepErr)
		b.forget(r, 0)
		return
	}
	if ctx.Err() != nil || taken {
		// Nothing started; the ledger already took the task back.
		if taken {
			b.log.Info("start abandoned: the ledger took the task off the machine", "task", t.ID, "machine", r.machine, "attempt", r.attempt, "reason", r.stopReason)
		}
		b.forget(r, 0)
		return
	}
	if ferr != nil {
		b.log.Warn("task failed: inputs unavailable", "task", t.ID, "err", ferr)
		res, err := b.proposeRetry(ctx, func(c *ledger.Command) {
			c.TaskEnded = &ledger.TaskEnded{Task: t.ID, Machine: r.machine, Failed: true, ExitCode: -1,
				Reason: clip("input_unavailable: " + ferr.Error()), Source: ledger.EnergyDeclared}
		})
		if err != nil {
			b.log.Warn("report failed inputs", "task", t.ID, "err", err)
		}
		b.forget(r, res.Index)
		return
	}
	started := &ledger.TaskStarted{Task: t.ID, Machine: r.machine}
	switch {
	case restored:
		r.doneMFlop = t.Checkpoint.ProgressMFlop
		started.FromCheckpoint, started.RestoredProgressMFlop = t.Checkpoint.Hash, t.Checkpoint.ProgressMFlop
	case t.Checkpoint != nil:
		started.FromZero = true
	}
	var peerEnv map[string]string
	if t.Spec.Gang != nil {
		var err error
		if peerEnv, inputs, err = b.gangStart(t, inputs); err != nil {
			// A part not placed: the ledger is stopping the gang, and
			// takes this part back too.
			b.log.Info("gang part not started", "task", t.ID, "err", err)
			b.forget(r, 0)
			return
		}
	}
	spec := executor.TaskSpec{
		ID:             t.ID,
		PeerEnv:        peerEnv,
		Argv:           t.Spec.Argv,
		Env:            t.Spec.Env,
		WallClockLimit: time.Duration(t.Spec.WallLimitMs) * time.Millisecond,
		Inputs:         inputs,
		OutputPatterns: t.Spec.Outputs,
		Checkpointable: t.Spec.Checkpointable,
		CheckpointDir:  ckDir,
		SizeMFlop:      t.SizeMFlop,
		DoneMFlop:      r.doneMFlop,
		CPUs:           t.Spec.CPUs,
		MemoryBytes:    t.Spec.MemoryBytes,
		GPUs:           t.Spec.GPUs,
	}
	// The task itself waits at the gate until its start is committed: a
	// view of the ledger may be stale (this peer was paused, and the
	// leader has declared the machine lost and placed the task elsewhere),
	// and a run must not begin on a placement the ledger no longer holds.
	// The executor's own start-up (the supervisor, the journal) overlaps
	// the commit.
	gate := make(chan bool, 1)
	spec.Gate = gate
	// The task must start within two leases of its start report being sent
	// (set below, before the gate's send): a pause after the report left
	// (before it commits, or between the commit and the gate) must not let
	// the task start later on a placement the leader may have taken back
	// since. The host's own clock, not the (possibly stepped) peer clock:
	// the supervisor compares it with its own.
	var startBy time.Time
	spec.StartBy = func() time.Time { return startBy }
	if err := b.exec.Start(ctx, r.mname, spec); err != nil {
		// No Result will come: busy with a run still stopping, or closed.
		// The next pass tries again.
		b.log.Debug("executor start refused", "task", t.ID, "machine", r.machine, "err", err)
		b.mu.Lock()
		if b.runs[t.ID] == r {
			delete(b.runs, t.ID)
		}
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	r.started = true
	taken = r.stopReason != ""
	if taken {
		// Taken off while starting, before TaskStarted: nothing to report.
		r.discard, r.stopSent = true, true
	}
	b.mu.Unlock()
	if taken {
		gate <- false
		b.stopExec(ctx, r)
		return
	}
	if b.cfg.Lease.Duration > 0 {
		// Two leases: a commit of batched reports behind an entry in
		// flight can take longer than one on a busy host. A run started
		// by then and paused at once dies within a further lease: by the
		// heartbeat timeout after the report left (docs/EXECUTOR.md).
		startBy = time.Now().Add(2 * b.cfg.Lease.Duration)
	}
	_, err := b.proposeRetry(ctx, func(c *ledger.Command) {
		s := *started
		c.TaskStarted = &s
	})
	if err != nil && ledger.CodeOf(err) == ledger.CodeBadState && b.runsHere(ctx, t.ID, r.machine) {
		// An earlier attempt whose outcome was unknown did commit.
		err = nil
	}
	b.mu.Lock()
	if err == nil {
		r.startCommitted = true
		if r.phase == phaseStarting {
			r.phase = phaseRunning
		}
	} else {
		r.discard = true
	}
	needStop := (r.discard || r.stopReason != "") && !r.stopSent
	if needStop {
		r.stopSent = true
	}
	b.mu.Unlock()
	gate <- err == nil && !needStop
	if err != nil {
		b.log.Info("start not recorded; stopping the run", "task", t.ID, "machine", r.machine, "err", err)
	} else {
		if b.cfg.Observer != nil && r.attempt == 1 {
			b.cfg.Observer.RunStarted(b.cfg.Now().Sub(time.UnixMilli(t.SubmittedMs)))
		}
		b.log.Info("task started", "task", t.ID, "machine", r.machine, "from_mflop", r.doneMFlop, "restored", restored)
		if !needStop {
			b.watchRun(ctx, r, ckDir)
		}
	}
	if needStop {
		b.stopExec(ctx, r)
	}
	if err != nil || needStop {
		// A run that will not go on: look at its machine again. A run
		// that started cleanly changes nothing a pass would act on (it
		// stays tracked, on the machine the ledger gave it), so it wakes
		// no pass: one reconciliation fewer per task.
		b.poke()
	}
}

// watchRun starts what follows a run while it lasts: its periodic
// checkpoints (a checkpointable task) and its progress (a soft-deadline
// task on an executor that tells where the task reports it).
func (b *bridge) watchRun(ctx context.Context, r *run, ckDir string) {
	t := r.task
	if t.Spec.Checkpointable {
		b.wg.Go(func() { b.periodicCheckpoints(ctx, r, ckDir) })
	}
	if src, ok := b.exec.(progressPather); ok && t.Spec.Class == ledger.ClassSoftDeadline && t.Spec.DeadlineMs > 0 {
		b.wg.Go(func() { b.watchProgress(ctx, r, src) })
	}
}

// runsHere reads consistently whether task runs on machine.
func (b *bridge) runsHere(ctx context.Context, task, machine string) bool {
	var ok bool
	err := b.cfg.Ledger.ReadConsistent(ctx, func(l *ledger.Ledger) {
		t, found := l.Task(task)
		ok = found && t.State == ledger.TaskRunning && t.Machine == machine
	})
	return err == nil && ok
}

// requestStop asks the executor to stop r; b.mu is held.
func (b *bridge) requestStop(ctx context.Context, r *run, reason string) {
	if r.stopReason == "" {
		r.stopReason = reason
	}
	if !r.started || r.stopSent {
		// start() stops it once the executor has it.
		return
	}
	r.stopSent = true
	b.wg.Go(func() { b.stopExec(ctx, r) })
}

func (b *bridge) stopExec(ctx context.Context, r *run) {
	grace := b.cfg.StopGrace
	if r.task.Spec.Checkpointable {
		// Time to write the final checkpoint.
		grace = b.cfg.Checkpoint.Grace
	}
	err := b.exec.Stop(ctx, r.task.ID, grace)
	if err != nil && !errors.Is(err, executor.ErrUnknownTask) && ctx.Err() == nil {
		b.log.Warn("stop task", "task", r.task.ID, "err", err)
	}
}

// forget drops a run; idx is the log index of its last report (0: none).
func (b *bridge) forget(r *run, idx uint64) {
	b.mu.Lock()
	if b.runs[r.task.ID] == r {
		delete(b.runs, r.task.ID)
	}
	if idx > 0 {
		b.settled[r.task.ID] = idx
	}
	b.mu.Unlock()
	b.poke()
}

// consume handles the executor's results.
//
// It reads until the executor closes Results, so that no run's result is
// left undelivered, and drops every result once the runner is closing.
func (b *bridge) consume(ctx context.Context) {
	for res := range b.exec.Results() {
		if b.closing.Load() {
			continue
		}
		b.mu.Lock()
		r := b.runs[res.ID]
		if r != nil && r.machine == b.cfg.Org+"/"+res.Machine {
			r.phase = phaseReporting
			close(r.ended)
		} else {
			r = nil
		}
		b.mu.Unlock()
		if r == nil {
			b.log.Warn("result of an untracked run ignored", "task", res.ID, "machine", res.Machine, "reason", res.Reason)
			continue
		}
		b.wg.Go(func() { b.finish(ctx, r, res) })
	}
}

// finish reports a run's end: outputs first, then the ledger.
func (b *bridge) finish(ctx context.Context, r *run, res executor.Result) {
	<-r.startDone
	b.mu.Lock()
	discard := r.discard || !r.startCommitted
	stopReason := r.stopReason
	b.mu.Unlock()
	t := r.task
	if discard {
		b.log.Debug("run ended, nothing to report", "task", t.ID, "reason", res.Reason)
		b.forget(r, 0)
		b.discardDir(res)
		return
	}
	delivered := true
	if (res.LeaseLapsed || res.MachineFailed) && stopReason == "" {
		// Killed by its supervisor while this peer could not renew its
		// lease: the run is not a failure of the task. Report nothing;
		// the ledger either has declared the machine lost already, or
		// still shows the task running here, which reconcile then
		// handles as an orphan (machine lost, task queued again).
		b.log.Warn("run ended by its machine, not by the task (lapsed lease, or the batch system ended it): the machine goes lost, the task is queued again", "task", t.ID, "machine", r.machine, "detail", res.Detail)
		b.forget(r, 0)
		b.discardDir(res)
		return
	}
	energy := b.runShare(r, min(max(res.EnergyMilliJ, 0), ledger.MaxSegmentMilliJ))
	source := ledger.EnergySource(res.EnergySource)
	if source == "" {
		source = ledger.EnergyDeclared
	}
	var body func(*ledger.Command)
	switch {
	case stopReason != "" && res.Reason == executor.ReasonStopped:
		var ck *ledger.CheckpointData
		if stopReason == string(ledger.OutcomePreempting) && res.CheckpointDir != "" && t.Spec.Checkpointable {
			// A cancelled task needs no checkpoint: the ledger would
			// ignore it.
			ck = b.ck.take(ctx, t, res.CheckpointDir, r.doneMFlop)
		}
		body = func(c *ledger.Command) {
			c.TaskStopped = &ledger.TaskStopped{Task: t.ID, Machine: r.machine, EnergyMilliJ: energy, Source: source, Checkpoint: ck}
		}
	case stopReason != "" && !res.OK():
		// It failed by itself while being stopped: the ledger books the
		// report as the end of the stopped run.
		body = func(c *ledger.Command) {
			c.TaskEnded = &ledger.TaskEnded{Task: t.ID, Machine: r.machine, Failed: true, ExitCode: res.ExitCode,
				Reason: clip(reasonOf(res, "")), EnergyMilliJ: energy, Source: source}
		}
	default:
		// It ended by itself (or finished before a stop took effect,
		// which the ledger counts as done if the task still waits).
		note := ""
		err := b.shipWithRetry(ctx, t, r.machine, res.Outputs)
		if err != nil {
			delivered = false
			note = fmt.Sprintf("%s (%v); kept on peer %s in %s", OutputsNotDelivered, err, b.cfg.Self, res.WorkDir)
			b.log.Warn("outputs kept here: the submitting peer could not take them", "task", t.ID, "dir", res.WorkDir, "err", err)
		}
		body = func(c *ledger.Command) {
			c.TaskEnded = &ledger.TaskEnded{Task: t.ID, Machine: r.machine, Failed: !res.OK(), ExitCode: res.ExitCode,
				Reason: clip(reasonOf(res, note)), EnergyMilliJ: energy, Source: source}
		}
	}
	out, err := b.proposeRetry(ctx, body)
	if ledger.CodeOf(err) == ledger.CodeImplausible && ctx.Err() == nil {
		out, err = b.resendPlausible(ctx, r, body, err)
	}
	if err != nil && ctx.Err() == nil {
		b.log.Warn("report of a run's end refused", "task", t.ID, "machine", r.machine, "reason", res.Reason, "err", err)
	} else if err == nil {
		if b.cfg.Observer != nil {
			b.cfg.Observer.RunEnded(res.End.Sub(res.Start), runOutcome(stopReason, res))
		}
		b.log.Info("task run ended", "task", t.ID, "machine", r.machine, "reason", res.Reason, "energy_mj", energy, "source", source)
		for _, note := range out.Notes {
			b.log.Info("ledger note", "task", t.ID, "note", note)
		}
	}
	b.forget(r, out.Index)
	if delivered {
		b.discardDir(res)
	}
	// A task that ended, or a checkpoint that replaced another, may leave
	// archives and a checkpoint directory to collect: only a
	// checkpointable task, or one with a recorded checkpoint, has any. The
	// collector's pass reads every task directory and a consistent view
	// (checkpoints.gc), too much to pay after every end of a short task;
	// its periodic pass still covers the rest.
	if t.Spec.Checkpointable || t.Checkpoint != nil {
		b.ck.poke()
	}
}

// runOutcome names how a reported run ended, for Observer: "stopped" (the
// ledger preempted or cancelled it), "done" or "failed".
func runOutcome(stopReason string, res executor.Result) string {
	switch {
	case stopReason != "" && res.Reason == executor.ReasonStopped:
		return "stopped"
	case res.OK():
		return "done"
	}
	return "failed"
}

// resendPlausible follows a report of r's end that the ledger refused as
// implausible (docs/SECURITY.md, "Executors": more energy than the
// machine's declared busy power allows, simulated energy on a live
// federation, done sooner than its declared speed allows). Left alone, the
// task would stay running in the ledger with nobody to report it, and be
// run again once the machine is declared lost. So the report is resent
// with the declared estimate — the machine's busy power over the run as
// the ledger recorded it, from its start until now — which the energy
// rule always accepts; an end still refused claimed the work done too
// soon, and is then reported as a failure that says why.
func (b *bridge) resendPlausible(ctx context.Context, r *run, body func(*ledger.Command), refused error) (ledger.Result, error) {
	mj := b.declaredEstimate(ctx, r)
	b.log.Warn("report refused as implausible: resending it with the declared estimate", "task", r.task.ID, "machine", r.machine, "energy_mj", mj, "err", refused)
	declared := func(c *ledger.Command) {
		body(c)
		switch {
		case c.TaskEnded != nil:
			c.TaskEnded.EnergyMilliJ, c.TaskEnded.Source = mj, ledger.EnergyDeclared
		case c.TaskStopped != nil:
			c.TaskStopped.EnergyMilliJ, c.TaskStopped.Source = mj, ledger.EnergyDeclared
		}
	}
	out, err := b.proposeRetry(ctx, declared)
	if ledger.CodeOf(err) != ledger.CodeImplausible || ctx.Err() != nil {
		return out, err
	}
	b.log.Warn("end refused as implausible: reporting the task failed", "task", r.task.ID, "machine", r.machine, "err", err)
	return b.proposeRetry(ctx, func(c *ledger.Command) {
		declared(c)
		if e := c.TaskEnded; e != nil && !e.Failed {
			e.Failed = true
			e.Reason = clip("implausible: the ledger refused this run's end (" + refusal(err) + "); " + e.Reason)
		}
	})
}

// refusal is the ledger's message in err.
func refusal(err error) string {
	var le *ledger.Error
	if errors.As(err, &le) {
		return le.Msg
	}
	return err.Error()
}

// runShare is the part of energy, measured or declared by the executor for
// the whole machine over r's run, that r's task accounts for: its share of
// the machine when several tasks share it (docs/POLICY.md, "Shared
// machines"), all of it otherwise. RAPL measures the whole package, so on a
// shared machine this is the run's proportional part of what was measured.
func (b *bridge) runShare(r *run, energy int64) int64 {
	b.cfg.Ledger.View(func(l *ledger.Ledger) {
		if m, ok := l.Machine(r.machine); ok {
			energy = m.ShareOf(&r.task, energy)
		}
	})
	return energy
}

// declaredEstimate is the declared-power estimate of r's run: the
// machine's busy power from the start of r's open segment in the ledger
// until now (0 when the ledger shows none).
func (b *bridge) declaredEstimate(ctx context.Context, r *run) int64 {
	var (
		start, busy int64
		open        bool
	)
	err := b.cfg.Ledger.ReadConsistent(ctx, func(l *ledger.Ledger) {
		if m, ok := l.Machine(r.machine); ok {
			busy = m.ShareOf(&r.task, m.BusyMilliW)
		}
		if t, ok := l.Task(r.task.ID); ok {
			for _, s := range t.Segments {
				if s.Machine == r.machine && s.Outcome.Open() {
					start, open = s.StartMs, true
				}
			}
		}
	})
	if err != nil || !open {
		return 0
	}
	return busyMilliJ(busy, b.cfg.Now().UnixMilli()-start)
}

// busyMilliJ is busy mW over elapsed ms, in mJ (mW × ms = µJ), capped at
// the ledger's bound without overflowing.
func busyMilliJ(busy, elapsed int64) int64 {
	if elapsed <= 0 || busy <= 0 {
		return 0
	}
	if elapsed > ledger.MaxSegmentMilliJ*1000/busy {
		return ledger.MaxSegmentMilliJ
	}
	return busy * elapsed / 1000
}

// OutputsNotDelivered begins the note a task's end reason carries when its
// outputs could not be delivered and stay on the executing peer: the data
// directory's retention keeps such a task's directory (node/retention.go).
const OutputsNotDelivered = "outputs not delivered"

// discarder is an executor that removes a finished run's directory once
// told it is no longer needed (*executor.ProcessExecutor, after the
// owner's keep_task_dirs).
type discarder interface{ Discard(executor.Result) }

// discardDir hands a run whose outputs were delivered (or that has none
// to deliver) back to the executor for removal. Outputs that could not be
// delivered stay where the ledger's reason says they are.
func (b *bridge) discardDir(res executor.Result) {
	if d, ok := b.exec.(discarder); ok {
		d.Discard(res)
	}
}

// periodicCheckpoints checkpoints a running checkpointable task every
// checkpoint.interval, or without one every Young/Daly interval of its
// machine (nextCheckpoint, ckinterval.go), while its run lasts: it packs $CHECKPOINT_DIR as it
// is (the task writes each file atomically, docs/CHECKPOINTS.md), and
// records it with the ledger's checkpoint command only when the progress
// file reports more work than the last recorded checkpoint: without one,
// a checkpoint taken mid-run would claim progress nobody can vouch for.
func (b *bridge) periodicCheckpoints(ctx context.Context, r *run, dir string) {
	last := r.doneMFlop
	for {
		wait, take := b.nextCheckpoint(r)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.ended:
			t.Stop()
			return
		case <-t.C:
		}
		if !take {
			continue
		}
		progress, err := checkpoint.ReadProgress(dir, r.task.ID, r.task.SizeMFlop)
		if err != nil || progress <= last {
			continue
		}
		ck := b.ck.take(ctx, r.task, dir, last)
		if ck == nil || ck.ProgressMFlop <= last {
			continue
		}
		select {
		case <-r.ended:
			// Stopped meanwhile: the stop report carries the final one.
			return
		default:
		}
		_, err = b.proposeRetry(ctx, func(c *ledger.Command) {
			c.Checkpoint = &ledger.CheckpointRecorded{Task: r.task.ID, Machine: r.machine, Checkpoint: *ck}
		})
		if err != nil {
			b.log.Info("periodic checkpoint not recorded", "task", r.task.ID, "err", err)
			if ledger.CodeOf(err) == ledger.CodeBadState {
				return // no longer running here
			}
			continue
		}
		last = ck.ProgressMFlop
		b.log.Info("periodic checkpoint recorded", "task", r.task.ID, "progress_mflop", last)
		b.ck.poke()
	}
}

// shipWithRetry ships outputs, trying again a few times while the
// submitting peer is unreachable (it may be restarting): four attempts of
// at most five minutes each, 0.5 s, 1 s and 2 s apart.
func (b *bridge) shipWithRetry(ctx context.Context, t ledger.Task, machine string, outputs map[string]string) error {
	_, err := retry(ctx, pacing{initial: 500 * time.Millisecond, ceiling: 2 * time.Second, tries: 4}, func() (struct{}, error) {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := b.cfg.ShipOutputs(sctx, t, machine, outputs)
		cancel()
		if err != nil && !b.cfg.Retryable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, func(err error, _ time.Duration) { b.log.Debug("ship outputs: retrying", "task", t.ID, "err", err) })
	return err
}

func reasonOf(res executor.Result, note string) string {
	s := res.Reason
	if res.Detail != "" {
		s += ": " + res.Detail
	}
	if note != "" {
		s += "; " + note
	}
	return s
}

// clip cuts s to the ledger's reason limit on a rune boundary.
func clip(s string) string {
	if len(s) <= ledger.MaxReasonBytes {
		return s
	}
	cut := ledger.MaxReasonBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// proposeRetry proposes until the command is committed, the ledger rejects
// it, or ctx ends. Transient failures (no leader, leader change, unknown
// outcome) are retried with backoff; after an unknown outcome the retry may
// be rejected because the first attempt did commit.
//
// Reports on runs (task_started, task_stopped, task_ended, checkpoint) go
// through the reporter, which commits those that arrive together as one
// log entry (reporter.go); each retry queues the report again.
func (b *bridge) proposeRetry(ctx context.Context, body func(*ledger.Command)) (ledger.Result, error) {
	propose := b.cfg.Propose
	var probe ledger.Command
	body(&probe)
	if _, ok := ledger.ReportOf(probe); ok {
		propose = b.rep.report
	}
	// 0.1 s, doubling up to 3 s, until ctx ends.
	return retry(ctx, pacing{initial: 100 * time.Millisecond, ceiling: 3 * time.Second}, func() (ledger.Result, error) {
		res, err := propose(ctx, body)
		if err != nil && (ledger.CodeOf(err) != "" || !b.cfg.Retryable(err) || ctx.Err() != nil) {
			return res, backoff.Permanent(err)
		}
		return res, err
	}, func(err error, _ time.Duration) { b.log.Debug("propose: retrying", "err", err) })
}

// orphan runs fn once at a time per key; b.mu is held.
func (b *bridge) orphan(ctx context.Context, key string, fn func(context.Context)) {
	if b.busy[key] {
		return
	}
	b.busy[key] = true
	b.wg.Go(func() {
		fn(ctx)
		b.mu.Lock()
		delete(b.busy, key)
		b.mu.Unlock()
	})
}

// orphanRun handles a task the ledger says runs on machine while no run of
// this daemon carries it: the machine is declared lost (the task goes back
// to the queue, its segment is closed with the declared estimate), then
// brought back up.
func (b *bridge) orphanRun(ctx context.Context, machine, task string) {
	var still bool
	err := b.cfg.Ledger.ReadConsistent(ctx, func(l *ledger.Ledger) {
		t, ok := l.Task(task)
		still = ok && t.State == ledger.TaskRunning && t.Machine == machine
	})
	b.mu.Lock()
	_, tracked := b.runs[task]
	_, settled := b.settled[task]
	b.mu.Unlock()
	if err != nil || !still || tracked || settled {
		return
	}
	b.log.Warn("the ledger says a task runs here that this daemon does not run (restart?): declaring the machine lost to queue it again", "task", task, "machine", machine)
	if err := b.cfg.DeclareLost(ctx, machine); err != nil {
		b.log.Warn("declare machine lost", "machine", machine, "err", err)
		return
	}
	if _, err := b.proposeRetry(ctx, func(c *ledger.Command) { c.Heartbeat = &ledger.Heartbeat{Machine: machine} }); err != nil {
		b.log.Warn("bring machine up", "machine", machine, "err", err)
	}
}

// orphanStop reports a stop the ledger waits for on a run this daemon does
// not carry (it died with a previous run of the daemon, or its own report
// was refused): the energy is the declared estimate, busy power × the time
// since the run started.
func (b *bridge) orphanStop(ctx context.Context, s ledger.PendingStop) {
	var (
		still bool
		busy  int64
	)
	err := b.cfg.Ledger.ReadConsistent(ctx, func(l *ledger.Ledger) {
		for _, p := range l.PendingStops(b.cfg.Org) {
			still = still || p == s
		}
		if m, ok := l.Machine(s.Machine); ok {
			busy = m.BusyMilliW
		}
	})
	b.mu.Lock()
	r := b.runs[s.Task]
	b.mu.Unlock()
	if err != nil || !still || (r != nil && r.key() == runKey(s.Machine, s.Attempt)) {
		return
	}
	mj := busyMilliJ(busy, b.cfg.Now().UnixMilli()-s.StartMs)
	b.log.Info("reporting a stop for a run this daemon does not carry (lost with a restart, or its report refused)", "task", s.Task, "machine", s.Machine, "attempt", s.Attempt, "energy_mj", mj)
	res, err := b.proposeRetry(ctx, func(c *ledger.Command) {
		c.TaskStopped = &ledger.TaskStopped{Task: s.Task, Machine: s.Machine, EnergyMilliJ: mj, Source: ledger.EnergyDeclared}
	})
	if err != nil {
		b.log.Info("orphan stop report refused", "task", s.Task, "err", err)
		return
	}
	b.mu.Lock()
	b.settled[s.Task] = res.Index
	b.mu.Unlock()
}

// runningByMachine maps machine names to the task started there.
func (b *bridge) runningByMachine() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	for _, r := range b.runs {
		if r.started {
			out[r.mname] = r.task.ID
		}
	}
	return out
}
