package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/policy"
)

// Gangs (issue 21; docs/POLICY.md §8, "Gangs on real peers"). A parallel
// job wider than one machine is a gang of k parts: k ordinary tasks,
// submitted together in one submit_tasks, each asking for the resources of
// one machine. The ledger keeps its one-task-one-placement model (segments,
// energy, PI, reports are per part) and adds three rules:
//
//   - Placement is all or nothing: a decision placing a part is accepted
//     only when the same decisions place every part of its gang, each on
//     its own machine, all machines of one organisation (whose one peer
//     starts them); otherwise every part's decision gets CodeGangIncomplete
//     and nothing changes (applyGang). A part is placed by an allocation,
//     or by a preemption of a single task (never another gang's part: the
//     owner's claim for its gang, policy.GangFirst).
//   - Stopping is together: when a placed part leaves its machine
//     (preempted, its machine lost, a failure sent back to the queue) the
//     same apply takes every other placed part off its machine, as a
//     preemption does (segment preempting, task queued), so the gang waits
//     whole again; a part that ends cancelled or failed for good ends the
//     others the same way (stopGang). A part that ends done leaves the
//     others running: the job's own parts end on their own.
//   - Invariant (gangInvariants): a gang with a placed part has every part
//     that is not terminal placed, on distinct machines of one
//     organisation.

// Gang is a task's part in a parallel job (Spec.Gang).
type Gang struct {
	// ID is the first part's task ID, set by the ledger at submission: a
	// submission leaves it empty.
	ID string `json:"id,omitempty" since:"3"`
	// Size is the number of parts, Rank this part's index (0 to Size−1;
	// omitted when 0, like every field of a version above 1).
	Size int `json:"size,omitempty" since:"3"`
	Rank int `json:"rank,omitempty" since:"3"`
}

// MaxGangSize bounds Gang.Size (policy.MaxGangSize).
const MaxGangSize = policy.MaxGangSize

func (g *Gang) validate() *Error {
	if g.Size < 2 || g.Size > MaxGangSize {
		return errf(CodeMalformed, "gang: size %d out of range [2, %d]", g.Size, MaxGangSize)
	}
	if g.Rank < 0 || g.Rank >= g.Size {
		return errf(CodeMalformed, "gang: rank %d out of range [0, %d)", g.Rank, g.Size)
	}
	if g.ID != "" {
		if err := validTaskRef(g.ID); err != nil {
			return errf(CodeMalformed, "gang: id: %s", err.Msg)
		}
	}
	return nil
}

// validateGangs checks a submission's gangs: each gang is Size
// consecutive tasks of ranks 0 to Size−1, of the same size and spec but
// the rank, without an ID (the ledger gives it).
func validateGangs(ts []TaskSpec) *Error {
	for i := 0; i < len(ts); {
		g := ts[i].Spec.Gang
		if g == nil {
			i++
			continue
		}
		if g.ID != "" {
			return errf(CodeMalformed, "tasks[%d]: gang: id %q: the ledger sets it (the first part's task ID)", i, g.ID)
		}
		if g.Rank != 0 {
			return errf(CodeMalformed, "tasks[%d]: gang part of rank %d without the parts before it: a gang's parts come in rank order, from 0", i, g.Rank)
		}
		if i+g.Size > len(ts) {
			return errf(CodeMalformed, "tasks[%d]: gang of %d parts, only %d tasks from here", i, g.Size, len(ts)-i)
		}
		for r := 1; r < g.Size; r++ {
			j := i + r
			if why := samePart(ts[i], ts[j], r); why != "" {
				return errf(CodeMalformed, "tasks[%d]: part %d of the gang starting at tasks[%d]: %s", j, r, i, why)
			}
		}
		i += g.Size
	}
	return nil
}

