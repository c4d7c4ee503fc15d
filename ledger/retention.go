package ledger

import (
	"fmt"
	"slices"
)

// Bounded state (issue 17). A terminal task stays in the replicated state
// until the federation's retention (Rules.Retention) lets it go; then the
// leader proposes forget_tasks naming it, and every peer removes it at the
// same log index. Before the entry applies, each peer's OnApply hook gets
// the full records (Result.Forgotten) and keeps its organisation's in its
// local history store (package history). The energy accounts do not move:
// an organisation's Energy is a running total, and the part of it that the
// forgotten tasks' closed segments make up is kept per organisation
// (ForgottenTotals), so that CheckInvariants still proves every total
// equal to its segments (the live ones plus the forgotten sums).

// KindForgetTasks removes terminal tasks from the replicated state.
const KindForgetTasks Kind = "forget_tasks"

// MaxForgetPerCommand bounds the tasks one forget_tasks names.
const MaxForgetPerCommand = 10_000

// MaxRetentionMs bounds Retention.AfterMs (about 100 years).
const MaxRetentionMs = 100 * 365 * 24 * 3600 * 1000

// Retention is the federation's rule on when a terminal (done, failed or
// cancelled) task may leave the replicated state. It is one of the
// federation's rules, fixed by its first registration (Rules.Retention;
// config.yaml's consensus.retention of the first peer). Either figure
// alone allows a task to go:
//   - AfterMs > 0: once AfterMs have passed since it ended (by the
//     forget command's time, the leader's clock);
//   - Keep > 0: while more than Keep terminal tasks remain (the leader
//     picks the earliest ended).
//
// A task whose run still waits for its stop report (a cancelled task's
// open segment) is kept until the report closes it, whatever the rule.
type Retention struct {
	AfterMs int64 `json:"after_ms,omitempty" since:"2"`
	Keep    int64 `json:"keep,omitempty" since:"2"`
}

func (r *Retention) validate() *Error {
	if r.AfterMs < 0 || r.AfterMs > MaxRetentionMs || r.Keep < 0 || r.Keep > MaxQueuedPerOrgLimit {
		return errf(CodeMalformed, "rules: retention: after_ms %d or keep %d out of range [0, %d], [0, %d]",
			r.AfterMs, r.Keep, int64(MaxRetentionMs), int64(MaxQueuedPerOrgLimit))
	}
	if r.AfterMs == 0 && r.Keep == 0 {
		return errf(CodeMalformed, "rules: retention: set after_ms, keep or both (omit retention to keep every task)")
	}
	return nil
}

// ForgetTasks removes terminal tasks from the replicated state: only the
// leader's own loop proposes it (leaderOnly), acting for its organisation.
// Apply refuses the whole command, changing nothing:
//   - on a federation without a retention rule (CodeRetention);
//   - a task it does not hold (CodeUnknownTask), one not terminal or whose
//     run still waits for its stop report (CodeBadState);
//   - a task the retention does not let go yet (CodeRetention).
//
// Otherwise every named task leaves tasks, the submit order and every
// index; Result.Forgotten holds their records in the command's order.
type ForgetTasks struct {
	Tasks []string `json:"tasks,omitempty" since:"2"`
}

func (*ForgetTasks) Kind() Kind { return KindForgetTasks }

func (*ForgetTasks) leaderOnly() bool { return true }

// wakesScheduler: only terminal tasks leave; nothing the policy sees.
func (*ForgetTasks) wakesScheduler(*Result) bool { return false }

func (b *ForgetTasks) validate() *Error {
	if len(b.Tasks) == 0 || len(b.Tasks) > MaxForgetPerCommand {
		return errf(CodeMalformed, "forget_tasks names %d tasks: want 1 to %d", len(b.Tasks), MaxForgetPerCommand)
	}
	seen := make(map[string]struct{}, len(b.Tasks))
	for _, id := range b.Tasks {
		if err := validTaskRef(id); err != nil {
			return err
		}
		if _, dup := seen[id]; dup {
			return errf(CodeMalformed, "forget_tasks names task %s twice", id)
		}
		seen[id] = struct{}{}
	}
	return nil
}

