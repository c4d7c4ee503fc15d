package ledger

import (
	"fmt"

	"github.com/coopgrid/coopgrid/policy"
)

// ViewMap maps the indices of a policy view back to ledger IDs.
type ViewMap struct {
	// Index is the ledger's applied index when the view was taken.
	Index uint64
	// NowMs is the time the view was taken at.
	NowMs int64
	// Orgs[i] names policy.State.Orgs[i]; Machines[j] is the ID of
	// policy.State.Machines[j].
	Orgs     []string
	Machines []string
}

// PolicyView builds the state a policy decides on, at time nowMs (the
// leader's clock):
//   - Orgs: every organisation, in registration order, with its limit;
//   - Machines: the machines that are up and not drained, sorted by ID, each with its
//     effective speed (Machine.EffectiveMFLOPS: the declared one, corrected
//     down when enough observed runs show the machine slower);
//   - Queued: the queued tasks by submit sequence, each with its remaining
//     work (what is left after its last checkpoint) as SizeMFlop;
//   - Running: the assigned and running tasks, in machine order. RunSeconds
//     is the time since the run's start (0 while only assigned);
//     HasCheckpoint says a checkpoint was recorded during this run, and
//     SinceCheckpointSeconds is the time since it;
//   - Gangs: the gangs whose parts all wait, in submit order (gang.go,
//     viewGangs); gang parts are never in Queued.
//
// The view shares nothing with the ledger; it stays valid after the ledger
// changes. An organisation without machines has quota 0, which the policy
// treats as DP = +Inf (served last).
func (l *Ledger) PolicyView(nowMs int64, checkpointBlockSeconds float64) (*policy.State, *ViewMap) {
	return l.policyView(nowMs, checkpointBlockSeconds, nil)
}

// policyView is PolicyView with the queued tasks in kept (State.Queue)
// instead of listed, when kept is not nil: then the view shares kept with
// the ledger and is valid only while the ledger does not change.
func (l *Ledger) policyView(nowMs int64, checkpointBlockSeconds float64, kept *policy.Queue) (*policy.State, *ViewMap) {
	vm := &ViewMap{Index: l.applied, NowMs: nowMs, Orgs: append([]string(nil), l.order...)}
	s := &policy.State{
		Orgs:                   make([]policy.Org, len(l.order)),
		CheckpointBlockSeconds: checkpointBlockSeconds,
		NowMs:                  max(nowMs, 0),
	}
	orgIdx := make(map[string]int, len(l.order))
	for i, n := range l.order {
		orgIdx[n] = i
		s.Orgs[i] = policy.Org{Name: n, LimitMilliW: l.orgs[n].LimitMilliW}
	}
	machIdx := make(map[string]int, len(l.machines))
	for _, id := range sortedKeys(l.machines) {
		m := l.machines[id]
		if !m.available() {
			continue
		}
		if m.Drained {
			drainedInView(s, m, l.tasks, orgIdx)
			continue
		}
		machIdx[id] = len(s.Machines)
		vm.Machines = append(vm.Machines, id)
		pm := m.policyMachine(orgIdx[m.Org])
		// The deadline mapping's stability: the replicated fold (0 while
		// the federation tracks none: every machine equally stable).
		pm.MTBFMs = l.stabilityOf(m, max(nowMs, 0)).MTBFMs
		s.Machines = append(s.Machines, pm)
	}
	l.viewQueued(s, kept, orgIdx)
	for _, id := range vm.Machines {
		for _, tid := range l.machines[id].Tasks() {
			s.Running = append(s.Running, l.viewRunning(l.tasks[tid], id, machIdx[id], nowMs, orgIdx))
		}
	}
	l.viewGangs(s, orgIdx)
	return s, vm
}

