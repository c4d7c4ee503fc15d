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
	if err := Validate(s); err != nil {
		return nil, err
	}
	if !s.OneSlot() {
		return newSharedPass(s, p.BestFit).run()
	}
	w := newEhosepPass(s, p.BestFit)
	return w.run()
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
	queue   []taskHeap
	csqBase []float64 // CSQ_z, static during a pass

	order    []int // organisations in algorithm-3 order
	orderPos []int

	watt    wattOrder
	free    *minTree
	victims []*minTree // per organisation: machines running its tasks
	running []*Task    // per machine; valid when busy[m] (never changed through it)
	busy    []bool
	waste   []float64 // per machine: work lost if its task stops now
	exec    []float64 // per machine: work done since its task started

	victimOrg   int // cached algorithm-5 victim organisation, -2 = unknown
	decisions   []Decision
	maxServices int
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
		dp: make([]float64, n), queue: make([]taskHeap, n), csqBase: make([]float64, n),
		victims: make([]*minTree, n),
		running: make([]*Task, len(s.Machines)), busy: make([]bool, len(s.Machines)),
		waste: make([]float64, len(s.Machines)), exec: make([]float64, len(s.Machines)),
		victimOrg:   -2,
		maxServices: 4*(len(s.Queued)+len(s.Running)+len(s.Machines)) + 16,
	}
	for i, o := range s.Orgs {
		w.limit[i] = o.LimitMilliW
		w.csqBase[i] = CSQ(tot.PowerQuotaMilliW[i], tot.PowerSystemMilliW, tot.ComputeSystemMFLOPS, tot.QuotaMFLOPS[i])
		w.queue[i].bestFit = bestFit
	}
	fillQueues(w.queue, s.Queued)
	if fed != nil {
		w.watt = fed.watt
	} else {
		w.watt = newWattOrder(s.Machines)
	}
	ms := s.Machines
	w.free = newMinTree(len(ms), func(a, b int32) bool { return energyBetter(ms[a], ms[b]) })
	for i := range s.Running {
		r := &s.Running[i]
		m := r.Machine
		w.busy[m] = true
		w.running[m] = &r.Task
		w.waste[m] = Waste(*r, ms[m].MFLOPS, s.CheckpointBlockSeconds)
		w.exec[m] = Executed(*r, ms[m].MFLOPS)
		o := r.Task.Org
		w.alloc[o] += ms[m].MFLOPS
		w.pi[o] += ms[m].BusyMilliW
	}
	for m := range ms {
		if !w.busy[m] && !s.held(m) {
			w.free.setLeaf(w.watt.pos[m], int32(m))
		}
	}
	w.free.build()
	for m := range ms {
		if w.busy[m] && !s.held(m) {
			w.victimTree(w.running[m].Org).setLeaf(w.watt.pos[m], int32(m))
		}
	}
	for _, t := range w.victims {
		if t != nil {
			t.build()
		}
	}
	for i := range n {
		w.dp[i] = DP(w.alloc[i], w.quota[i])
	}
	w.order = make([]int, n)
	w.orderPos = make([]int, n)
	for i := range w.order {
		w.order[i] = i
	}
	sort.Slice(w.order, func(a, b int) bool { return w.orgBefore(w.order[a], w.order[b]) })
	for k, o := range w.order {
		w.orderPos[o] = k
	}
	return w
}

func (w *ehosepPass) victimTree(org int) *minTree {
	if w.victims[org] == nil {
		ms := w.s.Machines
		w.victims[org] = newMinTree(len(ms), func(a, b int32) bool {
			return victimBetter(w.waste[a], w.waste[b], ms[a], ms[b])
		})
	}
	return w.victims[org]
}

func (w *ehosepPass) orgBefore(a, b int) bool {
	return orgBefore(w.dp[a], w.dp[b], w.quota[a], w.quota[b], w.pquota[a], w.pquota[b], w.s.Orgs[a].Name, w.s.Orgs[b].Name)
}

// reposition moves organisation o to its place in the order after its DP
// changed: the list is kept sorted rather than re-sorted after every
// allocation (L796: "re-sorted after every single allocation").
func (w *ehosepPass) reposition(o int) {
	w.dp[o] = DP(w.alloc[o], w.quota[o])
	k := w.orderPos[o]
	copy(w.order[k:], w.order[k+1:])
	rest := w.order[:len(w.order)-1]
	at := sort.Search(len(rest), func(j int) bool { return w.orgBefore(o, rest[j]) })
	copy(w.order[at+1:], w.order[at:len(w.order)-1])
	w.order[at] = o
	lo, hi := min(k, at), max(k, at)
	for j := lo; j <= hi; j++ {
		w.orderPos[w.order[j]] = j
	}
}