func (b *ForgetTasks) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	ret := l.retention()
	if ret == nil {
		return nil, errf(CodeRetention, "the federation has no retention rule: every task is kept")
	}
	ts := make([]*Task, len(b.Tasks))
	young := 0
	for i, id := range b.Tasks {
		t, err := l.task(id)
		if err != nil {
			return nil, err
		}
		if !t.State.Terminal() {
			return nil, errf(CodeBadState, "task %s is %s: only done, failed or cancelled tasks may be forgotten", id, t.State)
		}
		if t.hasOpenSegment() {
			return nil, errf(CodeBadState, "task %s: a run of it on %s still waits for its stop report", id, t.lastMachine())
		}
		if ret.AfterMs == 0 || t.EndedMs > c.AtMs-ret.AfterMs {
			young++
		}
		ts[i] = t
	}
	if young > 0 {
		left := l.terminal() - int64(len(ts))
		if ret.Keep == 0 || left < ret.Keep {
			return nil, errf(CodeRetention, "%d of the tasks ended less than %d ms before %d, and forgetting them would leave %d terminal tasks (the rule keeps %d)",
				young, ret.AfterMs, c.AtMs, left, ret.Keep)
		}
	}
	return func(_ uint64, res *Result) { l.forget(ts, res) }, nil
}

func (t *Task) hasOpenSegment() bool {
	return slices.ContainsFunc(t.Segments, func(s Segment) bool { return s.Outcome.Open() })
}

func (t *Task) lastMachine() string {
	if n := len(t.Segments); n > 0 {
		return t.Segments[n-1].Machine
	}
	return "no machine"
}

// retention is the federation's retention rule, nil when it has none.
func (l *Ledger) retention() *Retention {
	if l.rules == nil {
		return nil
	}
	return l.rules.Retention
}

// terminal counts the terminal tasks the ledger holds.
func (l *Ledger) terminal() int64 {
	var unfinished int64
	for _, n := range l.unfinished {
		unfinished += n
	}
	return int64(len(l.tasks)) - unfinished
}

// ForgottenTotals is what an organisation's forgotten tasks leave behind:
// how many of its tasks were forgotten, and the part of its energy
// accounts that their closed segments make up (user side for its tasks,
// owner side for the runs on its machines).
type ForgottenTotals struct {
	Tasks  int64  `json:"tasks"`
	Energy Energy `json:"energy"`
}

// forget removes ts (terminal, closed) from the state, keeping their
// energy in the forgotten totals and their records in res.
func (l *Ledger) forget(ts []*Task, res *Result) {
	gone := make(map[string]struct{}, len(ts))
	// One allocation for the records: growing it task by task copied a
	// forget of a thousand tasks' records many times (issue 17: replay).
	res.Forgotten = slices.Grow(res.Forgotten, len(ts))
	for _, t := range ts {
		res.Forgotten = append(res.Forgotten, t.clone())
		l.forgottenOf(t.Org).Tasks++
		for _, s := range t.Segments {
			l.forgottenOf(t.Org).Energy.UserMilliJ += s.EnergyMilliJ
			if owner := l.forgottenOf(s.MachineOrg); s.MachineOrg == t.Org {
				owner.Energy.OwnerSelfMilliJ += s.EnergyMilliJ
			} else {
				owner.Energy.OwnerOthersMilliJ += s.EnergyMilliJ
			}
		}
		gone[t.ID] = struct{}{}
		delete(l.tasks, t.ID)
	}
	l.bySeq = slices.DeleteFunc(l.bySeq, func(t *Task) bool {
		_, ok := gone[t.ID]
		return ok
	})
}

func (l *Ledger) forgottenOf(org string) *ForgottenTotals {
	f := l.forgotten[org]
	if f == nil {
		f = &ForgottenTotals{}
		l.forgotten[org] = f
	}
	return f
}