// samePart says how part, meant to be part rank of first's gang, differs
// from it ("" when it does not).
func samePart(first, part TaskSpec, rank int) string {
	g := part.Spec.Gang
	switch {
	case g == nil:
		return "not a gang part"
	case g.ID != "":
		return fmt.Sprintf("gang id %q: the ledger sets it", g.ID)
	case g.Size != first.Spec.Gang.Size || g.Rank != rank:
		return fmt.Sprintf("gang size %d rank %d, want size %d rank %d", g.Size, g.Rank, first.Spec.Gang.Size, rank)
	case part.SizeMFlop != first.SizeMFlop:
		return fmt.Sprintf("size %d MFlop, the first part's is %d", part.SizeMFlop, first.SizeMFlop)
	}
	a, b := first.Spec, part.Spec
	a.Gang, b.Gang = nil, nil
	ja, _ := json.Marshal(a) // the encoding: an empty list is no list
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		return "its spec differs from the first part's: a gang's parts share one spec but the rank"
	}
	return ""
}

// gangPartID is the task ID of part rank of gang g of organisation org:
// parts are submitted consecutively, so their IDs follow the first's.
func gangPartID(org string, g *Gang, rank int) string {
	n, err := strconv.ParseUint(strings.TrimPrefix(g.ID, org+"-"), 10, 64)
	if err != nil {
		return ""
	}
	return org + "-" + strconv.FormatUint(n+uint64(rank), 10)
}

// gangParts returns the parts of t's gang still in the ledger, t
// included, in rank order (a forgotten part is left out).
func (l *Ledger) gangParts(t *Task) []*Task {
	g := t.Spec.Gang
	parts := make([]*Task, 0, g.Size)
	for r := 0; r < g.Size; r++ {
		if p := l.tasks[gangPartID(t.Org, g, r)]; p != nil && p.Spec.Gang != nil && p.Spec.Gang.ID == g.ID {
			parts = append(parts, p)
		}
	}
	return parts
}

// gangDecisions groups the decisions of ds that place gang parts by gang:
// decision index → its gang's decision indices in order (nil for a
// decision that places no gang part).
func (l *Ledger) gangDecisions(ds []Decision) map[int][]int {
	var byGang map[string][]int
	for i, d := range ds {
		if t := l.tasks[d.Task]; t != nil && t.Spec.Gang != nil {
			if byGang == nil {
				byGang = map[string][]int{}
			}
			byGang[t.Spec.Gang.ID] = append(byGang[t.Spec.Gang.ID], i)
		}
	}
	if byGang == nil {
		return nil
	}
	out := make(map[int][]int, len(ds))
	for _, idx := range byGang {
		for _, i := range idx {
			out[i] = idx
		}
	}
	return out
}

// applyGang judges the decisions idx of ds, which place parts of one
// gang, together, where the first of them stands in the pass: either all
// apply, or each gets CodeGangIncomplete (with the reason) and nothing
// changes.
func (l *Ledger) applyGang(ds []Decision, idx []int, atMs int64, res *Result) {
	dos, err := l.checkGang(ds, idx, atMs)
	if err != nil {
		for _, i := range idx {
			res.Decisions[i] = DecisionResult{Decision: ds[i], Err: errf(CodeGangIncomplete, "%s", err.Error())}
		}
		return
	}
	for k, i := range idx {
		dos[k](res)
		res.Decisions[i] = DecisionResult{Decision: ds[i]}
	}
}