func (w *ehosepPass) run() ([]Decision, error) {
	for services := 0; ; services++ {
		if services > w.maxServices {
			return nil, fmt.Errorf("ehosep: no quiescence after %d services (a bug: the pass must terminate)", services)
		}
		if !w.serveOne() {
			return w.decisions, nil
		}
	}
}

// serveOne is one iteration of algorithm 3's outer loop (lines 3-19): walk
// the organisations in order and serve the first one that can be served.
func (w *ehosepPass) serveOne() bool {
	for k := 0; k < w.nOrg; k++ {
		i := w.order[k]
		if w.pi[i] >= w.limit[i] || len(w.queue[i].items) == 0 { // line 7
			continue
		}
		bound := w.limit[i] - w.pi[i]
		upTo := w.watt.upTo(bound)
		if m := w.free.prefix(upTo); m >= 0 { // line 8
			w.allocate(i, int(m)) // algorithm 4
			return true
		}
		if w.preempt(i, upTo) { // algorithm 5
			return true
		}
	}
	return false
}

// allocate is algorithm 4 with the machine already chosen: the
// organisation's first task in queue order goes to machine m.
func (w *ehosepPass) allocate(i, m int) {
	t := w.queue[i].popPtr()
	w.free.set(w.watt.pos[m], -1)
	w.place(t, m)
	w.decisions = append(w.decisions, Decision{Kind: Allocate, Task: t.ID, Org: i, Machine: m})
}

func (w *ehosepPass) place(t *Task, m int) {
	mc := &w.s.Machines[m]
	w.busy[m] = true
	w.running[m] = t
	w.waste[m], w.exec[m] = 0, 0
	w.victimTree(t.Org).set(w.watt.pos[m], int32(m))
	w.alloc[t.Org] += mc.MFLOPS
	w.pi[t.Org] += mc.BusyMilliW
	w.reposition(t.Org)
	w.victimOrg = -2
}

// chooseVictimOrg is algorithm 5 line 3: among organisations in excess
// (DP > 0), the largest CSQ·PI; ties: larger excess Allocated − Quota (L891),
// then name. It does not depend on who is being served, so it is computed
// once per service.
func (w *ehosepPass) chooseVictimOrg() int {
	if w.victimOrg != -2 {
		return w.victimOrg
	}
	best, bestKey := -1, 0.0
	for z := range w.nOrg {
		if !(w.dp[z] > 0) {
			continue
		}
		key := w.csqBase[z] * float64(w.pi[z])
		if best < 0 || victimOrgBefore(key, bestKey, w.alloc[z]-w.quota[z], w.alloc[best]-w.quota[best], w.s.Orgs[z].Name, w.s.Orgs[best].Name) {
			best, bestKey = z, key
		}
	}
	w.victimOrg = best
	return best
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

// preempt is algorithm 5 for organisation i, given the number of machines
// whose draw fits i's remaining power. Faithful to the paper, one victim
// organisation and one machine are tried.
func (w *ehosepPass) preempt(i, upTo int) bool {
	if !(w.dp[i] < 0) { // line 1
		return false
	}
	z := w.chooseVictimOrg() // lines 2-3
	if z < 0 || w.victims[z] == nil {
		return false
	}
	y := w.victims[z].prefix(upTo) // lines 4-5
	if y < 0 {
		return false
	}
	m := int(y)
	mc := &w.s.Machines[m]
	// Line 6: the victim stays in excess, or the beneficiary's limit is lower.
	if !(PREPreempt(w.alloc[z], w.quota[z], mc.MFLOPS) >= 0 || w.limit[i] < w.limit[z]) {
		return false
	}
	victim := w.running[m]
	waste, kept := w.waste[m], w.exec[m]-w.waste[m]
	// Line 7: stop the victim; it goes back to its queue with its progress.
	w.victims[z].set(w.watt.pos[m], -1)
	w.busy[m] = false
	w.alloc[z] -= mc.MFLOPS
	w.pi[z] -= mc.BusyMilliW
	requeued := *victim
	requeued.SizeMFlop = remainingAfter(victim.SizeMFlop, kept)
	w.queue[z].push(requeued)
	w.reposition(z)
	// Line 8: the machine runs i's first waiting task.
	t := w.queue[i].popPtr()
	w.place(t, m)
	w.decisions = append(w.decisions, Decision{
		Kind: Preempt, Task: t.ID, Org: i, Machine: m,
		Victim: victim.ID, VictimOrg: z, VictimWasteMFlop: waste, VictimKeptMFlop: kept,
	})
	return true
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
