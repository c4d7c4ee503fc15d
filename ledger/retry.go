package ledger

import (
	"fmt"
	"slices"
	"strings"
)

// Failures of the machine are not failures of the task (issue 14, item 6).
// A run reported failed whose reason code (MachineFault) says the machine
// refused it or could not start it goes back to the queue, with the
// machine added to the task's Avoid list, until the task has had
// Spec.MaxAttempts (default DefaultMaxAttempts) such failures; then it
// fails for good. Any other failure is the task's own: final, unless the
// task asked for Spec.Retries, each of which runs it again (anywhere). A
// machine lost under a run (MachineLostCmd) is a failure of the machine
// too: counted in MachineFailures, the machine avoided (lostRun).
//
// Avoid is a preference, not a ban: a decision may place the task on a
// machine it avoids only when no other machine of the policy's view (up,
// not drained) matches it (avoidHolds, policy.Eligible), so that a task
// that failed on every machine it may use is not stranded; MaxAttempts
// bounds its runs.

const (
	// DefaultMaxAttempts is Spec.MaxAttempts when the spec gives none.
	DefaultMaxAttempts = 3
	// MaxMaxAttempts and MaxRetries bound the spec's fields.
	MaxMaxAttempts = 100
	MaxRetries     = 100
	// MaxAvoid bounds Task.Avoid: the most recent machines are kept.
	MaxAvoid = 16
)

// machineFaults are the reason codes of a run that ended because of its
// machine, not the task: the executor refused it or could not start it,
// or the inputs could not be brought to it. Every other code (exit_nonzero,
// killed_signal, killed_timeout, cpu_limit, disk_limit, bad_spec,
// output_too_large, output_failed, an unknown or empty code) is the
// task's. The table is part of the replicated state's rules: changing it
// changes how a log replays.
var machineFaults = map[string]bool{
	"not_allowed":        true,
	"run_as_unavailable": true,
	"start_failed":       true,
	"input_too_large":    true,
	"input_unavailable":  true,
}

// ReasonCode is the code a reported reason starts with: up to the first
// ':', ';' or space ("not_allowed: /bin/sh is not allowed" → "not_allowed").
func ReasonCode(reason string) string {
	if i := strings.IndexAny(reason, ":; "); i >= 0 {
		return reason[:i]
	}
	return reason
}

// MachineFault says whether a failure reported with reason is the
// machine's rather than the task's.
func MachineFault(reason string) bool { return machineFaults[ReasonCode(reason)] }

// MaxAttemptsOrDefault is the number of runs failed by their machines
// after which the task fails: MaxAttempts, or 1 for a spec without it (a
// task queued before the field existed, for which a machine's failure is
// final; failedRun).
func (s *Spec) MaxAttemptsOrDefault() int { return max(s.MaxAttempts, 1) }

