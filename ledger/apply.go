package ledger

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
)

// Every handler below is a Body's check: it validates completely against
// the state, changing nothing, and returns the mutation (a change), which
// cannot fail. Ledger.apply runs the change right after its check, which is
// what makes a rejected command leave the state untouched; Ledger.Check runs
// the check alone (the leader's dry run before appending). Each rule thus
// has one copy, used by both.

// change is the mutation a successful check returns: it applies the body at
// index, results beyond the error going to res. It cannot fail.
type change func(index uint64, res *Result)

// actor returns the acting organisation, checking that the acting peer is
// the one registered for it.
func (l *Ledger) actor(c *Command) (*Org, *Error) {
	o := l.orgs[c.Org]
	if o == nil {
		return nil, errf(CodeUnknownOrg, "organisation %q is not registered", c.Org)
	}
	if o.Peer != c.Peer {
		return nil, errf(CodeNotOwner, "peer %s does not act for organisation %q", c.Peer, c.Org)
	}
	if err := l.checkNotRemoved(c.Org); err != nil {
		return nil, err
	}
	return o, nil
}

// ownMachine returns the acting organisation's machine id.
func (l *Ledger) ownMachine(c *Command, id string) (*Machine, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	m := l.machines[id]
	if m == nil {
		return nil, errf(CodeUnknownMachine, "machine %q is not registered", id)
	}
	if m.Org != c.Org {
		return nil, errf(CodeNotOwner, "machine %q belongs to %q, not %q", id, m.Org, c.Org)
	}
	return m, nil
}

func (l *Ledger) task(id string) (*Task, *Error) {
	t := l.tasks[id]
	if t == nil {
		return nil, errf(CodeUnknownTask, "task %q is not in the ledger", id)
	}
	return t, nil
}

// reportedRun returns the task and the machine a report is about: the
// machine must be the acting organisation's.
func (l *Ledger) reportedRun(c *Command, task, machine string) (*Task, *Machine, *Error) {
	m, err := l.ownMachine(c, machine)
	if err != nil {
		return nil, nil, err
	}
	t, err := l.task(task)
	if err != nil {
		return nil, nil, err
	}
	return t, m, nil
}

func newMachine(org string, s MachineSpec, atMs int64) *Machine {
	return &Machine{
		ID: org + "/" + s.Name, Org: org, Name: s.Name,
		MFLOPS: s.MFLOPS, BusyMilliW: s.BusyMilliW, IdleMilliW: s.IdleMilliW, Unprotected: s.Unprotected, Opportunistic: s.Opportunistic,
		State: MachineUp, LastHeartbeatMs: atMs, MachineResources: s.MachineResources.clone(),
	}
}

func (b *RegisterOrg) check(l *Ledger, c *Command) (change, *Error) {
	if _, ok := l.orgs[c.Org]; ok {
		return nil, errf(CodeExists, "organisation %q is already registered", c.Org)
	}
	if other, ok := l.peers[c.Peer]; ok {
		return nil, errf(CodeExists, "peer %s already acts for organisation %q", c.Peer, other)
	}
	if err := l.checkBinding(c); err != nil {
		return nil, err
	}
	if err := l.checkRegistration(b); err != nil {
		return nil, err
	}
	return func(index uint64, _ *Result) {
		if len(l.orgs) == 0 && b.Rules != nil {
			l.rules = b.Rules.normalized()
		}
		l.machinesChanged() // the view's organisation count
		l.orgs[c.Org] = &Org{Name: c.Org, Peer: c.Peer, LimitMilliW: b.LimitMilliW, RegisteredAt: index}
		l.order = append(l.order, c.Org)
		l.peers[c.Peer] = c.Org
		l.byOrgM[c.Org] = map[string]struct{}{}
		for _, s := range b.Machines {
			m := newMachine(c.Org, s, c.AtMs)
			l.startHistory(m, c.AtMs)
			l.putMachine(m)
		}
	}, nil
}

func (l *Ledger) putMachine(m *Machine) {
	l.machinesChanged()
	l.machines[m.ID] = m
	l.byOrgM[m.Org][m.ID] = struct{}{}
}