// viewQueued gives the view its queued tasks: kept (State.Queue) when not
// nil, else listed by submit sequence.
func (l *Ledger) viewQueued(s *policy.State, kept *policy.Queue, orgIdx map[string]int) {
	if kept != nil {
		s.Queue = kept
		return
	}
	for _, t := range l.bySeq {
		if t.State == TaskQueued && t.Spec.Gang == nil {
			s.Queued = append(s.Queued, policyTask(t, orgIdx))
		}
	}
}

// viewRunning is task t, placed on machine id (index machine in the
// view), as the view shows it at nowMs.
func (l *Ledger) viewRunning(t *Task, id string, machine int, nowMs int64, orgIdx map[string]int) policy.Running {
	r := policy.Running{Task: policyTask(t, orgIdx), Machine: machine}
	if i := t.openSegment(id, OutcomeRunning); i >= 0 {
		start := t.Segments[i].StartMs
		r.RunSeconds = seconds(nowMs - start)
		if ck := t.Checkpoint; ck != nil && ck.AtMs >= start {
			r.HasCheckpoint = true
			r.SinceCheckpointSeconds = seconds(nowMs - ck.AtMs)
		}
	}
	return r
}

// drainedInView leaves a drained machine (DrainMachine) out of the view, so
// that the policy neither places work on it nor preempts its tasks. Its
// tasks keep drawing power against their organisations' limits, which the
// view then shows lowered by each task's share of the machine's busy
// power: the headroom the policy sees is the ledger's. (The machine's
// speed leaves its owner's quota in the view, and the tasks' allocations
// their organisations', while it is drained.)
func drainedInView(s *policy.State, m *Machine, tasks map[string]*Task, orgIdx map[string]int) {
	for _, id := range m.Tasks() {
		t := tasks[id]
		if t == nil {
			continue
		}
		o := &s.Orgs[orgIdx[t.Org]]
		o.LimitMilliW = max(o.LimitMilliW-m.share(t).Of(m.BusyMilliW), 0)
	}
}

// seconds converts a duration in ms to seconds, never negative (clocks of
// different peers disagree).
func seconds(ms int64) float64 {
	if ms <= 0 {
		return 0
	}
	return float64(ms) / 1000
}

// Decisions converts decisions made on the view into ledger decisions. It
// fails on a decision that does not fit the view (index out of range,
// unknown kind, missing task or victim): that is a bug in the policy, not
// staleness, which Apply handles.
func (v *ViewMap) Decisions(ds []policy.Decision) ([]Decision, error) {
	out := make([]Decision, len(ds))
	for i, d := range ds {
		if d.Machine < 0 || d.Machine >= len(v.Machines) {
			return nil, fmt.Errorf("decision %d: machine index %d out of the view's %d machines", i, d.Machine, len(v.Machines))
		}
		if d.Task == "" {
			return nil, fmt.Errorf("decision %d: no task", i)
		}
		out[i] = Decision{Task: d.Task, Machine: v.Machines[d.Machine]}
		switch d.Kind {
		case policy.Allocate:
			out[i].Kind = DecideAllocate
		case policy.Preempt:
			if d.Victim == "" {
				return nil, fmt.Errorf("decision %d: preemption without a victim", i)
			}
			out[i].Kind = DecidePreempt
			out[i].Victim = d.Victim
		default:
			return nil, fmt.Errorf("decision %d: unknown kind %v", i, d.Kind)
		}
	}
	return out, nil
}

// DecisionsCommand turns the decisions of one pass on this view into the
// command the leader proposes, acting as organisation org through peer, at
// atMs. Encode it with EncodeCommand.
func (v *ViewMap) DecisionsCommand(org, peer string, atMs int64, ds []policy.Decision) (Command, error) {
	dd, err := v.Decisions(ds)
	if err != nil {
		return Command{}, err
	}
	return Command{
		V: CommandVersion, Org: org, Peer: peer, AtMs: atMs,
		Decisions: &Decisions{ViewIndex: v.Index, Decisions: dd},
	}, nil
}
