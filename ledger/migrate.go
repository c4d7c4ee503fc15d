package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/coopgrid/coopgrid/policy"
)

// Deadline-driven migration (seed 004 §4.1.3, "Progresso da Execução de
// Tarefas"; issue 20 item 4; docs/POLICY.md §9, "Migration").
//
// The peer that runs a soft-deadline task watches its progress reports
// (runner/progress.go). When the run's measured rate says it will finish,
// with the seed's 10 % margin, after the task's deadline, that peer sends
// MigrateTask. The ledger then decides, the same on every peer: if some
// other machine the task's organisation may use can still finish the rest
// of it in time (the admission's mapping, CheckDeadlines, over the
// machines up and not drained, this one left out), the run is stopped as
// a preempted one is (its peer checkpoints a checkpointable task and
// reports the stop), the machine goes on the task's Avoid list and the
// task back to the queue, where the deadline placement picks a machine
// that meets the deadline. Otherwise moving it would only lose time: the
// run goes on and the task records why its deadline will be missed
// (Task.DeadlineNote), which `peer task` shows its owner.

// KindMigrateTask is the executing peer asking to move a run that will
// miss its deadline.
const KindMigrateTask Kind = "migrate_task"

// MigrateTask says that run Attempt of soft-deadline task Task on Machine
// will miss the task's deadline there: at its measured rate it ends at
// PredictedFinishMs (without the margin, the proposer's clock) with
// DoneMFlop of its work done now, by the task's own progress report.
// Only the machine's organisation may send it (CodeNotOwner), only for
// the run in progress (CodeBadState: the task is not running there, or
// Attempt is not its current run), only for a soft-deadline task that is
// not part of a gang, and only when the prediction with the margin is
// after the deadline (CodeBadState otherwise).
type MigrateTask struct {
	Task              string `json:"task,omitempty" since:"3"`
	Machine           string `json:"machine,omitempty" since:"3"`
	Attempt           int    `json:"attempt,omitempty" since:"3"`
	DoneMFlop         int64  `json:"done_mflop,omitempty" since:"3"`
	PredictedFinishMs int64  `json:"predicted_finish_ms,omitempty" since:"3"`
}

func (*MigrateTask) Kind() Kind { return KindMigrateTask }

func (b *MigrateTask) validate() *Error {
	if err := validTaskRef(b.Task); err != nil {
		return err
	}
	if err := validMachineRef(b.Machine); err != nil {
		return err
	}
	switch {
	case b.Attempt < 1:
		return errf(CodeMalformed, "attempt %d: want the run's number, from 1", b.Attempt)
	case b.DoneMFlop < 0 || b.DoneMFlop > MaxSizeMFlop:
		return errf(CodeMalformed, "done_mflop %d out of range [0, %d]", b.DoneMFlop, int64(MaxSizeMFlop))
	case b.PredictedFinishMs <= 0 || b.PredictedFinishMs > MaxTimeMs:
		return errf(CodeMalformed, "predicted_finish_ms %d out of range [1, %d]", b.PredictedFinishMs, int64(MaxTimeMs))
	}
	return nil
}