func (b *AddMachine) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	m := newMachine(c.Org, b.Machine, c.AtMs)
	if _, ok := l.machines[m.ID]; ok {
		return nil, errf(CodeExists, "machine %q is already registered", m.ID)
	}
	if l.rules != nil {
		if err := checkEfficiency(b.Machine); err != nil {
			return nil, err
		}
	}
	return func(uint64, *Result) {
		l.startHistory(m, c.AtMs)
		l.putMachine(m)
	}, nil
}

func (b *RemoveMachine) check(l *Ledger, c *Command) (change, *Error) {
	m, err := l.ownMachine(c, b.Machine)
	if err != nil {
		return nil, err
	}
	if m.Task != "" {
		return nil, errf(CodeMachineBusy, "machine %q holds task %s", m.ID, m.Task)
	}
	if n := len(l.stopping[m.ID]); n > 0 {
		return nil, errf(CodeMachineBusy, "machine %q has %d stopped runs whose energy is not reported yet (report them, or declare the machine lost)", m.ID, n)
	}
	return func(uint64, *Result) {
		l.machinesChanged()
		delete(l.machines, m.ID)
		delete(l.byOrgM[m.Org], m.ID)
	}, nil
}

func (b *SetLimit) check(l *Ledger, c *Command) (change, *Error) {
	o, err := l.actor(c)
	if err != nil {
		return nil, err
	}
	lim := b.LimitMilliW
	if pi := l.pi[o.Name]; lim < pi {
		return nil, errf(CodeLimitExceeded, "limit %d mW is below the %d mW now serving %q's tasks; lower it after they finish", lim, pi, o.Name)
	}
	return func(uint64, *Result) { o.LimitMilliW = lim }, nil
}

func (b *SubmitTasks) check(l *Ledger, c *Command) (change, *Error) {
	o, err := l.actor(c)
	if err != nil {
		return nil, err
	}
	digest := ""
	if b.RequestID != "" {
		// A resend of a remembered submit changes nothing (requests.go);
		// one with another submission under the same ID is refused.
		digest = submitDigest(b.Tasks)
		if r := l.requests[o.Name][b.RequestID]; r != nil {
			if err := l.replay(r, digest, &Result{}); err != nil {
				return nil, err
			}
			return func(_ uint64, res *Result) { l.replay(r, digest, res) }, nil
		}
	}
	if err := l.checkQueue(o, len(b.Tasks)); err != nil {
		return nil, err
	}
	if err := l.checkFits(b.Tasks); err != nil {
		return nil, err
	}
	return func(index uint64, res *Result) { l.submit(o, b, index, c.AtMs, digest, res) }, nil
}

// submit queues b's tasks for o; a keyed submit (digest set) is remembered.
func (l *Ledger) submit(o *Org, b *SubmitTasks, index uint64, atMs int64, digest string, res *Result) {
	var rec *SubmitRecord
	if b.RequestID != "" {
		rec = &SubmitRecord{Org: o.Name, RequestID: b.RequestID, Index: index, AtMs: atMs,
			First: o.Submitted + 1, Count: len(b.Tasks), Digest: digest}
	}
	l.unfinished[o.Name] += int64(len(b.Tasks))
	res.TaskIDs = make([]string, 0, len(b.Tasks))
	gangID := ""
	for _, ts := range b.Tasks {
		o.Submitted++
		l.seq++
		t := &Task{
			ID:  o.Name + "-" + strconv.FormatUint(o.Submitted, 10),
			Org: o.Name, SizeMFlop: ts.SizeMFlop, RemainingMFlop: ts.SizeMFlop,
			Spec: ts.Spec.clone(), Seq: l.seq, SubmittedMs: atMs, State: TaskQueued,
		}
		if g := t.Spec.Gang; g != nil {
			if g.Rank == 0 {
				gangID = t.ID
			}
			g.ID = gangID
		}
		l.tasks[t.ID] = t
		l.bySeq = append(l.bySeq, t)
		res.TaskIDs = append(res.TaskIDs, t.ID)
		res.moved(t, "", "", "submitted")
	}
	if rec != nil {
		l.remember(rec)
	}
}

