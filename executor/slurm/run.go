package slurm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/executor"
)

// execute runs one task as a Slurm job, from the checks to its Result.
func (e *Executor) execute(m executor.MachineConfig, r *run, spec *executor.TaskSpec) (res executor.Result) {
	ctx := context.Background()
	res = executor.Result{ID: spec.ID, Machine: m.Name, ExitCode: -1, EnergySource: executor.EnergyDeclared}
	defer r.launch(nil)
	fail := func(reason, detail string) executor.Result {
		res.Reason, res.Detail = reason, detail
		res.DoneMFlop = executor.PriorDone(spec)
		if res.Start.IsZero() {
			res.Start = time.Now()
		}
		if res.End.IsZero() {
			res.End = res.Start
		}
		e.log.Info("task failed", "task", spec.ID, "machine", m.Name, "reason", reason, "detail", detail, "job", r.jobID())
		return res
	}
	if re := e.kit.Check(spec); re != nil {
		return fail(re.Reason, re.Detail)
	}
	b, re := e.kit.Prepare(spec, m)
	res.Attempt, res.WorkDir, res.CheckpointDir = b.Attempt, b.Work, b.Checkpoint
	res.StdoutPath, res.StderrPath = b.Stdout, b.Stderr
	if re != nil {
		return fail(re.Reason, re.Detail)
	}

	runNo := e.journal.newRun()
	name := jobName(runNo, spec, b.Attempt)
	rec := JobRecord{Run: runNo, Task: spec.ID, Machine: m.Name, Attempt: b.Attempt}
	submit := rec
	submit.Event, submit.Name, submit.AtUs = EventSubmit, name, time.Now().UnixMicro()
	if err := e.journal.append(submit); err != nil {
		r.launch(fmt.Errorf("start %s: %w: %v", spec.ID, executor.ErrJournal, err))
		return fail(executor.ReasonStartFailed, err.Error())
	}
	end := func(state string, notRun bool, energy string) {
		code := res.ExitCode
		rec := rec
		rec.Event, rec.Job, rec.AtUs, rec.Reason, rec.ExitCode, rec.State, rec.NotRun, rec.Energy = EventEnd, r.jobID(), res.End.UnixMicro(), res.Reason, &code, state, notRun, energy
		if res.MachineFailed || res.LeaseLapsed {
			rec.Detail = clip(res.Detail, 300)
		}
		if err := e.journal.append(rec); err != nil {
			e.log.Error("job journal: cannot record a run's end; the next boot marks it abandoned", "task", spec.ID, "err", err)
		}
	}

	out, err := e.cli.run(ctx, credential(b), script(spec, b), "sbatch", e.sbatchArgs(name, m, spec, b)...)
	job := ""
	if err == nil {
		job, err = jobIDOf(out)
	}
	if err != nil {
		// The cluster refused or could not be reached: not the task's
		// failure.
		res.MachineFailed = true
		res = fail(executor.ReasonStartFailed, "sbatch: "+err.Error())
		end("", true, "")
		return res
	}
	r.mu.Lock()
	r.job = job
	r.mu.Unlock()
	jr := rec
	jr.Event, jr.Job, jr.AtUs = EventJob, job, time.Now().UnixMicro()
	if err := e.journal.append(jr); err != nil {
		// Held: nothing of the task ran. Without its ID journaled it must
		// not run at all.
		e.cancel(ctx, job, "")
		r.launch(fmt.Errorf("start %s: %w: %v", spec.ID, executor.ErrJournal, err))
		return fail(executor.ReasonStartFailed, err.Error())
	}
	e.log.Debug("job submitted held", "task", spec.ID, "job", job, "machine", m.Name)
	r.launch(nil)

	if !executor.AwaitGate(spec.Gate, r.stopped) {
		e.cancel(ctx, job, "")
		st := e.awaitEnd(r, 30*time.Second)
		res = fail(executor.ReasonStopped, "the start was not confirmed: nothing of the task ran (its job was cancelled held)")
		end(st.state, true, "")
		return res
	}
	if late := startLate(spec, time.Now()); late != "" {
		// The gate opened after the start's deadline: this peer was held
		// up (paused?) after confirming the start, and the leader may
		// have placed the task elsewhere since. The job is still held:
		// nothing of the task ran.
		e.cancel(ctx, job, "")
		st := e.awaitEnd(r, 30*time.Second)
		res.LeaseLapsed = true
		res = fail(executor.ReasonStopped, late)
		end(st.state, true, "")
		return res
	}
	if _, err := e.cli.run(ctx, nil, nil, "scontrol", "release", job); err != nil {
		e.cancel(ctx, job, "")
		st := e.awaitEnd(r, 30*time.Second)
		res.MachineFailed = true
		res = fail(executor.ReasonStartFailed, "scontrol release: "+err.Error())
		end(st.state, true, "")
		return res
	}
	res.Start = time.Now()
	st, energySrc, detached := e.track(ctx, m, r, spec, b, job, &res)
	if !detached {
		end(st.state, false, energySrc)
	}
	return res
}