// checkGang checks that the decisions idx place every part of one gang,
// each by its own allocation on its own machine, all of one organisation,
// and that each holds on the state with the gang's earlier parts placed;
// it returns each decision's change, in order.
func (l *Ledger) checkGang(ds []Decision, idx []int, atMs int64) ([]func(*Result), *Error) {
	first := l.tasks[ds[idx[0]].Task]
	g := first.Spec.Gang
	parts := l.gangParts(first)
	if len(idx) != g.Size || len(parts) != g.Size {
		return nil, errf(CodeGangIncomplete, "gang %s has %d parts; the decisions place %d", g.ID, g.Size, len(idx))
	}
	seenTask, seenMachine, seenVictim := map[string]bool{}, map[string]bool{}, map[string]bool{}
	owner := ""
	var extra int64 // the power the gang's earlier parts add to its organisation's PI
	dos := make([]func(*Result), 0, len(idx))
	for _, i := range idx {
		d := ds[i]
		if d.Kind == DecidePreempt {
			// An owner's claim for its gang (policy.GangFirst): the victim
			// must be no gang's part (stopping it would stop its own gang,
			// changing machines the other decisions were checked on).
			if v := l.tasks[d.Victim]; v != nil && v.Spec.Gang != nil {
				return nil, errf(CodeGangIncomplete, "gang %s: part %s would preempt %s, a part of gang %s: a gang preempts only single tasks", g.ID, d.Task, v.ID, v.Spec.Gang.ID)
			}
			if seenVictim[d.Victim] {
				return nil, errf(CodeGangIncomplete, "gang %s: victim %s twice in the decisions", g.ID, d.Victim)
			}
			seenVictim[d.Victim] = true
		}
		if seenTask[d.Task] || seenMachine[d.Machine] {
			return nil, errf(CodeGangIncomplete, "gang %s: part %s or machine %q twice in the decisions", g.ID, d.Task, d.Machine)
		}
		seenTask[d.Task], seenMachine[d.Machine] = true, true
		m := l.machines[d.Machine]
		if m == nil {
			return nil, errf(CodeGangIncomplete, "gang %s: machine %q is not registered", g.ID, d.Machine)
		}
		if owner == "" {
			owner = m.Org
		} else if m.Org != owner {
			return nil, errf(CodeGangIncomplete, "gang %s: part %s on %q of %q, an earlier part on a machine of %q: a gang runs on one organisation's machines", g.ID, d.Task, m.ID, m.Org, owner)
		}
		do, err := l.checkDecision(d, extra, atMs)
		if err != nil {
			return nil, errf(CodeGangIncomplete, "gang %s: part %s: %s: %s", g.ID, d.Task, err.Code, err.Msg)
		}
		extra += m.share(l.tasks[d.Task]).Of(m.BusyMilliW)
		dos = append(dos, do)
	}
	return dos, nil
}

// stopGang is what t leaving its machine (or ending) does to the other
// parts of its gang, in the same apply, at atMs: t queued again takes the
// others off their machines, back to the queue (their running segments
// preempting); t cancelled or failed ends the others alike. A gang that
// cannot run whole again (a part already ended while t went back to the
// queue) fails. A part that ended done changes nothing.
func (l *Ledger) stopGang(t *Task, atMs int64, res *Result) {
	if t.Spec.Gang == nil || t.State == TaskDone || t.State.Placed() {
		return
	}
	parts := l.gangParts(t)
	end, why := t.State, fmt.Sprintf("gang: part %s %s", t.ID, t.State)
	if t.State == TaskQueued {
		for _, p := range parts {
			if p.State.Terminal() || len(parts) < t.Spec.Gang.Size {
				end, why = TaskFailed, fmt.Sprintf("gang: part %s went back to the queue after a part ended: the gang cannot run whole again", t.ID)
				l.endPart(t, TaskFailed, why, atMs, res)
				break
			}
		}
	}
	for _, p := range parts {
		if p == t || p.State.Terminal() {
			continue
		}
		if end == TaskQueued {
			if p.State.Placed() {
				from, machine := p.State, p.Machine
				l.takeOff(p, OutcomePreempting, "preempted", res)
				p.State = TaskQueued
				res.moved(p, from, machine, "gang_stopped")
			}
			continue
		}
		l.endPart(p, end, why, atMs, res)
	}
}

// takeOff takes placed part p off its machine, its running segment open
// with outcome o, and tells the machine's owner to stop it.
func (l *Ledger) takeOff(p *Task, o Outcome, reason string, res *Result) {
	m := l.machines[p.Machine]
	if p.State == TaskRunning {
		l.markStopping(p, m.ID, o)
	}
	l.unplace(p, m)
	res.Changes = append(res.Changes, Change{Machine: m.ID, MachineOrg: m.Org, Action: ActionStop, Task: p.ID, Reason: reason})
}

// endPart ends part p (not terminal) as state end (cancelled or failed).
func (l *Ledger) endPart(p *Task, end TaskState, why string, atMs int64, res *Result) {
	from, machine := p.State, p.Machine
	if p.State.Placed() {
		o, reason := OutcomePreempting, "preempted"
		if end == TaskCancelled {
			o, reason = OutcomeCancelling, "cancelled"
		}
		l.takeOff(p, o, reason, res)
	}
	p.State = end
	p.EndedMs = atMs
	p.Reason = clipReason(why)
	l.unfinished[p.Org]--
	res.moved(p, from, machine, string(end))
}

