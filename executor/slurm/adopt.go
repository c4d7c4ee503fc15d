package slurm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/executor"
)

// Restarts (docs/SLURM.md, "Restarts"). A Slurm job outlives the peer
// that submitted it. At start the executor reads the runs its journal
// leaves open and finds their jobs (Leftovers); the runner, which knows
// what the ledger says, adopts those whose task the ledger still places
// on that machine (Adopt: followed to their end and reported as if the
// peer had never stopped) and has the others cancelled (EndLeftovers).

// EventAdopted: a later daemon took over the run; its end record follows.
const EventAdopted = "adopted"

// findLeftovers resolves the job of each run left open: the journaled job
// ID, or the job found by its unique name when the previous daemon died
// between sbatch and the journal. A run whose job cannot be found (never
// submitted, or forgotten by the controller) is journaled abandoned; of
// two open runs of a task, the earlier is ended.
func (e *Executor) findLeftovers(ctx context.Context, open openJobs) error {
	for _, r := range open.sorted() {
		if r.Job == "" && r.Name != "" {
			out, err := e.cli.run(ctx, nil, nil, "squeue", "-h", "-t", "all", "-o", "%i", "--name="+r.Name)
			if err != nil {
				return fmt.Errorf("find the job of run %d (%s): %w", r.Run, r.Name, err)
			}
			if ids := strings.Fields(out); len(ids) == 1 {
				r.Job = ids[0]
			} else if len(ids) > 1 {
				r.Job = strings.Join(ids, ",")
				if err := e.endJobs(ctx, r); err != nil {
					return err
				}
				continue
			}
		}
		if r.Job == "" {
			if err := e.endJobs(ctx, r); err != nil {
				return err
			}
			continue
		}
		if old, ok := e.leftovers[r.Task]; ok {
			if err := e.endJobs(ctx, old); err != nil {
				return err
			}
		}
		e.leftovers[r.Task] = r
	}
	return nil
}

// endJobs cancels the job(s) of a previous daemon's run r if still queued
// or running, and journals the run abandoned.
func (e *Executor) endJobs(ctx context.Context, r JobRecord) error {
	state := ""
	for _, id := range strings.Split(r.Job, ",") {
		if id == "" {
			continue
		}
		st, err := e.cli.squeue(ctx, []string{id})
		if err != nil {
			return fmt.Errorf("job %s of a previous run: %w", id, err)
		}
		if s, ok := st[id]; ok && !terminal(s.state) {
			if _, err := e.cli.run(ctx, nil, nil, "scancel", id); err != nil {
				return fmt.Errorf("cancel job %s of a previous run: %w", id, err)
			}
			state = "CANCELLED"
			e.log.Warn("cancelled the Slurm job of a run a previous daemon left (the ledger no longer places its task there)", "job", id, "task", r.Task, "state", s.state)
		} else if ok {
			state = s.state
		}
	}
	return e.journal.append(JobRecord{Event: EventAbandoned, Run: r.Run, Task: r.Task, Machine: r.Machine, Attempt: r.Attempt,
		Job: r.Job, State: state, AtUs: time.Now().UnixMicro()})
}

// Leftovers lists the runs a previous daemon left whose job was found,
// task ID → machine name, until they are adopted or ended.
func (e *Executor) Leftovers() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]string, len(e.leftovers))
	for task, r := range e.leftovers {
		out[task] = r.Machine
	}
	return out
}

