package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/coopgrid/coopgrid/policy"
)

// Task classes and deadlines (seed 004; docs/POLICY.md §9, docs/JOBS.md
// "Deadlines"). A task without a class (every task of a version-2 log) is
// placed by the federation's policy alone, exactly as before, so that old
// logs replay to the same placements; a task of either class is placed by
// the deadline mapping among the machines the policy lets its
// organisation use.
const (
	ClassNice         = "nice"
	ClassSoftDeadline = "soft-deadline"
)

func (s *Spec) validateDeadline() *Error {
	switch s.Class {
	case "", ClassNice:
		if s.DeadlineMs != 0 {
			return errf(CodeMalformed, "deadline_ms %d: only a %s task has a deadline", s.DeadlineMs, ClassSoftDeadline)
		}
	case ClassSoftDeadline:
		if s.DeadlineMs <= 0 || s.DeadlineMs > MaxTimeMs {
			return errf(CodeMalformed, "deadline_ms %d: a %s task needs a deadline in [1, %d]", s.DeadlineMs, ClassSoftDeadline, int64(MaxTimeMs))
		}
	default:
		return errf(CodeMalformed, "class %q: want %q, %q or none", s.Class, ClassNice, ClassSoftDeadline)
	}
	return nil
}

// PolicyClass is the policy's class of a ledger class (0: none).
func PolicyClass(class string) policy.TaskClass {
	switch class {
	case ClassNice:
		return policy.Nice
	case ClassSoftDeadline:
		return policy.SoftDeadline
	}
	return 0
}

// DeadlineRefusal says why a soft-deadline task of a submission cannot be
// admitted: no machine its organisation may use can finish it by its
// deadline with the margin, now or after the work ahead of it there (the
// task it runs, and the submission's tasks with earlier deadlines packed
// before it).
type DeadlineRefusal struct {
	// Index is the task's place in the submission; Ahead counts the
	// submission's soft tasks packed before it (earlier deadlines).
	Index, Ahead int
	SizeMFlop    int64
	DeadlineMs   int64
	// FastestMs is the earliest predicted finish (with the margin) over
	// the machines it may use; 0 when it may use none.
	FastestMs int64
}

func (r *DeadlineRefusal) Error() string {
	dl := time.UnixMilli(r.DeadlineMs).UTC().Format(time.RFC3339)
	with := ""
	if r.Ahead > 0 {
		with = fmt.Sprintf(" after the %d task(s) of this submission with earlier deadlines", r.Ahead)
	}
	if r.FastestMs == 0 {
		return fmt.Sprintf("tasks[%d]: no machine its organisation may use now (requirements, owner policies, power limit) can run %d MFlop by %s%s", r.Index, r.SizeMFlop, dl, with)
	}
	return fmt.Sprintf("tasks[%d]: no machine can finish %d MFlop by %s with the %d %% margin%s; fastest predicted finish %s",
		r.Index, r.SizeMFlop, dl, policy.DeadlineMarginPercent, with, time.UnixMilli(r.FastestMs).UTC().Format(time.RFC3339))
}

// CheckDeadlines is admission for the soft-deadline tasks of a submission
// by org at nowMs (docs/POLICY.md §9, "Admission"): policy.AdmitDeadlines
// over the committed machines that are up and not drained, the tasks
// judged together, earliest deadline first, each behind the work the
// others packed before it left, with the preemption of a nice task where
// the pass would do it. Tasks queued ahead are not counted. The first
// task refused is returned; nil when every soft task can be placed in
// time.
func (l *Ledger) CheckDeadlines(org string, nowMs int64, tasks []TaskSpec) *DeadlineRefusal {
	first := slices.IndexFunc(tasks, func(ts TaskSpec) bool { return ts.Spec.Class == ClassSoftDeadline })
	if first < 0 || l.orgs[org] == nil {
		return nil
	}
	nowMs = max(nowMs, 0)
	st, _ := l.policyView(nowMs, 0, policy.NewQueue(len(l.order), false))
	orgIdx := map[string]int{org: slices.Index(l.order, org)}
	pts := make([]policy.Task, len(tasks))
	for i := range tasks {
		ts := &tasks[i]
		pts[i] = policyTask(&Task{ID: fmt.Sprintf("submit-%d", i), Org: org, RemainingMFlop: ts.SizeMFlop, Spec: ts.Spec}, orgIdx)
	}
	r := policy.AdmitDeadlines(st, pts)
	if r == nil {
		return nil
	}
	return &DeadlineRefusal{Index: r.Task, Ahead: r.Ahead, SizeMFlop: tasks[r.Task].SizeMFlop,
		DeadlineMs: tasks[r.Task].Spec.DeadlineMs, FastestMs: r.FastestMs}
}