func (s *Spec) validateRetry() *Error {
	if s.Job != "" && !validName(s.Job) {
		return errf(CodeMalformed, "job %q: want 1-%d characters of [A-Za-z0-9._-], starting with a letter or digit", s.Job, MaxNameLen)
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > MaxMaxAttempts {
		return errf(CodeMalformed, "max_attempts %d out of range [0, %d]", s.MaxAttempts, MaxMaxAttempts)
	}
	if s.Retries < 0 || s.Retries > MaxRetries {
		return errf(CodeMalformed, "retries %d out of range [0, %d]", s.Retries, MaxRetries)
	}
	return nil
}

// failedRun is what a failed report does to t: requeue says the task goes
// back to the queue (avoiding machine when the machine is at fault),
// reason is what a final failure records.
//
// A spec without max_attempts (every task queued before the field existed;
// submissions through the API get the default written in) keeps the rule
// it was queued under: a failure is the task's, final unless it has
// retries. Old logs therefore replay to the same states and hashes.
func failedRun(t *Task, machine, reason string) (requeue, machineFault bool, final string) {
	if MachineFault(reason) && t.Spec.MaxAttempts > 0 {
		if t.MachineFailures+1 < t.Spec.MaxAttemptsOrDefault() {
			return true, true, ""
		}
		return false, true, clipReason(fmt.Sprintf("max_attempts: %d runs failed by their machines; last on %s: %s", t.MachineFailures+1, machine, reason))
	}
	if t.Failures < t.Spec.Retries {
		return true, false, ""
	}
	return false, false, reason
}

// requeueTask puts t, failed on machine (already unplaced), back in the queue.
func requeueTask(t *Task, machine string, machineFault bool, res *Result) {
	from := t.State
	t.State = TaskQueued
	why := "retry"
	if machineFault {
		t.MachineFailures++
		t.avoid(machine)
		why = "machine_failed"
	} else {
		t.Failures++
	}
	res.moved(t, from, machine, why)
}

// lostRun is what machine lost under t does to t (already unplaced;
// running says t had started there, not only been assigned). t goes back
// to the queue. A run that had started counts as a run failed by its
// machine when t's spec has max_attempts: MachineFailures + 1, the
// machine avoided, and the last allowed attempt fails t for good, as a
// failed report would (failedRun). A task only assigned there never ran:
// nothing is counted. A spec without max_attempts (queued before the
// field existed) keeps the rule it was queued under, counted in nothing,
// so that old logs replay to the same states and hashes.
func (l *Ledger) lostRun(t *Task, machine string, running bool, atMs int64, res *Result) {
	from := t.State
	t.State = TaskQueued
	if !running || t.Spec.MaxAttempts == 0 {
		res.moved(t, from, machine, "lost")
		return
	}
	t.MachineFailures++
	if t.MachineFailures < t.Spec.MaxAttemptsOrDefault() {
		t.avoid(machine)
		res.moved(t, from, machine, "lost")
		return
	}
	t.State = TaskFailed
	t.Reason = clipReason(fmt.Sprintf("max_attempts: %d runs failed by their machines; last on %s: machine lost", t.MachineFailures, machine))
	t.EndedMs = atMs
	l.unfinished[t.Org]--
	res.moved(t, from, machine, string(TaskFailed))
}

// avoidHolds says whether t's Avoid list keeps it off m: when t avoids m,
// the first machine (by ID) of the policy's view (up, not drained) that t
// matches and does not avoid; "" when t may go to m. It is
// policy.Eligible's rule for one decision.
func (l *Ledger) avoidHolds(m *Machine, t *Task) string {
	if !slices.Contains(t.Avoid, m.ID) {
		return ""
	}
	for _, id := range sortedKeys(l.machines) {
		o := l.machines[id]
		if o.available() && !o.Drained && !slices.Contains(t.Avoid, id) && l.mismatch(o, t) == "" {
			return id
		}
	}
	return ""
}

// avoid adds machine to t.Avoid, once, dropping the oldest over MaxAvoid.
func (t *Task) avoid(machine string) {
	for _, m := range t.Avoid {
		if m == machine {
			return
		}
	}
	t.Avoid = append(t.Avoid, machine)
	if n := len(t.Avoid); n > MaxAvoid {
		t.Avoid = append([]string(nil), t.Avoid[n-MaxAvoid:]...)
	}
}

func clipReason(s string) string {
	if len(s) <= MaxReasonBytes {
		return s
	}
	return s[:MaxReasonBytes]
}

// KindRetryTask re-queues a failed or cancelled task.
const KindRetryTask Kind = "retry_task"

// RetryTask puts one of the acting organisation's failed or cancelled
// tasks back in the queue as a new attempt: its failure counters and the
// machines it avoided are cleared, its recorded checkpoint (if any) is
// kept. Only the task's organisation may (CodeNotOwner); a task in any
// other state is refused (CodeBadState), and so is one that would take
// the organisation over its queue cap (CodeQueueFull).
type RetryTask struct {
	Task string `json:"task"`
}

func (*RetryTask) Kind() Kind { return KindRetryTask }

func (b *RetryTask) validate() *Error { return validTaskRef(b.Task) }

func (b *RetryTask) check(l *Ledger, c *Command) (change, *Error) {
	o, err := l.actor(c)
	if err != nil {
		return nil, err
	}
	t, err := l.task(b.Task)
	if err != nil {
		return nil, err
	}
	if t.Org != c.Org {
		return nil, errf(CodeNotOwner, "task %s belongs to %q, not %q", t.ID, t.Org, c.Org)
	}
	if t.State != TaskFailed && t.State != TaskCancelled {
		return nil, errf(CodeBadState, "task %s is %s: only a failed or cancelled task can be retried", t.ID, t.State)
	}
	if t.Spec.Gang != nil {
		return nil, errf(CodeBadState, "task %s is part %d of gang %s: a gang's parts are not retried one by one; submit the job again", t.ID, t.Spec.Gang.Rank, t.Spec.Gang.ID)
	}
	if err := l.checkQueue(o, 1); err != nil {
		return nil, err
	}
	return func(_ uint64, res *Result) {
		from := t.State
		t.State = TaskQueued
		t.ExitCode, t.Reason, t.EndedMs = 0, "", 0
		t.MachineFailures, t.Failures, t.Avoid = 0, 0, nil
		l.unfinished[t.Org]++
		res.moved(t, from, "", "retried by "+c.Org)
	}, nil
}