func (b *MigrateTask) check(l *Ledger, c *Command) (change, *Error) {
	m, err := l.ownMachine(c, b.Machine)
	if err != nil {
		return nil, err
	}
	t, err := l.task(b.Task)
	if err != nil {
		return nil, err
	}
	switch {
	case t.State != TaskRunning || t.Machine != m.ID:
		return nil, errf(CodeBadState, "task %s is %s%s, not running on %s", t.ID, t.State, onMachine(t), m.ID)
	case t.Attempts != b.Attempt:
		return nil, errf(CodeBadState, "task %s runs its run %d on %s, not run %d", t.ID, t.Attempts, m.ID, b.Attempt)
	case t.Spec.Class != ClassSoftDeadline:
		return nil, errf(CodeBadState, "task %s has no deadline (class %q): only a %s task is migrated for its deadline", t.ID, t.Spec.Class, ClassSoftDeadline)
	case t.Spec.Gang != nil:
		return nil, errf(CodeBadState, "task %s is part %d of gang %s: a gang's parts are not moved one by one", t.ID, t.Spec.Gang.Rank, t.Spec.Gang.ID)
	case b.DoneMFlop > t.SizeMFlop:
		return nil, errf(CodeBadState, "done_mflop %d is above task %s's size %d", b.DoneMFlop, t.ID, t.SizeMFlop)
	}
	now := max(c.AtMs, 0)
	if !MissesDeadline(now, b.PredictedFinishMs, t.Spec.DeadlineMs) {
		return nil, errf(CodeBadState, "task %s is predicted to finish at %s, %s with the %d %% margin: that meets its deadline %s",
			t.ID, fmtMs(b.PredictedFinishMs), fmtMs(withMarginFrom(now, b.PredictedFinishMs)), policy.DeadlineMarginPercent, fmtMs(t.Spec.DeadlineMs))
	}
	rest := l.restAfterMove(t, b.DoneMFlop)
	target, fastest := l.migrationTarget(t, m.ID, rest, now)
	return func(_ uint64, res *Result) {
		if target == "" {
			t.DeadlineNote = clipReason(fmt.Sprintf("will miss its deadline %s: predicted to finish at %s on %s; no machine it may use can finish the remaining %d MFlop in time with the %d %% margin (%s), so it keeps running there",
				fmtMs(t.Spec.DeadlineMs), fmtMs(b.PredictedFinishMs), m.ID, rest, policy.DeadlineMarginPercent, fastestNote(fastest)))
			res.Notes = append(res.Notes, fmt.Sprintf("task %s not migrated: %s", t.ID, t.DeadlineNote))
			return
		}
		l.markStopping(t, m.ID, OutcomePreempting)
		l.unplace(t, m)
		t.State = TaskQueued
		t.avoid(m.ID)
		t.Migrations++
		t.DeadlineNote = clipReason(fmt.Sprintf("migrated off %s at %s: predicted to finish there at %s, after its deadline %s; %s can finish the remaining %d MFlop in time",
			m.ID, fmtMs(now), fmtMs(b.PredictedFinishMs), fmtMs(t.Spec.DeadlineMs), target, rest))
		res.moved(t, TaskRunning, m.ID, "migrated")
		res.Changes = append(res.Changes, Change{Machine: m.ID, MachineOrg: m.Org, Action: ActionStop, Task: t.ID, Reason: "migrated"})
	}, nil
}

// MissesDeadline says whether a run predicted at nowMs to end at
// finishMs misses deadlineMs with the seed's margin: the time left, plus
// policy.DeadlineMarginPercent of it, ends after the deadline. The
// executing peer asks it before sending MigrateTask, and the ledger
// refuses a MigrateTask for which it is false.
func MissesDeadline(nowMs, finishMs, deadlineMs int64) bool {
	return withMarginFrom(nowMs, finishMs) > deadlineMs
}

func withMarginFrom(nowMs, finishMs int64) int64 {
	left := min(max(finishMs-nowMs, 0), MaxTimeMs)
	return nowMs + policy.WithMargin(left)
}

// restAfterMove is the work t has left once moved: a checkpointable task
// resumes from what it reports done (its checkpoint at the stop records
// it), any other task starts again from zero.
func (l *Ledger) restAfterMove(t *Task, done int64) int64 {
	if !t.Spec.Checkpointable {
		return t.SizeMFlop
	}
	return max(min(t.RemainingMFlop, t.SizeMFlop-done), 1)
}

// migrationTarget is a machine other than from that can finish rest of t
// by its deadline (mapSoft over the policy's view at nowMs, with t no
// longer running and from avoided), "" when none can; fastestMs is then
// the earliest predicted finish with the margin over the machines t may
// use (0: none).
func (l *Ledger) migrationTarget(t *Task, from string, rest, nowMs int64) (string, int64) {
	st, vm := l.policyView(nowMs, 0, policy.NewQueue(len(l.order), false))
	st.Running = slices.DeleteFunc(st.Running, func(r policy.Running) bool { return r.Task.ID == t.ID })
	orgIdx := map[string]int{t.Org: slices.Index(l.order, t.Org)}
	moved := *t
	moved.RemainingMFlop = rest
	moved.Avoid = append(slices.Clone(t.Avoid), from)
	pt := policyTask(&moved, orgIdx)
	mp, fastest := mapSoft(st, pt, nowMs, slices.Index(vm.Machines, from))
	if mp.Outcome == policy.MapRefused || mp.Machine < 0 || mp.Machine >= len(vm.Machines) {
		return "", fastest
	}
	return vm.Machines[mp.Machine], 0
}

func fastestNote(ms int64) string {
	if ms == 0 {
		return "none may take it now"
	}
	return "fastest predicted finish " + fmtMs(ms)
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }
