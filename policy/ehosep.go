package policy

import (
	"fmt"
	"math"
	"sort"
)

// EHOSEP is the energy-aware HOSEP of seed 000 (algorithms 3, 4 and 5,
// L755-915), implemented with indices so that one decision costs
// O(organisations + log machines) rather than a scan of every machine:
// free machines sit in a segment tree ordered by draw, so "the least-energy
// free machine whose draw fits the organisation's remaining power" is a
// prefix query, and each organisation's busy machines sit in a second such
// tree for the victim choice of algorithm 5.
//
// BestFit selects the variant of §4.5 (L1433) that serves the largest
// waiting task first instead of the smallest ("ehosep-bestfit").
type EHOSEP struct {
	BestFit bool
}

// Name implements Policy.
func (p EHOSEP) Name() string {
	if p.BestFit {
		return "ehosep-bestfit"
	}
	return "ehosep"
}

// Schedule implements Policy: it runs algorithm 3 until a full pass over
// the organisations serves nobody and returns the decisions in order.
func (p EHOSEP) Schedule(s *State) ([]Decision, error) {
	if err := p.check(s); err != nil {
		return nil, err
	}
	if !s.OneSlot() {
		return newSharedPass(withQueued(s), p.BestFit).run()
	}
	w := newEhosepPass(s, p.BestFit)
	return w.run()
}

// check validates s for this variant.
func (p EHOSEP) check(s *State) error {
	if err := Validate(s); err != nil {
		return err
	}
	if s.Queue != nil && s.Queue.BestFit() != p.BestFit {
		return fmt.Errorf("%s: the state's queue is in the order of the other variant", p.Name())
	}
	return nil
}

// ehosepPass is the working state of one scheduling pass.
type ehosepPass struct {
	s       *State
	nOrg    int
	quota   []int64
	pquota  []int64
	limit   []int64
	alloc   []int64
	pi      []int64
	dp      []float64
	queue   []passQueue
	csqBase []float64 // CSQ_z, static during a pass

	// order is algorithm 3's list of organisations with their headroom
	// (orgOrder); victimOrgs holds the organisations in excess (DP > 0)
	// by algorithm 5's victim order. Both change in O(log organisations)
	// when an organisation's allocation changes.
	order      *orgOrder
	victimOrgs *minTree

	watt    wattOrder
	free    *minTree
	victims *busySets // per organisation: machines running its tasks
	// running is, per machine, its task (valid when busy[m]): a pointer
	// into the state or the queue, which no pass changes, so that a
	// decision copies no Task (a Task is over 200 bytes).
	running []*Task
	busy    []bool
	waste   []float64 // per machine: work lost if its task stops now
	exec    []float64 // per machine: work done since its task started

	decisions   []Decision
	maxServices int
	dl          *deadlineState // reservations and taken machines (deadline_pass.go)
}

// passQueue is one organisation's waiting tasks during a pass: a heap of
// the pass's own tasks (every waiting task when the State lists them in
// Queued; only the victims requeued in this pass when it has a Queue) and,
// with a Queue, a cursor over the organisation's persistent queue, which
// the pass reads in order and never changes.
type passQueue struct {
	heap taskHeap
	src  *Queue
	org  int
	// ahead holds the persistent queue's next tasks not taken in this
	// pass, read a few at a time; left counts all those not taken.
	ahead, buf []*Task
	left       int
}

// queueReadAhead is how many tasks a pass reads from a persistent queue at
// once: one B-tree descent for several placements.
const queueReadAhead = 16

func (q *passQueue) len() int { return len(q.heap.items) + q.left }

// fromSource says the next task comes from the persistent queue.
func (q *passQueue) fromSource() bool {
	if q.left == 0 {
		return false
	}
	if len(q.ahead) == 0 {
		q.buf = make([]*Task, 0, queueReadAhead)
		q.ahead = q.src.following(q.org, nil, queueReadAhead, q.buf)
	}
	return len(q.heap.items) == 0 || taskBefore(q.ahead[0], q.heap.items[0], q.heap.bestFit)
}

func (q *passQueue) pop() *Task {
	if !q.fromSource() {
		return q.heap.popPtr()
	}
	t := q.ahead[0]
	q.left--
	if q.ahead = q.ahead[1:]; len(q.ahead) == 0 && q.left > 0 {
		q.ahead = q.src.following(q.org, t, queueReadAhead, q.buf[:0])
	}
	return t
}