// Adopt follows the leftover run of spec.ID on machine as a run that
// Start began and whose gate opened (a job still held is released: the
// ledger recorded its start, or the caller would not adopt it). Its
// Result comes on Results, with the job's own start and end times. spec
// is the task as the ledger has it (no inputs, no gate needed).
func (e *Executor) Adopt(ctx context.Context, machine string, spec executor.TaskSpec) error {
	spec = executor.CloneSpec(spec)
	spec.Gate = nil
	e.mu.Lock()
	rec, ok := e.leftovers[spec.ID]
	if ok && rec.Machine == machine {
		delete(e.leftovers, spec.ID)
	}
	e.mu.Unlock()
	if !ok || rec.Machine != machine {
		return fmt.Errorf("adopt %s on %q: %w", spec.ID, machine, executor.ErrUnknownTask)
	}
	r := &run{id: spec.ID, machine: machine, job: rec.Job, adopted: true, launched: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{}), update: make(chan struct{}, 1)}
	r.launch(nil)
	m, err := e.reserve(machine, r)
	if err != nil {
		e.mu.Lock()
		e.leftovers[spec.ID] = rec
		e.mu.Unlock()
		return fmt.Errorf("adopt: %w", err)
	}
	if err := e.journal.append(JobRecord{Event: EventAdopted, Run: rec.Run, Task: rec.Task, Machine: rec.Machine, Attempt: rec.Attempt,
		Job: rec.Job, AtUs: time.Now().UnixMicro()}); err != nil {
		e.log.Warn("job journal: cannot record an adoption", "task", spec.ID, "err", err)
	}
	e.log.Info("adopted the Slurm job of a previous daemon's run", "task", spec.ID, "job", rec.Job, "machine", machine)
	go func() {
		defer e.wg.Done()
		res := e.adopted(m, r, &spec, rec)
		e.release(r)
		if !r.isDetached() {
			e.q.push(res)
		}
		close(r.done)
	}()
	return nil
}

// adopted follows an adopted run to its end, as execute does after the
// release.
func (e *Executor) adopted(m executor.MachineConfig, r *run, spec *executor.TaskSpec, rec JobRecord) executor.Result {
	ctx := context.Background()
	res := executor.Result{ID: spec.ID, Machine: m.Name, ExitCode: -1, EnergySource: executor.EnergyDeclared, Attempt: rec.Attempt,
		Start: time.UnixMicro(rec.AtUs)}
	b, re := e.kit.Reopen(spec, rec.Attempt)
	res.WorkDir, res.CheckpointDir, res.StdoutPath, res.StderrPath = b.Work, b.Checkpoint, b.Stdout, b.Stderr
	end := func(state string, energy string) {
		code := res.ExitCode
		er := rec
		er.Event, er.AtUs, er.Reason, er.ExitCode, er.State, er.Energy, er.Name = EventEnd, res.End.UnixMicro(), res.Reason, &code, state, energy, ""
		if res.MachineFailed {
			er.Detail = clip(res.Detail, 300)
		}
		if err := e.journal.append(er); err != nil {
			e.log.Error("job journal: cannot record a run's end; the next boot marks it abandoned", "task", spec.ID, "err", err)
		}
	}
	if re != nil {
		// Its directory is gone: nothing could be collected. The run is
		// lost with its machine, as before adoption existed.
		e.cancel(ctx, rec.Job, "")
		res.MachineFailed, res.Reason, res.Detail = true, executor.ReasonStartFailed, re.Detail
		res.End = time.Now()
		end("", "")
		return res
	}
	if st, err := e.cli.squeue(ctx, []string{rec.Job}); err == nil && st[rec.Job].state == "PENDING" && strings.HasPrefix(st[rec.Job].reason, "JobHeld") {
		// Held still: the previous daemon died between the ledger's
		// commit of the start and the release.
		if _, err := e.cli.run(ctx, nil, nil, "scontrol", "release", rec.Job); err != nil {
			e.log.Warn("scontrol release of an adopted job", "job", rec.Job, "err", err)
		}
	}
	st, energySrc, detached := e.track(ctx, m, r, spec, b, rec.Job, &res)
	if detached {
		return res
	}
	end(st.state, energySrc)
	return res
}

// EndLeftovers cancels the jobs of the leftovers not adopted (the ledger
// no longer places their tasks there: they are queued again or run
// elsewhere) and journals them abandoned.
func (e *Executor) EndLeftovers(ctx context.Context) error {
	e.mu.Lock()
	left := e.leftovers
	e.leftovers = map[string]JobRecord{}
	e.mu.Unlock()
	open := openJobs{}
	for _, r := range left {
		open[r.Run] = r
	}
	var first error
	for _, r := range open.sorted() {
		if err := e.endJobs(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Detach makes Close leave the released jobs running and unreported, as
// a peer that dies does: the next daemon adopts or ends them. Jobs still
// held are cancelled as usual.
func (e *Executor) Detach() { e.detached.Store(true) }