// startLate says why a run whose gate opened at now must not start (its
// TaskSpec.StartBy has passed), or "" when it may: the process
// executor's start_late (its supervisor's check), made by this executor
// before it releases the job (docs/SLURM.md, "The start's deadline").
func startLate(spec *executor.TaskSpec, now time.Time) string {
	if spec.StartBy == nil {
		return ""
	}
	by := spec.StartBy()
	if by.IsZero() || !now.After(by) {
		return ""
	}
	return fmt.Sprintf("start_late: the gate opened %v after the start's deadline: the peer was held up (paused?) after confirming the start, and its view of the ledger may be stale; the job was cancelled held, nothing of the task ran",
		now.Sub(by).Round(time.Millisecond))
}

// track follows a released job to its end and fills res from it: reason,
// exit code, energy, logs cut, outputs. It returns the job's last state
// and where the energy came from, or detached when the executor closed
// after Detach (the job runs on, nothing is to be reported).
func (e *Executor) track(ctx context.Context, m executor.MachineConfig, r *run, spec *executor.TaskSpec, b executor.BatchRun, job string, res *executor.Result) (jobState, string, bool) {
	st, signalled, detached := e.follow(ctx, r, job)
	if detached {
		r.mu.Lock()
		r.detached = true
		r.mu.Unlock()
		e.log.Info("left running: the executor closed detached", "task", spec.ID, "job", job)
		return st, "", true
	}
	res.End = time.Now()
	energySrc := e.classify(ctx, r, job, st, signalled, m, spec, res)
	res.StdoutTruncated = e.kit.CutLog(b.Stdout)
	res.StderrTruncated = e.kit.CutLog(b.Stderr)
	if !res.MachineFailed {
		e.collect(spec, b, res)
	}
	if res.Reason == executor.ReasonOK {
		res.DoneMFlop = spec.SizeMFlop
	} else {
		res.DoneMFlop = executor.EstimateDone(spec, m.MFLOPS(), res.End.Sub(res.Start))
	}
	e.log.Debug("task ended", "task", spec.ID, "job", job, "state", st.state, "reason", res.Reason, "exit", res.ExitCode)
	return st, energySrc, false
}

// follow waits for the job to end, acting on stop requests: SIGTERM to
// its processes, then scancel after the grace. signalled says the job was
// signalled or cancelled on a stop request; detached that the executor
// closed after Detach, leaving the job to run on.
func (e *Executor) follow(ctx context.Context, r *run, job string) (st jobState, signalled, detached bool) {
	var kill <-chan time.Time
	var killTimer *time.Timer
	killed := false // on a lapsed lease
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	for {
		select {
		case <-r.update:
		case <-kill:
			kill = nil
			e.cancel(ctx, job, "")
		case <-e.detach:
		}
		r.mu.Lock()
		st = r.state
		stopping, grace, lapsed := r.stopReason != "", r.stopGrace, r.leaseLapsed
		r.mu.Unlock()
		if terminal(st.state) && st.state != "" {
			return st, signalled, false
		}
		if !signalled {
			select {
			case <-e.detach:
				return st, false, true
			default:
			}
		}
		if lapsed && !killed {
			// The lease is over: no grace, as the supervisor's kill (a
			// detached executor, as a dead peer, kills nothing: above).
			killed, signalled, kill = true, true, nil
			if st.state != "PENDING" {
				e.cancel(ctx, job, "KILL")
			}
			e.cancel(ctx, job, "")
			continue
		}
		if stopping && !signalled {
			signalled = true
			// A job not known to be pending may run already (the first
			// squeue after the release may not have answered yet): it
			// gets its grace.
			if st.state != "PENDING" && grace > 0 {
				e.cancel(ctx, job, "TERM")
				killTimer = time.NewTimer(grace)
				kill = killTimer.C
			} else {
				e.cancel(ctx, job, "")
			}
		}
	}
}

// awaitEnd waits (at most d) for the poller to see the job ended.
func (e *Executor) awaitEnd(r *run, d time.Duration) jobState {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		r.mu.Lock()
		st := r.state
		r.mu.Unlock()
		if st.state != "" && terminal(st.state) {
			return st
		}
		select {
		case <-r.update:
		case <-t.C:
			return st
		}
	}
}

// cancel runs scancel on job: with signal, only that signal to the
// batch script and its children (--full); without, the job ends.
func (e *Executor) cancel(ctx context.Context, job, signal string) {
	args := []string{job}
	if signal != "" {
		args = []string{"--full", "--signal=" + signal, job}
	}
	if _, err := e.cli.run(ctx, nil, nil, "scancel", args...); err != nil {
		e.log.Warn("scancel", "job", job, "signal", signal, "err", err)
	}
}