func (b *CancelTask) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	t, err := l.task(b.Task)
	if err != nil {
		return nil, err
	}
	if t.Org != c.Org {
		return nil, errf(CodeNotOwner, "task %s belongs to %q, not %q", t.ID, t.Org, c.Org)
	}
	if t.State.Terminal() {
		return nil, errf(CodeBadState, "task %s is already %s", t.ID, t.State)
	}
	return func(_ uint64, res *Result) {
		from, machine := t.State, t.Machine
		if t.State.Placed() {
			m := l.machines[t.Machine]
			if t.State == TaskRunning {
				l.markStopping(t, m.ID, OutcomeCancelling)
			}
			l.unplace(t, m)
			res.Changes = append(res.Changes, Change{Machine: m.ID, MachineOrg: m.Org, Action: ActionStop, Task: t.ID, Reason: "cancelled"})
		}
		t.State = TaskCancelled
		l.unfinished[t.Org]--
		t.EndedMs = c.AtMs
		t.Reason = "cancelled by " + c.Org
		res.moved(t, from, machine, "cancelled")
		l.stopGang(t, c.AtMs, res) // a cancel cancels the whole gang
	}, nil
}

// check of a decisions batch is its envelope only: each decision is judged
// on its own when the batch applies, against the state the previous ones
// left (the documented rule of batches).
func (b *Decisions) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	if _, ok := l.SchedulingSettings(); ok {
		return nil, errf(CodeSchedulingMode, "this federation's peers compute every scheduling pass themselves: a leader proposes a schedule trigger, not decisions")
	}
	return func(_ uint64, res *Result) { l.applyDecisions(b.Decisions, c.AtMs, res) }, nil
}

// applyDecisions applies ds in order, each judged against the state the
// previous ones left, with its verdict in res.Decisions: a decisions
// batch's and a schedule trigger's pass alike.
func (l *Ledger) applyDecisions(ds []Decision, atMs int64, res *Result) {
	res.Decisions = make([]DecisionResult, len(ds))
	gangs := l.gangDecisions(ds) // gang parts are judged together (gang.go)
	for i, d := range ds {
		if idx := gangs[i]; idx != nil {
			if idx[0] == i {
				l.applyGang(ds, idx, atMs, res)
			}
			continue
		}
		res.Decisions[i] = DecisionResult{Decision: d, Err: l.decide(d, atMs, res)}
	}
}

// decide validates one decision against the current state and, if valid,
// applies it.
func (l *Ledger) decide(d Decision, atMs int64, res *Result) *Error {
	do, err := l.checkDecision(d, 0, atMs)
	if err == nil {
		do(res)
	}
	return err
}

// checkDecision validates one decision against the current state, with
// extraMilliW more in its task's organisation's PI (a gang's parts placed
// before it), and returns its change, at atMs.
func (l *Ledger) checkDecision(d Decision, extraMilliW, atMs int64) (func(*Result), *Error) {
	switch d.Kind {
	case DecideAllocate:
		if d.Victim != "" {
			return nil, errf(CodeMalformed, "an allocation has no victim")
		}
	case DecidePreempt:
		if d.Victim == "" || d.Victim == d.Task {
			return nil, errf(CodeMalformed, "a preemption needs a victim other than the task placed")
		}
	default:
		return nil, errf(CodeMalformed, "decision kind %q: want allocate or preempt", d.Kind)
	}
	t := l.tasks[d.Task]
	if t == nil {
		return nil, errf(CodeUnknownTask, "task %q is not in the ledger", d.Task)
	}
	if t.State != TaskQueued {
		return nil, errf(CodeStale, "task %s is %s, not queued", t.ID, t.State)
	}
	m := l.machines[d.Machine]
	if m == nil {
		return nil, errf(CodeUnknownMachine, "machine %q is not registered", d.Machine)
	}
	if m.State != MachineUp {
		return nil, errf(CodeMachineDown, "machine %q is %s", m.ID, m.State)
	}
	if m.Drained {
		return nil, errf(CodeMachineDown, "machine %q is drained", m.ID)
	}
	if m.Reclaimed {
		return nil, errf(CodeMachineDown, "machine %q is reclaimed by its owner", m.ID)
	}
	o := l.orgs[t.Org]
	pi := l.pi[t.Org] + extraMilliW + m.share(t).Of(m.BusyMilliW)
	var v *Task
	if d.Kind == DecidePreempt {
		v = l.tasks[d.Victim]
		if v == nil {
			return nil, errf(CodeUnknownTask, "victim %q is not in the ledger", d.Victim)
		}
		if !m.holds(v.ID) {
			return nil, errf(CodeStale, "victim %s does not hold machine %q", v.ID, m.ID)
		}
		if v.Org == t.Org {
			pi -= m.share(v).Of(m.BusyMilliW)
		}
	}
	if why := l.mismatch(m, t); why != "" {
		return nil, errf(CodeNoMatch, "task %s cannot run on %q: %s", t.ID, m.ID, why)
	}
	if other := l.avoidHolds(m, t); other != "" {
		return nil, errf(CodeNoMatch, "task %s avoids %q, where an earlier run failed, while %q may run it", t.ID, m.ID, other)
	}
	if !l.fits(m, t, v) {
		if len(m.Also) == 0 && m.CPUs <= 1 && m.MemoryBytes == 0 && m.GPUs == 0 {
			return nil, errf(CodeMachineBusy, "machine %q holds task %s", m.ID, m.Task)
		}
		return nil, errf(CodeMachineBusy, "machine %q has no room for task %s", m.ID, t.ID)
	}
	if pi > o.LimitMilliW {
		return nil, errf(CodeLimitExceeded, "placing %s on %q brings %q to %d mW, above its limit of %d mW", t.ID, m.ID, o.Name, pi, o.LimitMilliW)
	}
	return func(res *Result) {
		if v != nil {
			if v.State == TaskRunning {
				l.markStopping(v, m.ID, OutcomePreempting)
			}
			from := v.State
			l.unplace(v, m)
			v.State = TaskQueued
			res.moved(v, from, m.ID, "preempted")
			res.Changes = append(res.Changes, Change{Machine: m.ID, MachineOrg: m.Org, Action: ActionStop, Task: v.ID, Reason: "preempted"})
			l.stopGang(v, atMs, res) // a preempted part stops its gang
		}
		l.place(t, m)
		res.moved(t, TaskQueued, m.ID, "allocated")
		res.Changes = append(res.Changes, Change{Machine: m.ID, MachineOrg: m.Org, Action: ActionStart, Task: t.ID, Reason: "allocated"})
	}, nil
}

func (l *Ledger) place(t *Task, m *Machine) {
	t.State = TaskAssigned
	t.Machine = m.ID
	m.addTask(t.ID)
	sh := m.share(t)
	l.pi[t.Org] += sh.Of(m.BusyMilliW)
	l.alloc[t.Org] += sh.Of(m.MFLOPS)
}

// unplace frees m from t; the caller sets t's new state.
func (l *Ledger) unplace(t *Task, m *Machine) {
	t.Machine = ""
	m.removeTask(t.ID)
	sh := m.share(t)
	l.pi[t.Org] -= sh.Of(m.BusyMilliW)
	l.alloc[t.Org] -= sh.Of(m.MFLOPS)
}

// markStopping turns t's running segment on machine into an open
// preempting or cancelling one.
func (l *Ledger) markStopping(t *Task, machine string, o Outcome) {
	i := t.openSegment(machine, OutcomeRunning)
	if i < 0 {
		return
	}
	t.Segments[i].Outcome = o
	s := l.stopping[machine]
	if s == nil {
		s = map[string]int{}
		l.stopping[machine] = s
	}
	s[t.ID]++
}

func (b *TaskStarted) check(l *Ledger, c *Command) (change, *Error) {
	t, m, err := l.reportedRun(c, b.Task, b.Machine)
	if err != nil {
		return nil, err
	}
	if t.State != TaskAssigned || t.Machine != m.ID {
		return nil, errf(CodeBadState, "task %s is %s%s, not assigned to %q", t.ID, t.State, onMachine(t), m.ID)
	}
	if b.FromCheckpoint != "" {
		ck := t.Checkpoint
		if ck == nil {
			return nil, errf(CodeBadState, "task %s has no recorded checkpoint; the run restored %s", t.ID, b.FromCheckpoint)
		}
		if ck.Hash != b.FromCheckpoint || ck.ProgressMFlop != b.RestoredProgressMFlop {
			return nil, errf(CodeBadState, "task %s's recorded checkpoint is %s (%d MFlop); the run restored %s (%d MFlop)",
				t.ID, ck.Hash, ck.ProgressMFlop, b.FromCheckpoint, b.RestoredProgressMFlop)
		}
	}
	return func(_ uint64, res *Result) {
		if b.FromZero && t.Checkpoint != nil {
			// The checkpoint could not be restored: the run redoes
			// everything, and the ledger must not count the lost progress
			// as saved.
			res.Notes = append(res.Notes, fmt.Sprintf("task %s starts from zero on %q: checkpoint %s (%d MFlop) was not restored and is dropped",
				t.ID, m.ID, t.Checkpoint.Hash, t.Checkpoint.ProgressMFlop))
			t.Checkpoint = nil
			t.RemainingMFlop = t.SizeMFlop
		}
		t.State = TaskRunning
		res.moved(t, TaskAssigned, m.ID, "started")
		t.Attempts++
		seg := Segment{Machine: m.ID, MachineOrg: m.Org, StartMs: l.runStartMs(t, c.AtMs), Outcome: OutcomeRunning}
		if l.rules != nil {
			// What the run starts from, for the plausibility of its end
			// (plausible.go).
			seg.FromMFlop = t.SizeMFlop - t.RemainingMFlop
		}
		t.Segments = append(t.Segments, seg)
	}, nil
}

// runStartMs is when a run of t reported started at atMs (its executing
// peer's clock) starts in the ledger: atMs, or under Rules.RunBounds not
// before t was submitted nor before its previous run ended.
func (l *Ledger) runStartMs(t *Task, atMs int64) int64 {
	if l.rules == nil || !l.rules.RunBounds {
		return atMs
	}
	start := max(atMs, t.SubmittedMs)
	for _, s := range t.Segments {
		start = max(start, s.EndMs)
	}
	return start
}

func onMachine(t *Task) string {
	if t.Machine == "" {
		return ""
	}
	return " on " + strconv.Quote(t.Machine)
}

// credit is energy to book on closing a segment.
type credit struct {
	user, owner string
	mj          int64
}

// checkCredits verifies that booking all of cs overflows no account.
func (l *Ledger) checkCredits(cs ...credit) *Error {
	tmp := map[string]Energy{}
	get := func(org string) Energy {
		if e, ok := tmp[org]; ok {
			return e
		}
		return l.orgs[org].Energy
	}
	for _, c := range cs {
		u := get(c.user)
		if !addOK(u.UserMilliJ, c.mj) {
			return errf(CodeOverflow, "energy account of %q as user would overflow", c.user)
		}
		u.UserMilliJ += c.mj
		tmp[c.user] = u
		o := get(c.owner)
		if !addOK(o.OwnerSelfMilliJ+o.OwnerOthersMilliJ, c.mj) {
			return errf(CodeOverflow, "energy account of %q as owner would overflow", c.owner)
		}
		if c.user == c.owner {
			o.OwnerSelfMilliJ += c.mj
		} else {
			o.OwnerOthersMilliJ += c.mj
		}
		tmp[c.owner] = o
	}
	return nil
}

func addOK(a, b int64) bool { return b <= math.MaxInt64-a }

// closing is a segment to close: t.Segments[i], with the energy measured
// or estimated for it and the outcome it closes with.
type closing struct {
	t   *Task
	i   int
	mj  int64
	src EnergySource
	out Outcome
}

// checkClosing checks that closing every segment of cs would overflow no
// energy account (CodeOverflow).
func (l *Ledger) checkClosing(cs ...closing) *Error {
	credits := make([]credit, len(cs))
	for k, s := range cs {
		credits[k] = credit{s.t.Org, s.t.Segments[s.i].MachineOrg, s.mj}
	}
	return l.checkCredits(credits...)
}

// closeSegments closes every segment of cs at endMs and books its energy;
// checkClosing(cs...) must have passed.
func (l *Ledger) closeSegments(endMs int64, cs ...closing) {
	for _, s := range cs {
		l.closeSegment(s.t, s.i, endMs, s.mj, s.src, s.out)
	}
}

// closeSegment closes t.Segments[i] and books its energy.
func (l *Ledger) closeSegment(t *Task, i int, endMs, mj int64, src EnergySource, out Outcome) {
	s := &t.Segments[i]
	if s.Outcome == OutcomePreempting || s.Outcome == OutcomeCancelling {
		if n := l.stopping[s.Machine][t.ID] - 1; n > 0 {
			l.stopping[s.Machine][t.ID] = n
		} else {
			delete(l.stopping[s.Machine], t.ID)
			if len(l.stopping[s.Machine]) == 0 {
				delete(l.stopping, s.Machine)
			}
		}
	}
	// Clocks of different peers disagree; a segment never ends before it
	// starts.
	s.EndMs = max(endMs, s.StartMs)
	s.EnergyMilliJ = mj
	s.Source = src
	s.Outcome = out
	l.orgs[t.Org].Energy.UserMilliJ += mj
	owner := l.orgs[s.MachineOrg]
	if s.MachineOrg == t.Org {
		owner.Energy.OwnerSelfMilliJ += mj
	} else {
		owner.Energy.OwnerOthersMilliJ += mj
	}
}

// closedOutcome is what an open stopping segment becomes once reported.
func closedOutcome(o Outcome) Outcome {
	if o == OutcomeCancelling {
		return OutcomeCancelled
	}
	return OutcomePreempted
}

func (b *TaskStopped) check(l *Ledger, c *Command) (change, *Error) {
	t, m, err := l.reportedRun(c, b.Task, b.Machine)
	if err != nil {
		return nil, err
	}
	i := t.openSegment(m.ID, OutcomePreempting, OutcomeCancelling)
	if i < 0 {
		return nil, errf(CodeBadState, "task %s has no preempted or cancelled run on %q waiting for its report", t.ID, m.ID)
	}
	if err := l.checkRun(t, &t.Segments[i], m, c.AtMs, b.EnergyMilliJ, b.Source, false); err != nil {
		return nil, err
	}
	applyCk := false
	var note string
	if ck := b.Checkpoint; ck != nil {
		if ck.ProgressMFlop > t.SizeMFlop {
			return nil, errf(CodeMalformed, "checkpoint progress %d MFlop exceeds the task's size %d MFlop", ck.ProgressMFlop, t.SizeMFlop)
		}
		switch {
		case t.State != TaskQueued && t.State != TaskAssigned:
			note = fmt.Sprintf("checkpoint %s ignored: task %s is %s, no longer waiting to resume", ck.Hash, t.ID, t.State)
		case ck.ProgressMFlop < t.progress():
			note = fmt.Sprintf("checkpoint %s ignored: it saves %d MFlop, the task's checkpoint already %d", ck.Hash, ck.ProgressMFlop, t.progress())
		default:
			if err := l.checkProgress(t, &t.Segments[i], m, c.AtMs, ck.ProgressMFlop); err != nil {
				note = fmt.Sprintf("checkpoint %s ignored: %s", ck.Hash, err.Msg)
				break
			}
			applyCk = true
		}
	}
	run := closing{t, i, b.EnergyMilliJ, b.Source, closedOutcome(t.Segments[i].Outcome)}
	if err := l.checkClosing(run); err != nil {
		return nil, err
	}
	return func(_ uint64, res *Result) {
		if note != "" {
			res.Notes = append(res.Notes, note)
		}
		l.closeSegments(c.AtMs, run)
		if applyCk {
			t.setCheckpoint(b.Checkpoint, c.AtMs)
			l.queueSync(t) // a stopped run's task may be queued again
		}
	}, nil
}

// progress is the work saved in the task's checkpoint.
func (t *Task) progress() int64 {
	if t.Checkpoint == nil {
		return 0
	}
	return t.Checkpoint.ProgressMFlop
}

func (t *Task) setCheckpoint(d *CheckpointData, atMs int64) {
	t.Checkpoint = &CheckpointRef{
		Hash: d.Hash, SizeBytes: d.SizeBytes, AtMs: atMs, ProgressMFlop: d.ProgressMFlop,
		Holders: append([]string(nil), d.Holders...),
	}
	t.RemainingMFlop = t.SizeMFlop - d.ProgressMFlop
}