// Forgotten returns what org's forgotten tasks left behind (zero when none
// were).
func (l *Ledger) Forgotten(org string) ForgottenTotals {
	if f := l.forgotten[org]; f != nil {
		return *f
	}
	return ForgottenTotals{}
}

// Forgettable lists, oldest ended first (then by submit order), at most
// max terminal tasks the retention rule lets go at time nowMs: what the
// leader proposes. Empty without a retention rule.
func (l *Ledger) Forgettable(nowMs int64, max int) []string {
	ret := l.retention()
	if ret == nil || max <= 0 {
		return nil
	}
	var cands []*Task
	for _, t := range l.bySeq {
		if t.State.Terminal() && !t.hasOpenSegment() {
			cands = append(cands, t)
		}
	}
	slices.SortStableFunc(cands, func(a, b *Task) int {
		switch {
		case a.EndedMs < b.EndedMs:
			return -1
		case a.EndedMs > b.EndedMs:
			return 1
		}
		return 0
	})
	byCount := int64(0)
	if ret.Keep > 0 {
		byCount = max64(0, l.terminal()-ret.Keep)
	}
	var out []string
	for i, t := range cands {
		old := ret.AfterMs > 0 && t.EndedMs <= nowMs-ret.AfterMs
		if !old && int64(i) >= byCount {
			break
		}
		if len(out) == max {
			break
		}
		out = append(out, t.ID)
	}
	return out
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// canonicalForgotten is the forgotten totals for the canonical state, nil
// when nothing was ever forgotten (a state from before retention hashes
// as before).
func (l *Ledger) canonicalForgotten() map[string]*ForgottenTotals {
	if len(l.forgotten) == 0 {
		return nil
	}
	return l.forgotten
}

// restoreForgotten takes a decoded state's forgotten totals.
func (l *Ledger) restoreForgotten(f map[string]*ForgottenTotals) error {
	for org, t := range f {
		if l.orgs[org] == nil {
			return fmt.Errorf("forgotten totals of unknown organisation %q", org)
		}
		if t == nil {
			return fmt.Errorf("forgotten totals of %q are null", org)
		}
		c := *t
		l.forgotten[org] = &c
	}
	return nil
}

// checkForgotten reports forgotten totals that cannot be (part of
// CheckInvariants): of an unknown organisation, or negative.
func (l *Ledger) checkForgotten(fail func(string, ...any)) {
	for _, org := range sortedKeys(l.forgotten) {
		f := l.forgotten[org]
		if l.orgs[org] == nil {
			fail("forgotten totals of unknown organisation %q", org)
		}
		if f.Tasks < 0 || f.Energy.UserMilliJ < 0 || f.Energy.OwnerSelfMilliJ < 0 || f.Energy.OwnerOthersMilliJ < 0 {
			fail("organisation %q: negative forgotten totals %+v", org, *f)
		}
		// No check that a rule is in force: a federation may have voted
		// its rule away after forgetting tasks (retentionvote.go).
	}
}

// forgottenEnergy is the energy org's forgotten tasks account for.
func (l *Ledger) forgottenEnergy(org string) Energy {
	if f := l.forgotten[org]; f != nil {
		return f.Energy
	}
	return Energy{}
}

func (e Energy) plus(o Energy) Energy {
	return Energy{UserMilliJ: e.UserMilliJ + o.UserMilliJ, OwnerSelfMilliJ: e.OwnerSelfMilliJ + o.OwnerSelfMilliJ, OwnerOthersMilliJ: e.OwnerOthersMilliJ + o.OwnerOthersMilliJ}
}

// Size is the number of records the state holds (organisations,
// machines, tasks, remembered submits): what a full CheckInvariants or
// Hash costs is proportional to it. `peer verify` paces its checks by it.
func (l *Ledger) Size() int {
	n := len(l.orgs) + len(l.machines) + len(l.tasks)
	for _, o := range l.reqOrder {
		n += len(o)
	}
	return n
}