func newEhosepPass(s *State, bestFit bool) *ehosepPass {
	n := len(s.Orgs)
	var tot Totals
	fed := s.federation()
	if fed != nil {
		tot = fed.tot
	} else {
		tot = ComputeTotals(s)
	}
	w := &ehosepPass{
		s: s, nOrg: n,
		quota: tot.QuotaMFLOPS, pquota: tot.PowerQuotaMilliW,
		limit: make([]int64, n), alloc: make([]int64, n), pi: make([]int64, n),
		dp: make([]float64, n), queue: make([]passQueue, n), csqBase: make([]float64, n),
		running: make([]*Task, len(s.Machines)), busy: make([]bool, len(s.Machines)),
		waste: make([]float64, len(s.Machines)), exec: make([]float64, len(s.Machines)),
		maxServices: 4*(s.queuedLen()+len(s.Running)+len(s.Machines)) + 16,
	}
	for i, o := range s.Orgs {
		w.limit[i] = o.LimitMilliW
		w.csqBase[i] = CSQ(tot.PowerQuotaMilliW[i], tot.PowerSystemMilliW, tot.ComputeSystemMFLOPS, tot.QuotaMFLOPS[i])
		w.queue[i].heap.bestFit = bestFit
	}
	w.fillQueues()
	if fed != nil {
		w.watt = fed.watt
	} else {
		w.watt = newWattOrder(s.Machines)
	}
	ms := s.Machines
	w.free = newRankTree(len(ms), w.watt.energy)
	w.victims = newBusySets(n, w.watt.pos, w.waste, w.watt.victim)
	for k := range s.Running {
		r := &s.Running[k]
		m := r.Machine
		w.busy[m] = true
		w.running[m] = &r.Task
		w.waste[m] = Waste(*r, ms[m].MFLOPS, s.CheckpointBlockSeconds)
		w.exec[m] = Executed(*r, ms[m].MFLOPS)
		o := r.Task.Org
		w.alloc[o] += ms[m].MFLOPS
		w.pi[o] += ms[m].BusyMilliW
		if !s.held(m) {
			w.victims.add(o, int32(m))
		}
	}
	for m := range ms {
		if !w.busy[m] && !s.held(m) {
			w.free.setLeaf(w.watt.pos[m], int32(m))
		}
	}
	w.free.build()
	w.order = newOrgOrder(w.dp, w.tieRanks())
	w.victimOrgs = newMinTree(n, func(a, b int32) bool { return w.victimOrgBetter(int(a), int(b)) })
	for i := range n {
		w.dp[i] = DP(w.alloc[i], w.quota[i])
		w.attach(i)
	}
	return w
}

// fillQueues gives every organisation its waiting tasks: the State's
// Queued into per-organisation heaps, or cursors on its Queue.
func (w *ehosepPass) fillQueues() {
	if q := w.s.Queue; q != nil {
		for i := range w.queue {
			pq := &w.queue[i]
			pq.src, pq.org, pq.left = q, i, q.Waiting(i)
		}
		return
	}
	heaps := make([]taskHeap, len(w.queue))
	for i := range heaps {
		heaps[i].bestFit = w.queue[i].heap.bestFit
	}
	fillQueues(heaps, w.s.Queued)
	for i := range heaps {
		w.queue[i].heap = heaps[i]
	}
}

func (w *ehosepPass) orgBefore(a, b int) bool { return w.order.less(int32(a), int32(b)) }

// tieRanks ranks the organisations by orgBefore's tie-breaks (larger
// quota, smaller power quota, name), which do not change during a pass,
// so that the order compares DP and one integer.
func (w *ehosepPass) tieRanks() []int32 {
	by := make([]int, w.nOrg)
	for i := range by {
		by[i] = i
	}
	sort.Slice(by, func(x, y int) bool {
		a, b := by[x], by[y]
		return orgBefore(0, 0, w.quota[a], w.quota[b], w.pquota[a], w.pquota[b], w.s.Orgs[a].Name, w.s.Orgs[b].Name)
	})
	rank := make([]int32, w.nOrg)
	for r, o := range by {
		rank[o] = int32(r)
	}
	return rank
}

// detach takes organisation o out of the indices before its allocation,
// power or queue changes; attach puts it back after, in its new place
// (L796: the list is "re-sorted after every single allocation").
func (w *ehosepPass) detach(o int) { w.order.remove(int32(o)) }

