package ledger

// Machine stability and opportunistic machines (issue 20 items 2 and 5;
// docs/POLICY.md §9, "Machine stability").
//
// Each machine's availability history is folded at apply time into its
// record (Machine.SinceMs, UpMs, DownMs, Failures, Reclaims): a machine is
// available while it is up and not reclaimed by its owner; it becomes
// unavailable when it is declared lost (machine_lost: a failure) or its
// owner reclaims it (reclaim_machine: a reclaim), and available again when
// a heartbeat brings it back or its owner releases it. The time is the
// entry's AtMs; a clock that goes backwards adds zero. The fold is
// policy.MTBF over the same events, kept O(1) per machine, and being a
// function of the log it is the same on every peer.
//
// The fold starts with the federation's first applied command of version
// 3 or above (ReclaimMachine, an opportunistic machine, or any other field
// of version 3): every machine's history starts there (an up machine as
// available, a lost one as down), and a machine registered later starts
// at its registration. Before that nothing is folded, so that a log
// written by an older build replays to the same states and hashes, and
// a federation whose members do not all apply version 3 (the leader
// commits no such command, leader/admit.go) never folds on some peers
// only.

// KindReclaimMachine is an owner reclaiming or releasing an opportunistic
// machine.
const KindReclaimMachine Kind = "reclaim_machine"

// ReclaimMachine is the owner of an opportunistic machine taking it back
// (Reclaimed true: its local user returned) or offering it again (false).
// A reclaimed machine takes no grid work (the policy's view leaves it out,
// a decision placing a task there is refused with CodeMachineDown), and
// the tasks it held go back to the queue: a running one is stopped as a
// preempted one is (its owner's peer checkpoints it when the spec is
// checkpointable and reports the stop), to resume elsewhere from that
// checkpoint. For stability it is down from the reclaim to the release,
// counted as a reclaim, not a failure. Only the machine's organisation may
// send it (CodeNotOwner), only for a machine registered opportunistic
// (CodeBadState); reclaiming a reclaimed machine, or releasing one that is
// not, changes nothing and is no error.
type ReclaimMachine struct {
	Machine   string `json:"machine,omitempty" since:"3"`
	Reclaimed bool   `json:"reclaimed,omitempty" since:"3"`
}

func (*ReclaimMachine) Kind() Kind { return KindReclaimMachine }

func (b *ReclaimMachine) validate() *Error { return validMachineRef(b.Machine) }

func (b *ReclaimMachine) check(l *Ledger, c *Command) (change, *Error) {
	m, err := l.ownMachine(c, b.Machine)
	if err != nil {
		return nil, err
	}
	if !m.Opportunistic {
		return nil, errf(CodeBadState, "machine %q is not opportunistic: its owner registered it dedicated (opportunistic: true in the machines file)", m.ID)
	}
	if m.Reclaimed == b.Reclaimed {
		return func(uint64, *Result) {}, nil
	}
	reclaim := b.Reclaimed
	return func(_ uint64, res *Result) {
		was := m.available()
		if reclaim {
			l.evict(m, res)
		}
		m.Reclaimed = reclaim
		l.foldAvailability(m, was, c.AtMs, false)
	}, nil
}

// evict sends every task m holds back to the queue: a running one is
// stopped as a preempted one is (its segment stays open until its owner
// reports the stop, with the checkpoint taken then).
func (l *Ledger) evict(m *Machine, res *Result) {
	for _, id := range m.Tasks() {
		t := l.tasks[id]
		if t.State == TaskRunning {
			l.markStopping(t, m.ID, OutcomePreempting)
		}
		from := t.State
		l.unplace(t, m)
		t.State = TaskQueued
		res.moved(t, from, m.ID, "reclaimed")
		res.Changes = append(res.Changes, Change{Machine: m.ID, MachineOrg: m.Org, Action: ActionStop, Task: t.ID, Reason: "reclaimed"})
	}
}

// available says whether m may take grid work as far as its availability
// goes: up and not reclaimed by its owner (a drained machine is available:
// draining is the owner's choice of no new work, not an absence).
func (m *Machine) available() bool { return m.State == MachineUp && !m.Reclaimed }

// stabilityState is when the federation began tracking stability.
type stabilityState struct {
	FromMs int64 `json:"from_ms"`
}

// startStability begins the fold at atMs if it has not begun, every
// machine's history with it. Called for every accepted command of version
// 3 or above, before its change.
func (l *Ledger) startStability(c *Command) {
	if l.stability != nil || c.V < 3 {
		return
	}
	l.stability = &stabilityState{FromMs: c.AtMs}
	for _, m := range l.machines {
		m.SinceMs = c.AtMs
	}
}