// gangInvariants is CheckInvariants' check of gangs: a part's gang ID
// names the first part, its parts are consecutive tasks of one
// organisation with one size; and a gang with a placed part has every
// part that is not terminal placed, on distinct machines of one
// organisation.
func (l *Ledger) gangInvariants(fail func(string, ...any)) {
	checked := map[string]bool{}
	for _, t := range l.bySeq {
		g := t.Spec.Gang
		if g == nil || checked[g.ID] {
			continue
		}
		checked[g.ID] = true
		if g.ID == "" || gangPartID(t.Org, g, g.Rank) != t.ID {
			fail("task %s: gang id %q does not name its part of rank 0", t.ID, g.ID)
			continue
		}
		parts := l.gangParts(t)
		placed, waiting, owner := 0, 0, ""
		machines := map[string]bool{}
		for _, p := range parts {
			if p.Spec.Gang.Size != g.Size {
				fail("gang %s: part %s has size %d, want %d", g.ID, p.ID, p.Spec.Gang.Size, g.Size)
			}
			switch {
			case p.State.Placed():
				placed++
				m := l.machines[p.Machine]
				if m == nil {
					continue
				}
				if machines[m.ID] || (owner != "" && m.Org != owner) {
					fail("gang %s: part %s on %q: parts share a machine or span organisations", g.ID, p.ID, m.ID)
				}
				machines[m.ID], owner = true, m.Org
			case !p.State.Terminal():
				waiting++
			}
		}
		if placed > 0 && waiting > 0 {
			fail("gang %s: %d parts placed while %d wait", g.ID, placed, waiting)
		}
	}
}

// gangView is a queued gang as the scheduling pass sees it.
type gangView struct {
	org   string
	parts []*Task
}

// queuedGangs lists the gangs whose every part is queued, by the first
// part's submit order.
func (l *Ledger) queuedGangs() []gangView {
	var out []gangView
	for _, id := range l.gangOrder() {
		first := l.tasks[id]
		if first == nil || first.Spec.Gang == nil {
			continue
		}
		parts := l.gangParts(first)
		ok := len(parts) == first.Spec.Gang.Size
		for _, p := range parts {
			ok = ok && p.State == TaskQueued
		}
		if ok {
			out = append(out, gangView{org: first.Org, parts: parts})
		}
	}
	return out
}

// gangOrder is the IDs of the gangs with a part not terminal, in submit
// order: the first parts' IDs, by their Seq.
func (l *Ledger) gangOrder() []string {
	ids := make([]string, 0, len(l.gangs))
	for id := range l.gangs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := l.tasks[ids[i]], l.tasks[ids[j]]
		if a == nil || b == nil {
			return ids[i] < ids[j]
		}
		return a.Seq < b.Seq
	})
	return ids
}

// syncGangs keeps the index of live gangs (l.gangs) in step after a
// command: a submitted gang enters it, a gang whose parts have all ended
// (or been forgotten) leaves it.
func (l *Ledger) syncGangs(res *Result) {
	for _, tr := range res.Transitions {
		t := l.tasks[tr.Task]
		if t == nil || t.Spec.Gang == nil {
			continue
		}
		live := false
		for _, p := range l.gangParts(t) {
			live = live || !p.State.Terminal()
		}
		if live {
			l.gangs[t.Spec.Gang.ID] = struct{}{}
		} else {
			delete(l.gangs, t.Spec.Gang.ID)
		}
	}
}

// rebuildGangs derives l.gangs from the tasks (Restore).
func (l *Ledger) rebuildGangs() {
	l.gangs = map[string]struct{}{}
	for _, t := range l.tasks {
		if t.Spec.Gang != nil && !t.State.Terminal() {
			l.gangs[t.Spec.Gang.ID] = struct{}{}
		}
	}
}

// checkGangIndex is CheckInvariants' check of l.gangs: the gangs with a
// part that has not ended, no more, no fewer.
func (l *Ledger) checkGangIndex(fail func(string, ...any)) {
	want := map[string]bool{}
	for _, t := range l.tasks {
		if t.Spec.Gang != nil && !t.State.Terminal() {
			want[t.Spec.Gang.ID] = true
		}
	}
	if len(want) != len(l.gangs) {
		fail("gang index: %d gangs kept, %d with a part not ended", len(l.gangs), len(want))
		return
	}
	for id := range want {
		if _, ok := l.gangs[id]; !ok {
			fail("gang index: gang %s is missing", id)
		}
	}
}