func (w *ehosepPass) attach(o int) {
	w.dp[o] = DP(w.alloc[o], w.quota[o])
	w.order.head[o] = -1
	if w.pi[o] < w.limit[o] && w.queue[o].len() > 0 { // line 7
		w.order.head[o] = w.limit[o] - w.pi[o]
	}
	w.order.insert(int32(o))
	v := int32(-1)
	if w.dp[o] > 0 {
		v = int32(o)
	}
	w.victimOrgs.set(o, v)
}

func (w *ehosepPass) run() ([]Decision, error) {
	// From an idle federation a pass places about one task per free
	// machine: room for them up front, not a doubling slice's copies.
	w.decisions = make([]Decision, 0, min(w.s.queuedLen(), max(len(w.s.Machines)-len(w.s.Running), 0))+1)
	for services := 0; ; services++ {
		if services > w.maxServices {
			return nil, fmt.Errorf("ehosep: no quiescence after %d services (a bug: the pass must terminate)", services)
		}
		if !w.serveOne() {
			if len(w.decisions) == 0 {
				return nil, nil // as a pass that never had room made
			}
			return w.decisions, nil
		}
	}
}

// serveOne is one iteration of algorithm 3's outer loop (lines 3-19): walk
// the organisations in order and serve the first one that can be served.
//
// The walk is not a scan. An organisation that may be served (line 7) can
// allocate (line 8) exactly when its headroom reaches the least draw of a
// free machine: the first such one in order, a, is one query of the order.
// Before a, only organisations that may preempt are served, and algorithm
// 5 needs a victim machine whose draw fits: their headroom reaches the
// least draw among the victim organisation's machines. Those are visited
// in order, each one query, until one preempts or a is reached; the ones
// visited and refused are organisations in deficit whose preemption fails
// line 6 (the victim would drop below its quota and the beneficiary's
// limit is not lower).
func (w *ehosepPass) serveOne() bool {
	a := int32(-1)
	if p := w.free.firstPos(); p >= 0 {
		a = w.order.first(w.watt.watts[p])
	}
	if z := w.chooseVictimOrg(); z >= 0 {
		if low := w.victims.lowest(z); low >= 0 {
			need := w.watt.watts[w.watt.pos[low]]
			for c := w.order.first(need); c >= 0 && c != a && w.dp[c] < 0; c = w.order.after(c, need) {
				if a >= 0 && w.orgBefore(int(a), int(c)) {
					break
				}
				if w.preempt(int(c), z, w.watt.upTo(w.limit[c]-w.pi[c])) {
					return true
				}
			}
		}
	}
	if a < 0 {
		return w.serveClassedHeads() // deadline_pass.go
	}
	i := int(a)
	w.allocate(i, int(w.free.prefix(w.watt.upTo(w.limit[i]-w.pi[i])))) // algorithm 4
	return true
}

// allocate is algorithm 4 with the machine already chosen: the
// organisation's first task in queue order goes to machine m.
func (w *ehosepPass) allocate(i, m int) {
	w.detach(i)
	t := w.queue[i].pop()
	if t.Class != 0 {
		w.allocateClassed(i, t, m) // deadline_pass.go
		w.attach(i)
		return
	}
	w.free.set(w.watt.pos[m], -1)
	w.place(t, m)
	w.attach(i)
	w.decisions = append(w.decisions, Decision{Kind: Allocate, Task: t.ID, Org: i, Machine: m})
}

// place runs t on machine m; its organisation is detached.
func (w *ehosepPass) place(t *Task, m int) {
	mc := &w.s.Machines[m]
	w.busy[m] = true
	w.running[m] = t
	w.waste[m], w.exec[m] = 0, 0
	w.victims.add(t.Org, int32(m))
	w.alloc[t.Org] += mc.MFLOPS
	w.pi[t.Org] += mc.BusyMilliW
}

// chooseVictimOrg is algorithm 5 line 3: among organisations in excess
// (DP > 0), the largest CSQ·PI; ties: larger excess Allocated − Quota (L891),
// then name. It does not depend on who is being served.
func (w *ehosepPass) chooseVictimOrg() int { return int(w.victimOrgs.node[1]) }