func (b *TaskEnded) check(l *Ledger, c *Command) (change, *Error) {
	t, m, err := l.reportedRun(c, b.Task, b.Machine)
	if err != nil {
		return nil, err
	}
	end := func(res *Result) {
		from := t.State
		t.ExitCode = b.ExitCode
		t.Reason = b.Reason
		if b.Failed {
			// A failure of the machine, or one of the task's retries,
			// sends it back to the queue instead (retry.go).
			requeue, machineFault, final := failedRun(t, m.ID, b.Reason)
			if requeue {
				requeueTask(t, m.ID, machineFault, res)
				l.stopGang(t, c.AtMs, res)
				return
			}
			if machineFault {
				t.MachineFailures++
			}
			t.Reason = final
		}
		t.EndedMs = c.AtMs
		l.unfinished[t.Org]--
		if b.Failed {
			t.State = TaskFailed
		} else {
			t.State = TaskDone
			t.RemainingMFlop = 0
		}
		res.moved(t, from, m.ID, string(t.State))
		l.stopGang(t, c.AtMs, res) // a part failed for good ends its gang
	}
	outcome := OutcomeDone
	if b.Failed {
		outcome = OutcomeFailed
	}
	// An earlier run on this machine that the ledger took off (preempted or
	// cancelled) and whose report is still awaited.
	stale := t.openSegment(m.ID, OutcomePreempting, OutcomeCancelling)
	switch {
	case t.State == TaskRunning && t.Machine == m.ID:
		// The run in progress, even if an earlier run here is still
		// unreported: the owner's peer starts a task again only after the
		// end of its previous run there is reported (node/bridge.go), so a
		// stale report cannot follow a start; a run lost with a restart
		// is reported as stopped, never as ended.
		run := closing{t, t.openSegment(m.ID, OutcomeRunning), b.EnergyMilliJ, b.Source, outcome}
		if err := l.checkRun(t, &t.Segments[run.i], m, c.AtMs, b.EnergyMilliJ, b.Source, !b.Failed); err != nil {
			return nil, err
		}
		if err := l.checkClosing(run); err != nil {
			return nil, err
		}
		return func(_ uint64, res *Result) {
			l.closeSegments(c.AtMs, run)
			if !b.Failed {
				l.observeDone(t, run.i, m)
			}
			l.unplace(t, m)
			end(res)
		}, nil
	case stale >= 0:
		// The ledger already took the task off this machine (preempted or
		// cancelled) before the report arrived: the report closes that run.
		// This holds also when the task has since been placed on this same
		// machine again and not started: a run that never started has no
		// end with energy to report, and refusing the report would leave
		// the earlier run open with the new assignment behind it.
		run := closing{t, stale, b.EnergyMilliJ, b.Source, closedOutcome(t.Segments[stale].Outcome)}
		// Preempted, but it finished before it could be stopped, and it
		// has not been placed again: its work is done.
		// (Not a gang's part: its gang waits whole in the queue, and runs
		// again whole.)
		done := !b.Failed && t.State == TaskQueued && t.Spec.Gang == nil
		if done {
			run.out = OutcomeDone
		}
		if err := l.checkRun(t, &t.Segments[stale], m, c.AtMs, b.EnergyMilliJ, b.Source, done); err != nil {
			return nil, err
		}
		if err := l.checkClosing(run); err != nil {
			return nil, err
		}
		return func(_ uint64, res *Result) {
			l.closeSegments(c.AtMs, run)
			if done {
				l.observeDone(t, stale, m)
				end(res)
				return
			}
			res.Notes = append(res.Notes, fmt.Sprintf("task %s: exit on %q booked as the end of its %s run; the task is %s%s", t.ID, m.ID, t.Segments[stale].Outcome, t.State, onMachine(t)))
		}, nil
	case t.State == TaskAssigned && t.Machine == m.ID:
		// It failed before it ever started: there is no segment to book
		// energy on.
		if !b.Failed || b.EnergyMilliJ != 0 {
			return nil, errf(CodeBadState, "task %s never started on %q: only a failure with no energy can be reported", t.ID, m.ID)
		}
		return func(_ uint64, res *Result) {
			l.unplace(t, m)
			end(res)
		}, nil
	default:
		return nil, errf(CodeBadState, "task %s is %s%s, not running on %q", t.ID, t.State, onMachine(t), m.ID)
	}
}