// viewGangs adds to the policy view every gang whose parts all wait
// (State.Gangs), in submit order: the policy places them (docs/POLICY.md
// §8, "Gangs in the policy": policy.GangFirst under the job policy ehosep,
// policy.LiveBackfill under the others), each part by an allocation of its
// own, every part in the same pass or none; applyGang holds the ledger to
// that.
func (l *Ledger) viewGangs(s *policy.State, orgIdx map[string]int) {
	if len(l.gangs) == 0 {
		return
	}
	for _, gv := range l.queuedGangs() {
		g := policy.GangJob{ID: gv.parts[0].Spec.Gang.ID, Parts: make([]policy.Task, len(gv.parts))}
		for k, p := range gv.parts {
			g.Parts[k] = policyTask(p, orgIdx)
		}
		s.Gangs = append(s.Gangs, g)
	}
}

// GangMachines returns the machines of the parts of task's gang, in rank
// order: what a part's start gives its program as the gang's hosts. ok is
// false when task is not a gang's part or a part is not placed (the gang
// is being stopped).
func (l *Ledger) GangMachines(task string) (machines []string, ok bool) {
	t := l.tasks[task]
	if t == nil || t.Spec.Gang == nil {
		return nil, false
	}
	parts := l.gangParts(t)
	if len(parts) != t.Spec.Gang.Size {
		return nil, false
	}
	machines = make([]string, len(parts))
	for i, p := range parts {
		if !p.State.Placed() {
			return nil, false
		}
		machines[i] = p.Machine
	}
	return machines, true
}

// gangPending adds to out the reason of every waiting gang part, from the
// pass of the federation's job policy on s (the view, its gangs in
// s.Gangs): its gang starts in the next pass (next_pass), or it waits
// (gang), holding machines or a reservation when it is the head.
func (l *Ledger) gangPending(out map[string]PendingReason, s *policy.State, vm *ViewMap) {
	if len(s.Gangs) == 0 {
		return
	}
	next, held := map[string]bool{}, map[string]string{}
	if job := l.JobPolicy().Policy; job == DefaultJobPolicy {
		if st, err := policy.PlanGangStep(s); err == nil {
			for _, d := range st.Starts {
				next[d.Task] = true
			}
			if st.Head != "" {
				ms := make([]string, len(st.Reserved))
				for i, m := range st.Reserved {
					ms[i] = vm.Machines[m]
				}
				held[st.Head] = "the head gang: machines " + strings.Join(ms, ", ") + " are held for it (nothing else starts there) until it starts"
			}
		}
	} else if pl, err := (policy.LiveBackfill{Mode: job}).Plan(s); err == nil {
		for _, d := range pl.Starts {
			next[d.Task] = true
		}
		for _, r := range pl.Reservations {
			held[r.Task] = fmt.Sprintf("reserved on %s in %d ms (job policy %s): no task started after it delays it", vm.Machines[r.Machine], r.AtMs, job)
		}
	}
	for _, g := range s.Gangs {
		k := len(g.Parts)
		for r, p := range g.Parts {
			switch {
			case next[p.ID]:
				out[p.ID] = PendingReason{Code: policy.PendingNextPass, Detail: fmt.Sprintf("the next pass places the whole gang %s (%d parts)", g.ID, k)}
			case held[g.ID] != "" && held[p.ID] == "":
				out[p.ID] = PendingReason{Code: policy.PendingGang, Detail: fmt.Sprintf("part %d of gang %s, %s", r, g.ID, held[g.ID])}
			case held[p.ID] != "":
				out[p.ID] = PendingReason{Code: policy.PendingGang, Detail: fmt.Sprintf("part %d of gang %s, %s", r, g.ID, held[p.ID])}
			default:
				out[p.ID] = PendingReason{Code: policy.PendingGang, Detail: fmt.Sprintf("part %d of gang %s: waits until one organisation has %d machines with room for a part each, within its power limit", r, g.ID, k)}
			}
		}
	}
}