// startHistory starts a newly registered machine's history at atMs.
func (l *Ledger) startHistory(m *Machine, atMs int64) {
	if l.stability != nil {
		m.SinceMs = atMs
	}
}

// foldAvailability folds the end of m's current availability period at
// atMs, when a change took m from available (was) to its present
// availability; lost says the change was a loss (a failure), otherwise an
// owner's reclaim. No change of availability, or no tracking, folds
// nothing. A change of availability drops the kept machines (keptview.go):
// the machine enters or leaves the policy view.
func (l *Ledger) foldAvailability(m *Machine, was bool, atMs int64, lost bool) {
	if was != m.available() { // the machine enters or leaves the view
		l.machinesChanged()
	}
	if l.stability == nil || was == m.available() {
		return
	}
	elapsed := max(0, atMs-m.SinceMs)
	switch {
	case !was:
		m.DownMs += elapsed
	case lost:
		m.UpMs += elapsed
		m.Failures++
	default:
		m.UpMs += elapsed
		m.Reclaims++
	}
	m.SinceMs = max(m.SinceMs, atMs)
}

// Stability is what the ledger's history says about a machine at a time.
type Stability struct {
	// Tracked: the federation tracks stability (startStability); when
	// false every other field is zero.
	Tracked bool
	// Available: up and not reclaimed.
	Available bool
	// UpMs and DownMs include the current period up to nowMs.
	UpMs, DownMs int64
	// Failures are losses, Reclaims owner's reclaims, while available.
	Failures, Reclaims int64
	// MTBFMs is the mean time between interruptions, UpMs divided by
	// Failures + Reclaims (policy.MTBF: an interruption is any end of an
	// available period, since either evicts the grid's task), and UpMs with
	// none.
	MTBFMs int64
	// AvailabilityPermille is UpMs per thousand of UpMs + DownMs (1000
	// when both are zero).
	AvailabilityPermille int64
}

// MTBF is machine id's stability at nowMs (the caller's clock, normally
// the entry or pass time): the folded record plus the current period. A
// nowMs before the machine's last change adds nothing. ok is false for a
// machine not registered. It is a plain function of the ledger's state,
// the same on every peer at the same index and nowMs.
func (l *Ledger) MTBF(id string, nowMs int64) (Stability, bool) {
	m := l.machines[id]
	if m == nil {
		return Stability{}, false
	}
	return l.stabilityOf(m, nowMs), true
}

func (l *Ledger) stabilityOf(m *Machine, nowMs int64) Stability {
	if l.stability == nil {
		return Stability{}
	}
	st := Stability{Tracked: true, Available: m.available(), UpMs: m.UpMs, DownMs: m.DownMs, Failures: m.Failures, Reclaims: m.Reclaims}
	if cur := max(0, nowMs-m.SinceMs); st.Available {
		st.UpMs += cur
	} else {
		st.DownMs += cur
	}
	st.MTBFMs = st.UpMs / max(1, st.Failures+st.Reclaims)
	st.AvailabilityPermille = 1000
	if total := st.UpMs + st.DownMs; total > 0 {
		st.AvailabilityPermille = st.UpMs * 1000 / total
	}
	return st
}

// StabilityTracked says whether the federation tracks machine stability,
// and since when.
func (l *Ledger) StabilityTracked() (fromMs int64, ok bool) {
	if l.stability == nil {
		return 0, false
	}
	return l.stability.FromMs, true
}

// stabilityBroken names what is wrong with m's stability fields, or "".
func (l *Ledger) stabilityBroken(m *Machine) string {
	switch {
	case m.Reclaimed && !m.Opportunistic:
		return "reclaimed but not opportunistic"
	case m.Reclaimed && (m.Task != "" || len(m.Also) > 0):
		return "reclaimed but holds tasks"
	case m.SinceMs < 0 || m.SinceMs > MaxTimeMs || m.UpMs < 0 || m.DownMs < 0 || m.Failures < 0 || m.Reclaims < 0:
		return "stability fields out of range"
	case l.stability == nil && (m.SinceMs != 0 || m.UpMs != 0 || m.DownMs != 0 || m.Failures != 0 || m.Reclaims != 0):
		return "stability folded on a federation that does not track it"
	case m.UpMs > MaxTimeMs || m.DownMs > MaxTimeMs:
		return "stability time above the ledger's range"
	}
	return ""
}