func (b *Heartbeat) check(l *Ledger, c *Command) (change, *Error) {
	m, err := l.ownMachine(c, b.Machine)
	if err != nil {
		return nil, err
	}
	return func(uint64, *Result) {
		m.LastHeartbeatMs = max(m.LastHeartbeatMs, c.AtMs)
		was := m.available()
		m.State = MachineUp
		l.foldAvailability(m, was, c.AtMs, false)
	}, nil
}

func (b *MachineLostCmd) check(l *Ledger, c *Command) (change, *Error) {
	// Any registered peer may declare a machine lost (the leader does it for
	// machines whose heartbeats stopped); the peer must still be the one
	// registered for the organisation it claims to act for.
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	m := l.machines[b.Machine]
	if m == nil {
		return nil, errf(CodeUnknownMachine, "machine %q is not registered", b.Machine)
	}
	if m.State == MachineLost {
		return nil, errf(CodeBadState, "machine %q is already lost", m.ID)
	}
	// Every open segment on m: the running one of m's task, and the runs
	// stopped there whose energy was never reported.
	var opens []closing
	add := func(t *Task, i int) {
		mj := declaredMilliJ(m.share(t).Of(m.BusyMilliW), t.Segments[i].StartMs, c.AtMs)
		opens = append(opens, closing{t, i, mj, EnergyDeclared, OutcomeLost})
	}
	var held []*Task
	ran := map[string]bool{} // the held tasks that were running, not only assigned
	for _, id := range m.Tasks() {
		h := l.tasks[id]
		held = append(held, h)
		if i := h.openSegment(m.ID, OutcomeRunning); i >= 0 {
			add(h, i)
			ran[h.ID] = true
		}
	}
	for _, id := range sortedKeys(l.stopping[m.ID]) {
		t := l.tasks[id]
		for i := range t.Segments {
			if s := t.Segments[i]; s.Machine == m.ID && (s.Outcome == OutcomePreempting || s.Outcome == OutcomeCancelling) {
				add(t, i)
			}
		}
	}
	if err := l.checkClosing(opens...); err != nil {
		return nil, err
	}
	return func(_ uint64, res *Result) {
		l.closeSegments(c.AtMs, opens...)
		for _, h := range held {
			l.unplace(h, m)
			l.lostRun(h, m.ID, ran[h.ID], c.AtMs, res)
			res.Changes = append(res.Changes, Change{Machine: m.ID, MachineOrg: m.Org, Action: ActionStop, Task: h.ID, Reason: "lost"})
			l.stopGang(h, c.AtMs, res) // a part lost stops its gang
		}
		was := m.available()
		m.State = MachineLost
		l.foldAvailability(m, was, c.AtMs, true)
	}, nil
}

// declaredMilliJ is busy power × duration, in mJ, capped at
// MaxSegmentMilliJ (mW × ms = µJ).
func declaredMilliJ(busyMilliW, startMs, endMs int64) int64 {
	if endMs <= startMs || busyMilliW <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(busyMilliW), uint64(endMs-startMs))
	if hi >= 1000 {
		return MaxSegmentMilliJ
	}
	q, _ := bits.Div64(hi, lo, 1000)
	if q > MaxSegmentMilliJ {
		return MaxSegmentMilliJ
	}
	return int64(q)
}

func (b *CheckpointRecorded) check(l *Ledger, c *Command) (change, *Error) {
	t, m, err := l.reportedRun(c, b.Task, b.Machine)
	if err != nil {
		return nil, err
	}
	if t.State != TaskRunning || t.Machine != m.ID {
		return nil, errf(CodeBadState, "task %s is %s%s, not running on %q", t.ID, t.State, onMachine(t), m.ID)
	}
	if p := b.Checkpoint.ProgressMFlop; p > t.SizeMFlop {
		return nil, errf(CodeMalformed, "checkpoint progress %d MFlop exceeds the task's size %d MFlop", p, t.SizeMFlop)
	} else if p < t.progress() {
		return nil, errf(CodeBadState, "checkpoint progress %d MFlop is behind the recorded %d MFlop", p, t.progress())
	} else if i := t.openSegment(m.ID, OutcomeRunning); i >= 0 {
		if err := l.checkProgress(t, &t.Segments[i], m, c.AtMs, p); err != nil {
			return nil, err
		}
	}
	return func(uint64, *Result) { t.setCheckpoint(&b.Checkpoint, c.AtMs) }, nil
}