// victimOrgBetter is victimOrgBefore on two organisations in excess. On
// them it is a total order, so a tournament tree picks what a scan would:
// a key is NaN only for an organisation without machines and without
// running tasks (CSQ = +Inf, PI = 0), whose excess is 0 while every other
// one in excess has a positive excess, so it loses to all of them and
// among such organisations the name decides.
func (w *ehosepPass) victimOrgBetter(a, b int) bool {
	return victimOrgBefore(w.csqBase[a]*float64(w.pi[a]), w.csqBase[b]*float64(w.pi[b]),
		w.alloc[a]-w.quota[a], w.alloc[b]-w.quota[b], w.s.Orgs[a].Name, w.s.Orgs[b].Name)
}

func victimOrgBefore(keyA, keyB float64, excessA, excessB int64, nameA, nameB string) bool {
	if keyA != keyB && !(math.IsNaN(keyA) || math.IsNaN(keyB)) {
		return keyA > keyB
	}
	if excessA != excessB {
		return excessA > excessB
	}
	return nameA < nameB
}

// preempt is algorithm 5 for organisation i with victim organisation z,
// given the number of machines whose draw fits i's remaining power.
// Faithful to the paper, one victim organisation and one machine are
// tried.
func (w *ehosepPass) preempt(i, z, upTo int) bool {
	if !(w.dp[i] < 0) { // line 1
		return false
	}
	y := w.victims.prefix(z, upTo) // lines 4-5
	if y < 0 {
		return false
	}
	m := int(y)
	mc := &w.s.Machines[m]
	// Line 6: the victim stays in excess, or the beneficiary's limit is lower.
	if !(PREPreempt(w.alloc[z], w.quota[z], mc.MFLOPS) >= 0 || w.limit[i] < w.limit[z]) {
		return false
	}
	// Line 7: stop the victim; it goes back to its queue with its progress.
	w.detach(z)
	victim, waste, kept := w.stopVictim(m)
	w.attach(z)
	// Line 8: the machine runs i's first waiting task.
	w.detach(i)
	t := w.queue[i].pop()
	w.place(t, m)
	w.attach(i)
	w.decisions = append(w.decisions, Decision{
		Kind: Preempt, Task: t.ID, Org: i, Machine: m,
		Victim: victim.ID, VictimOrg: z, VictimWasteMFlop: waste, VictimKeptMFlop: kept,
	})
	return true
}

// stopVictim stops the task running on machine m, whose organisation the
// caller has detached: it leaves m and goes back to its organisation's
// queue with the work it keeps. It returns the task, the work it loses
// and the work it keeps (Decision.VictimWasteMFlop, VictimKeptMFlop).
func (w *ehosepPass) stopVictim(m int) (victim Task, waste, kept float64) {
	victim = *w.running[m]
	z, mc := victim.Org, &w.s.Machines[m]
	waste, kept = w.waste[m], w.exec[m]-w.waste[m]
	w.victims.remove(z, int32(m))
	w.busy[m] = false
	w.alloc[z] -= mc.MFLOPS
	w.pi[z] -= mc.BusyMilliW
	requeued := victim
	requeued.SizeMFlop = remainingAfter(victim.SizeMFlop, kept)
	w.queue[z].heap.push(requeued)
	return victim, waste, kept
}

// remainingAfter is the work left of a task of size MFlop that keeps kept
// MFlop of progress, never below zero.
func remainingAfter(size int64, kept float64) int64 {
	r := size - int64(math.Floor(kept))
	if r < 0 {
		return 0
	}
	return r
}

// Decides reports whether p's pass on s decides anything, the question a
// leader asks before it appends a scheduling trigger. EHOSEP answers it
// with the first services of its pass, up to the first that decides (a
// service that only reserves a slot for a task with a class decides
// nothing: deadline_pass.go); other policies run their whole pass.
func Decides(p Policy, s *State) (bool, error) {
	if g, ok := p.(GangFirst); ok {
		if len(s.Gangs) > 0 {
			ds, err := g.Schedule(s)
			return len(ds) > 0, err
		}
		p = g.Base
	}
	e, ok := p.(EHOSEP)
	if !ok {
		ds, err := p.Schedule(s)
		return len(ds) > 0, err
	}
	if err := e.check(s); err != nil {
		return false, err
	}
	if !s.OneSlot() {
		return newSharedPass(withQueued(s), e.BestFit).serveOne(), nil
	}
	return newEhosepPass(s, e.BestFit).decidesAny(), nil
}
