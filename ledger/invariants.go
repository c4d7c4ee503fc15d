package ledger

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/policy"
)

// maxInvariantErrors bounds the report of a badly broken state.
const maxInvariantErrors = 20

// CheckInvariants recomputes everything derivable from scratch and reports
// every way the state is inconsistent (up to 20), or nil:
//   - a machine holds at most one task, and that task names the machine
//     back (and vice versa); only up machines hold tasks;
//   - PI_i ≤ Lim_i for every organisation (PI_i: busy power of the machines
//     holding its assigned and running tasks), and the incremental PI and
//     Allocated sums match the recomputed ones;
//   - every task is in exactly one known state with fields consistent with
//     it (machine set iff assigned or running; exactly one running segment
//     iff running, on its machine; remaining = size − checkpoint progress,
//     or 0 once done; one segment per start);
//   - every organisation's energy accounts (user, owner self, owner others)
//     equal the sums over closed segments;
//   - no reference to an unknown organisation, machine or task, no
//     duplicated peer, submit sequence or ID;
//   - the replay guard's records are indexed both ways, in log order,
//     within the window, and name existing tasks of their organisation.
func (l *Ledger) CheckInvariants() error {
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < maxInvariantErrors {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}

	// Organisations.
	if len(l.order) != len(l.orgs) {
		fail("%d organisations in registration order, %d registered", len(l.order), len(l.orgs))
	}
	for i, name := range l.order {
		o := l.orgs[name]
		if o == nil {
			fail("organisation %q in the registration order is not registered", name)
			continue
		}
		if o.Name != name || !validName(name) {
			fail("organisation %q: bad name %q", name, o.Name)
		}
		if !validPeer(o.Peer) || l.peers[o.Peer] != name {
			fail("organisation %q: peer %q not indexed to it", name, o.Peer)
		}
		if validLimit(o.LimitMilliW) != nil {
			fail("organisation %q: limit %d mW out of range", name, o.LimitMilliW)
		}
		if i > 0 && l.orgs[l.order[i-1]] != nil && o.RegisteredAt <= l.orgs[l.order[i-1]].RegisteredAt {
			fail("organisation %q: registered at %d, not after its predecessor", name, o.RegisteredAt)
		}
		if l.byOrgM[name] == nil {
			fail("organisation %q: no machine index", name)
		}
	}
	if len(l.peers) != len(l.orgs) {
		fail("%d peers indexed for %d organisations", len(l.peers), len(l.orgs))
	}

	// Machines.
	indexed := 0
	for org, ms := range l.byOrgM {
		if l.orgs[org] == nil {
			fail("machine index of unknown organisation %q", org)
		}
		for id := range ms {
			if m := l.machines[id]; m == nil || m.Org != org {
				fail("machine index of %q lists %q, not one of its machines", org, id)
			}
		}
		indexed += len(ms)
	}
	if indexed != len(l.machines) {
		fail("%d machines indexed by organisation, %d registered", indexed, len(l.machines))
	}
	for _, id := range sortedKeys(l.machines) {
		m := l.machines[id]
		if m.ID != id || m.ID != m.Org+"/"+m.Name {
			fail("machine %q: ID is not <org>/<name> (%q, %q)", id, m.Org, m.Name)
		}
		if l.orgs[m.Org] == nil {
			fail("machine %q: unknown organisation %q", id, m.Org)
		}
		if err := (MachineSpec{Name: m.Name, MFLOPS: m.MFLOPS, BusyMilliW: m.BusyMilliW, IdleMilliW: m.IdleMilliW, MachineResources: m.MachineResources}).validate(); err != nil {
			fail("machine %q: %s", id, err.Msg)
		}
		if m.State != MachineUp && m.State != MachineLost {
			fail("machine %q: unknown state %q", id, m.State)
		}
		if why := l.stabilityBroken(m); why != "" {
			fail("machine %q: %s", id, why)
		}
		if m.Task == "" && len(m.Also) > 0 {
			fail("machine %q lists tasks %v after none", id, m.Also)
		}
		var used policy.Resources
		for _, tid := range m.Tasks() {
			t := l.tasks[tid]
			switch {
			case t == nil:
				fail("machine %q holds unknown task %q", id, tid)
				continue
			case !t.State.Placed() || t.Machine != id:
				fail("machine %q holds task %s, which is %s%s", id, t.ID, t.State, onMachine(t))
			case m.State != MachineUp:
				fail("machine %q is %s but holds task %s", id, m.State, t.ID)
			}
			used = used.Plus(t.request())
		}
		if capa := m.capacity(); !policy.Fits(used, capa, capa) {
			fail("machine %q is over-committed: its tasks ask for %+v of %+v", id, used, capa)
		}
	}

	// Tasks.
	pi := map[string]int64{}
	alloc := map[string]int64{}
	energy := map[string]*Energy{}
	for n := range l.orgs {
		energy[n] = &Energy{}
	}
	stopping := map[string]map[string]int{}
	seqs := make(map[uint64]string, len(l.tasks))
	for _, id := range sortedKeys(l.tasks) {
		t := l.tasks[id]
		o := l.orgs[t.Org]
		if t.ID != id {
			fail("task %q stored under %q", t.ID, id)
		}
		if o == nil {
			fail("task %s: unknown organisation %q", id, t.Org)
		} else if n, err := strconv.ParseUint(strings.TrimPrefix(id, t.Org+"-"), 10, 64); err != nil || !strings.HasPrefix(id, t.Org+"-") || n == 0 || n > o.Submitted {
			fail("task %s: ID is not %s-<n> with n in [1, %d]", id, t.Org, o.Submitted)
		}
		if other, dup := seqs[t.Seq]; dup || t.Seq == 0 || t.Seq > l.seq {
			fail("task %s: submit sequence %d duplicated (%q) or out of [1, %d]", id, t.Seq, other, l.seq)
		}
		seqs[t.Seq] = id
		if t.SizeMFlop <= 0 || t.SizeMFlop > MaxSizeMFlop {
			fail("task %s: size %d MFlop out of range", id, t.SizeMFlop)
		}
		if err := t.Spec.validate(); err != nil {
			fail("task %s: spec: %s", id, err.Msg)
		}
		switch t.State {
		case TaskQueued, TaskAssigned, TaskRunning, TaskDone, TaskFailed, TaskCancelled:
		default:
			fail("task %s: unknown state %q", id, t.State)
		}
		if t.State.Placed() {
			m := l.machines[t.Machine]
			if m == nil || !m.holds(id) {
				fail("task %s is %s on %q, which does not hold it", id, t.State, t.Machine)
			} else {
				sh := m.share(t)
				pi[t.Org] += sh.Of(m.BusyMilliW)
				alloc[t.Org] += sh.Of(m.MFLOPS)
			}
		} else if t.Machine != "" {
			fail("task %s is %s but names machine %q", id, t.State, t.Machine)
		}
		if ck := t.Checkpoint; ck != nil {
			if ck.ProgressMFlop < 0 || ck.ProgressMFlop > t.SizeMFlop {
				fail("task %s: checkpoint progress %d out of [0, %d]", id, ck.ProgressMFlop, t.SizeMFlop)
			}
			d := CheckpointData{Hash: ck.Hash, SizeBytes: ck.SizeBytes, ProgressMFlop: ck.ProgressMFlop, Holders: ck.Holders}
			if err := d.validate(); err != nil {
				fail("task %s: checkpoint: %s", id, err.Msg)
			}
		}
		want := t.SizeMFlop - t.progress()
		if t.State == TaskDone {
			want = 0
		}
		if t.RemainingMFlop != want {
			fail("task %s (%s): remaining %d MFlop, want %d", id, t.State, t.RemainingMFlop, want)
		}
		if t.Migrations < 0 || len(t.DeadlineNote) > MaxReasonBytes {
			fail("task %s: %d migrations, a deadline note of %d bytes (at most %d)", id, t.Migrations, len(t.DeadlineNote), MaxReasonBytes)
		}
		if t.MachineFailures < 0 || t.Failures < 0 || len(t.Avoid) > MaxAvoid {
			fail("task %s: %d machine failures, %d failures, %d machines avoided (at most %d)", id, t.MachineFailures, t.Failures, len(t.Avoid), MaxAvoid)
		}
		for k, m := range t.Avoid {
			if validMachineRef(m) != nil || slices.Contains(t.Avoid[:k], m) {
				fail("task %s: avoided machine %q malformed or repeated", id, m)
			}
		}
		if t.Attempts != len(t.Segments) {
			fail("task %s: %d attempts but %d segments", id, t.Attempts, len(t.Segments))
		}
		running := 0
		for k, s := range t.Segments {
			if !s.Outcome.valid() {
				fail("task %s segment %d: unknown outcome %q", id, k, s.Outcome)
				continue
			}
			if l.orgs[s.MachineOrg] == nil {
				fail("task %s segment %d: unknown machine organisation %q", id, k, s.MachineOrg)
				continue
			}
			if s.Outcome.Open() {
				if m := l.machines[s.Machine]; m == nil || m.Org != s.MachineOrg {
					fail("task %s segment %d: open on unknown machine %q", id, k, s.Machine)
				}
				if s.EndMs != 0 || s.EnergyMilliJ != 0 || s.Source != "" {
					fail("task %s segment %d: open but has an end, energy or source", id, k)
				}
			} else {
				if s.EndMs < s.StartMs || validEnergy(s.EnergyMilliJ, s.Source) != nil {
					fail("task %s segment %d: closed with end %d < start %d or bad energy %d (%q)", id, k, s.EndMs, s.StartMs, s.EnergyMilliJ, s.Source)
				}
				if e := energy[t.Org]; e != nil {
					e.UserMilliJ += s.EnergyMilliJ
				}
				if e := energy[s.MachineOrg]; s.MachineOrg == t.Org {
					e.OwnerSelfMilliJ += s.EnergyMilliJ
				} else {
					e.OwnerOthersMilliJ += s.EnergyMilliJ
				}
			}
			switch s.Outcome {
			case OutcomeRunning:
				running++
				if t.State != TaskRunning || s.Machine != t.Machine {
					fail("task %s (%s%s) has a running segment on %q", id, t.State, onMachine(t), s.Machine)
				}
			case OutcomeCancelling:
				if t.State != TaskCancelled {
					fail("task %s is %s but has a cancelling segment", id, t.State)
				}
				fallthrough
			case OutcomePreempting:
				if stopping[s.Machine] == nil {
					stopping[s.Machine] = map[string]int{}
				}
				stopping[s.Machine][id]++
			}
		}
		if t.State == TaskRunning && running != 1 {
			fail("task %s is running with %d running segments", id, running)
		}
	}

	if len(l.bySeq) != len(l.tasks) {
		fail("%d tasks in submit order, %d stored", len(l.bySeq), len(l.tasks))
	}
	for i, t := range l.bySeq {
		if l.tasks[t.ID] != t || (i > 0 && t.Seq <= l.bySeq[i-1].Seq) {
			fail("task %s out of place in the submit order", t.ID)
		}
	}

	l.checkKeptQueue(fail)
	l.checkKeptMachines(fail)

	// Derived sums and limits.
	for _, name := range l.order {
		o := l.orgs[name]
		if o == nil {
			continue
		}
		if pi[name] != l.pi[name] || alloc[name] != l.alloc[name] {
			fail("organisation %q: PI %d mW / allocated %d MFLOPS recomputed, %d / %d kept", name, pi[name], alloc[name], l.pi[name], l.alloc[name])
		}
		if pi[name] > o.LimitMilliW {
			fail("organisation %q: PI %d mW above its limit %d mW", name, pi[name], o.LimitMilliW)
		}
		if sum := energy[name].plus(l.forgottenEnergy(name)); sum != o.Energy {
			fail("organisation %q: energy %+v credited, %+v summed over closed segments and forgotten tasks", name, o.Energy, sum)
		}
	}
	for name, v := range l.pi {
		if l.orgs[name] == nil && (v != 0 || l.alloc[name] != 0) {
			fail("PI kept for unknown organisation %q", name)
		}
	}
	if !sameCounts(stopping, l.stopping) {
		fail("index of stopped runs awaiting reports disagrees with the segments")
	}
	l.checkRequests(fail)
	l.checkRulesState(fail)
	l.checkForgotten(fail)
	l.jobPolicyInvariants(fail)
	l.gangInvariants(fail)
	l.checkGangIndex(fail)
	l.retentionVoteInvariants(fail)
	return errors.Join(errs...)
}

func sameCounts(a, b map[string]map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, am := range a {
		bm := b[k]
		if len(am) != len(bm) {
			return false
		}
		for t, n := range am {
			if bm[t] != n {
				return false
			}
		}
	}
	return true
}