// classify turns the job's end into the Result's reason, exit code and
// energy; it returns where the energy came from.
func (e *Executor) classify(ctx context.Context, r *run, job string, st jobState, signalled bool, m executor.MachineConfig, spec *executor.TaskSpec, res *executor.Result) string {
	r.mu.Lock()
	stopReason, stopDetail := r.stopReason, r.stopDetail
	res.LeaseLapsed = r.leaseLapsed && signalled
	r.mu.Unlock()
	info := jobInfo{state: st.state, exitCode: -1}
	if st.state != stateGone {
		if ji, err := e.cli.showJob(ctx, job); err == nil {
			info = ji
		} else {
			e.log.Warn("scontrol show job", "job", job, "err", err)
		}
	}
	if r.adopted && !info.start.IsZero() && !info.end.IsZero() && !info.end.Before(info.start) {
		// The job's own times: the run did not pause with the peer.
		res.Start, res.End = info.start, info.end
	}
	res.ExitCode = info.exitCode
	if signalled && stopReason != "" {
		// Whatever the task did once signalled (a checkpointing task
		// exits 0), the run ended because it was asked to.
		res.Reason, res.Detail = stopReason, stopDetail
	} else {
		res.Reason, res.Detail, res.MachineFailed = outcome(job, info)
	}
	if e.noAccounting.Load() {
		res.EnergyMilliJ, res.EnergySource = executor.DeclaredMilliJ(m.BusyMilliW(), res.End.Sub(res.Start)), executor.EnergyDeclared
		return "declared"
	}
	joules, ok, disabled := e.cli.consumedEnergy(ctx, job)
	if disabled && !e.noAccounting.Swap(true) {
		e.log.Info("energy: the cluster keeps no accounting (sacct), energy is declared: busy power × run time")
	}
	if ok {
		// Measured by the cluster's energy plugin: the ledger's
		// measured source (docs/SLURM.md, "Energy").
		res.EnergyMilliJ, res.EnergySource = joules*1000, executor.EnergyRAPL
		return "slurm"
	}
	res.EnergyMilliJ, res.EnergySource = executor.DeclaredMilliJ(m.BusyMilliW(), res.End.Sub(res.Start)), executor.EnergyDeclared
	return "declared"
}

// outcome is what the end of a job the peer did not ask to stop means
// (docs/SLURM.md, "How a run goes"): the task's own end, or the cluster's
// (machineFailed).
func outcome(job string, info jobInfo) (reason, detail string, machineFailed bool) {
	switch state := info.state; {
	case state == "COMPLETED" && info.exitCode == 0:
		return executor.ReasonOK, "", false
	case state == "COMPLETED" || state == "FAILED":
		if info.exitCode > 0 {
			return executor.ReasonExitNonzero, fmt.Sprintf("exit status %d", info.exitCode), false
		}
		return executor.ReasonSignaled, fmt.Sprintf("killed by signal %d", info.signal), false
	case state == "TIMEOUT":
		return executor.ReasonTimeout, "Slurm ended the job at its time limit", false
	case state == "OUT_OF_MEMORY":
		return executor.ReasonSignaled, "Slurm ended the job: out of memory (over the task's memory request)", false
	default:
		// CANCELLED by someone else, NODE_FAIL, PREEMPTED, BOOT_FAIL,
		// DEADLINE, or the job vanished: the cluster ended it.
		detail = fmt.Sprintf("Slurm job %s ended %s by the cluster, not by the task", job, strings.ToLower(state))
		if info.reason != "" && info.reason != "None" {
			detail += " (" + info.reason + ")"
		}
		return executor.ReasonStopped, detail, true
	}
}

// collect lists and copies the outputs (as the run's user).
func (e *Executor) collect(spec *executor.TaskSpec, b executor.BatchRun, res *executor.Result) {
	outs, skipped, re := e.kit.Outputs(spec, b)
	if len(skipped) > 0 {
		note := "outputs skipped: " + strings.Join(skipped, "; ")
		if res.Detail != "" {
			note = res.Detail + "; " + note
		}
		res.Detail = note
	}
	if re != nil {
		if res.Reason == executor.ReasonOK {
			res.Reason, res.Detail = re.Reason, re.Detail
		} else {
			res.Detail += "; " + re.Detail
		}
		return
	}
	res.Outputs = outs
}

// resultQueue delivers results in order without ever blocking the
// producer.
type resultQueue struct {
	out       chan executor.Result
	mu        sync.Mutex
	buf       []executor.Result
	finishing bool
	wake      chan struct{}
}

func newResultQueue() *resultQueue {
	q := &resultQueue{out: make(chan executor.Result), wake: make(chan struct{}, 1)}
	go q.run()
	return q
}

func (q *resultQueue) push(r executor.Result) {
	q.mu.Lock()
	q.buf = append(q.buf, r)
	q.mu.Unlock()
	q.poke()
}

func (q *resultQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *resultQueue) finish() {
	q.mu.Lock()
	q.finishing = true
	q.mu.Unlock()
	q.poke()
}

func (q *resultQueue) run() {
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.buf) == 0 {
			fin := q.finishing
			q.mu.Unlock()
			if fin {
				return
			}
			<-q.wake
			continue
		}
		r := q.buf[0]
		q.buf = q.buf[1:]
		q.mu.Unlock()
		q.out <- r
	}
}
