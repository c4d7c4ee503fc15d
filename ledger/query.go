package ledger

import (
	"cmp"
	"slices"

	"github.com/coopgrid/coopgrid/policy"
)

// OrgInfo is an organisation with its derived quantities. Quota and power
// quota count the machines that are up, as the policy view does.
type OrgInfo struct {
	Org
	Machines   int `json:"machines"`
	MachinesUp int `json:"machines_up"`
	// QuotaMFLOPS = Σ d and PowerQuotaMilliW = Σ c over its up machines.
	QuotaMFLOPS      int64 `json:"quota_mflops"`
	PowerQuotaMilliW int64 `json:"power_quota_mw"`
	// AllocatedMFLOPS and PIMilliW sum over the machines holding its
	// assigned and running tasks.
	AllocatedMFLOPS int64 `json:"allocated_mflops"`
	PIMilliW        int64 `json:"pi_mw"`
	// DP is (Allocated − Quota) / Quota; nil when the quota is 0 (the
	// policy then treats DP as +Inf).
	DP *float64 `json:"dp"`
	// Task counts by state.
	Queued    int `json:"queued"`
	Assigned  int `json:"assigned"`
	Running   int `json:"running"`
	Done      int `json:"done"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// Orgs lists the organisations in registration order.
func (l *Ledger) Orgs() []OrgInfo {
	idx := make(map[string]int, len(l.order))
	out := make([]OrgInfo, len(l.order))
	for i, n := range l.order {
		idx[n] = i
		out[i] = OrgInfo{Org: *l.orgs[n], AllocatedMFLOPS: l.alloc[n], PIMilliW: l.pi[n]}
	}
	for _, m := range l.machines {
		out[idx[m.Org]].countMachine(m)
	}
	for _, t := range l.tasks {
		out[idx[t.Org]].countTask(t.State)
	}
	for i := range out {
		out[i].setDP()
	}
	return out
}

// Org returns one organisation. It counts that organisation's machines
// and tasks only: the heartbeat validator of every peer asked it for each
// heartbeat received, and building every organisation's record for it cost
// O(organisations) each time, O(N³) over a forming federation of N peers
// (issue 17, docs/BENCHMARKS.md).
func (l *Ledger) Org(name string) (OrgInfo, bool) {
	o := l.orgs[name]
	if o == nil {
		return OrgInfo{}, false
	}
	info := OrgInfo{Org: *o, AllocatedMFLOPS: l.alloc[name], PIMilliW: l.pi[name]}
	for _, m := range l.machines {
		if m.Org == name {
			info.countMachine(m)
		}
	}
	for _, t := range l.tasks {
		if t.Org == name {
			info.countTask(t.State)
		}
	}
	info.setDP()
	return info, true
}

// OrgPeer is the peer org is registered to and whether the federation
// removed it, without the derived quantities Org counts (O(1)): what a
// check of who may speak for org needs.
func (l *Ledger) OrgPeer(org string) (peer string, removed, ok bool) {
	o := l.orgs[org]
	if o == nil {
		return "", false, false
	}
	return o.Peer, l.IsRemoved(org), true
}

func (o *OrgInfo) countMachine(m *Machine) {
	o.Machines++
	if m.State == MachineUp {
		o.MachinesUp++
		o.QuotaMFLOPS += m.MFLOPS
		o.PowerQuotaMilliW += m.BusyMilliW
	}
}

func (o *OrgInfo) countTask(s TaskState) {
	switch s {
	case TaskQueued:
		o.Queued++
	case TaskAssigned:
		o.Assigned++
	case TaskRunning:
		o.Running++
	case TaskDone:
		o.Done++
	case TaskFailed:
		o.Failed++
	case TaskCancelled:
		o.Cancelled++
	}
}

func (o *OrgInfo) setDP() {
	if o.QuotaMFLOPS > 0 {
		dp := policy.DP(o.AllocatedMFLOPS, o.QuotaMFLOPS)
		o.DP = &dp
	}
}

// OrgOfPeer returns the organisation the peer acts for.
func (l *Ledger) OrgOfPeer(peer string) (string, bool) {
	o, ok := l.peers[peer]
	return o, ok
}

// Machines lists every machine, sorted by ID.
func (l *Ledger) Machines() []Machine {
	out := make([]Machine, 0, len(l.machines))
	for _, id := range sortedKeys(l.machines) {
		out = append(out, *l.machines[id])
	}
	return out
}

// Machine returns one machine.
func (l *Ledger) Machine(id string) (Machine, bool) {
	m := l.machines[id]
	if m == nil {
		return Machine{}, false
	}
	return *m, true
}

// TaskFilter selects tasks; zero fields select everything.
type TaskFilter struct {
	Org string
	// Job selects the tasks whose spec names that job.
	Job    string
	States []TaskState
	// After selects the tasks submitted after the one of that submit
	// sequence (a page's cursor); Limit, when positive, stops the list
	// at that many. A page costs its length, not the state's.
	After uint64
	Limit int
}

// Tasks lists the tasks the filter selects, by submit sequence, as deep
// copies.
func (l *Ledger) Tasks(f TaskFilter) []Task {
	var out []Task
	from, _ := slices.BinarySearchFunc(l.bySeq, f.After+1, func(t *Task, seq uint64) int { return cmp.Compare(t.Seq, seq) })
	if f.After == ^uint64(0) {
		from = len(l.bySeq)
	}
	for _, t := range l.bySeq[from:] {
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
		if f.Org != "" && t.Org != f.Org {
			continue
		}
		if f.Job != "" && t.Spec.Job != f.Job {
			continue
		}
		if len(f.States) > 0 && !slices.Contains(f.States, t.State) {
			continue
		}
		out = append(out, t.clone())
	}
	return out
}

// Task returns one task, as a deep copy.
func (l *Ledger) Task(id string) (Task, bool) {
	t := l.tasks[id]
	if t == nil {
		return Task{}, false
	}
	return t.clone(), true
}

// Allocation is a task held by a machine: what the machine's owner must be
// running (or start, while the task is only assigned).
type Allocation struct {
	Machine Machine `json:"machine"`
	Task    Task    `json:"task"`
}

// Allocations lists what the machines of organisation owner hold, by
// machine ID. An executor reconciles its processes against it.
func (l *Ledger) Allocations(owner string) []Allocation {
	var out []Allocation
	for _, id := range sortedKeys(l.byOrgM[owner]) {
		m := l.machines[id]
		for _, tid := range m.Tasks() {
			out = append(out, Allocation{Machine: *m, Task: l.tasks[tid].clone()})
		}
	}
	return out
}

// Placement is an allocation without its copies: the machine and task
// IDs and the little of the task an owner's reconciliation compares with
// its runs on every wake-up (runner's bridge). Listing placements copies no
// task, so it costs a few words per machine; Task gives the task itself
// for the few an owner then starts.
type Placement struct {
	// Machine is the machine's ID, MachineName its name in its owner's
	// machines file.
	Machine     string `json:"machine"`
	MachineName string `json:"machine_name"`
	Task        string `json:"task"`
	// State is TaskAssigned or TaskRunning; Attempts is the task's
	// Attempts (its runs started so far).
	State    TaskState `json:"state"`
	Attempts int       `json:"attempts"`
	// Checkpointable is the task's Spec.Checkpointable; StopOpen says a
	// previous run of the task is still being stopped somewhere (an open
	// preempting or cancelling segment), whose report may bring the
	// checkpoint to resume from.
	Checkpointable bool `json:"checkpointable,omitempty"`
	StopOpen       bool `json:"stop_open,omitempty"`
}

// Placements lists what the machines of organisation owner hold, in the
// order of Allocations (by machine ID, then the machine's Tasks order),
// without copying the tasks.
func (l *Ledger) Placements(owner string) []Placement {
	ids := sortedKeys(l.byOrgM[owner])
	out := make([]Placement, 0, len(ids))
	for _, id := range ids {
		m := l.machines[id]
		if m.Task == "" {
			continue
		}
		out = l.appendPlacement(out, m, m.Task)
		for _, tid := range m.Also {
			out = l.appendPlacement(out, m, tid)
		}
	}
	return out
}

func (l *Ledger) appendPlacement(out []Placement, m *Machine, tid string) []Placement {
	t := l.tasks[tid]
	p := Placement{Machine: m.ID, MachineName: m.Name, Task: tid, State: t.State, Attempts: t.Attempts, Checkpointable: t.Spec.Checkpointable}
	for i := range t.Segments {
		if o := t.Segments[i].Outcome; o == OutcomePreempting || o == OutcomeCancelling {
			p.StopOpen = true
			break
		}
	}
	return append(out, p)
}

// PendingStop is a run the ledger took off a machine (preempted or
// cancelled) whose stop and energy the machine's owner has not reported yet.
type PendingStop struct {
	Machine string  `json:"machine"`
	Task    string  `json:"task"`
	Outcome Outcome `json:"outcome"`
	StartMs int64   `json:"start_ms"`
	// Attempt numbers the run among the task's runs, from 1 (its
	// segment's position; Task.Attempts once that run had started). It
	// tells this run from a later one of the same task on the same machine.
	Attempt int `json:"attempt"`
}

// PendingStops lists the runs on owner's machines waiting for a TaskStopped
// report, by machine, task and start.
//
// It walks the stopping index (the machines with such runs: usually none),
// not the owner's machines.
func (l *Ledger) PendingStops(owner string) []PendingStop {
	var out []PendingStop
	for _, id := range sortedKeys(l.stopping) {
		if m := l.machines[id]; m == nil || m.Org != owner {
			continue
		}
		for _, tid := range sortedKeys(l.stopping[id]) {
			for i, s := range l.tasks[tid].Segments {
				if s.Machine == id && (s.Outcome == OutcomePreempting || s.Outcome == OutcomeCancelling) {
					out = append(out, PendingStop{Machine: id, Task: tid, Outcome: s.Outcome, StartMs: s.StartMs, Attempt: i + 1})
				}
			}
		}
	}
	return out
}

// LiveCheckpoints returns the hashes of the checkpoints recorded for tasks
// that are not done, failed or cancelled: the archives a peer must keep.
// Every peer derives the same set from the same log, so each can delete
// the archives outside it (docs/CHECKPOINTS.md, garbage collection).
func (l *Ledger) LiveCheckpoints() map[string]bool {
	out := map[string]bool{}
	for _, t := range l.bySeq {
		if t.Checkpoint != nil && !t.State.Terminal() {
			out[t.Checkpoint.Hash] = true
		}
	}
	return out
}