// mapSoft maps soft task pt on st as admission does (policy.MapDeadline
// among the machines policy.DeadlineMay lets it use, every running
// machine counted as running a protected soft task with the longest of
// its remaining work), leaving out machine index skip (-1: none). When
// refused, fastestMs is the earliest predicted finish (with the margin)
// over the machines it may use, 0 when none.
func mapSoft(st *policy.State, pt policy.Task, nowMs int64, skip int) (mp policy.Mapping, fastestMs int64) {
	size := min(max(pt.SizeMFlop, 1), policy.MaxDeadlineMFlop)
	ms := make([]policy.DeadlineMachine, len(st.Machines))
	for j := range st.Machines {
		mc := &st.Machines[j]
		ms[j] = policy.DeadlineMachine{ID: mc.ID, MFLOPS: policy.TaskMFLOPS(mc, &pt), MTBFMs: mc.MTBFMs}
	}
	for _, r := range st.Running {
		m := &ms[r.Machine]
		m.Running, m.RunningID, m.Protected = policy.SoftDeadline, r.Task.ID, true
		m.RemainingMFlop = min(max(m.RemainingMFlop, r.Task.SizeMFlop), policy.MaxDeadlineMFlop-size)
	}
	may := policy.DeadlineMay(st, pt)
	if skip >= 0 && skip < len(may) {
		may[skip] = false
	}
	in := policy.DeadlineInput{NowMs: nowMs, Machines: ms, May: may,
		Task: policy.DeadlineTask{ID: pt.ID, Class: policy.SoftDeadline, SizeMFlop: size, DeadlineMs: pt.DeadlineMs}}
	mp, err := policy.MapDeadline(in)
	if err == nil && mp.Outcome != policy.MapRefused {
		return mp, 0
	}
	for j, m := range ms {
		if may[j] {
			f := nowMs + policy.WithMargin(policy.PredictRunMs(m.RemainingMFlop+size, m.MFLOPS))
			if fastestMs == 0 || f < fastestMs {
				fastestMs = f
			}
		}
	}
	return policy.Mapping{Outcome: policy.MapRefused, Machine: -1}, fastestMs
}

// PredictedFinishes is, for each running task of ts, the predicted end of
// its run (policy.PredictRunMs, without the margin): from the start of
// the run, or from the task's checkpoint when one was recorded during the
// run, its remaining work at its share of the machine's speed
// (EffectiveMFLOPS, with the owner's recorded load taken off:
// policy.AvailableMFLOPS). Tasks not running are left out.
func (l *Ledger) PredictedFinishes(ts []Task) map[string]int64 {
	var out map[string]int64
	for i := range ts {
		t := &ts[i]
		if t.State != TaskRunning {
			continue
		}
		m := l.machines[t.Machine]
		k := t.openSegment(t.Machine, OutcomeRunning)
		if m == nil || k < 0 {
			continue
		}
		from := t.Segments[k].StartMs
		if ck := t.Checkpoint; ck != nil && ck.AtMs > from {
			from = ck.AtMs
		}
		speed := max(m.share(t).Of(policy.AvailableMFLOPS(m.EffectiveMFLOPS(), m.OwnerLoadPermille)), 1)
		if out == nil {
			out = make(map[string]int64)
		}
		out[t.ID] = from + policy.PredictRunMs(min(t.RemainingMFlop, policy.MaxDeadlineMFlop), speed)
	}
	return out
}
