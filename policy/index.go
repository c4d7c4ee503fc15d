package policy

import (
	"cmp"
	"slices"
	"sort"
)

// minTree is a segment tree over machine positions (machines sorted by busy
// watts, ascending) holding, for each node, the best present machine of its
// range under better. A prefix query answers "the best machine whose draw is
// at most W" in O(log n): the question algorithms 4 and 5 ask for every
// decision (seed 000 L828-835 and L888-893).
type minTree struct {
	size   int
	node   []int32 // machine index, -1 when the range holds none
	better func(a, b int32) bool
	// rank, when not nil, replaces better: a is better than b when
	// rank[a] < rank[b] (a static order precomputed once, compared
	// without a call: the free machines' tree moves at every decision).
	rank []int32
}

// newRankTree is a minTree whose order is rank's (a permutation).
func newRankTree(n int, rank []int32) *minTree {
	t := newMinTree(n, nil)
	t.rank = rank
	return t
}

func newMinTree(n int, better func(a, b int32) bool) *minTree {
	size := 1
	for size < n {
		size <<= 1
	}
	t := &minTree{size: size, node: make([]int32, 2*size), better: better}
	for i := range t.node {
		t.node[i] = -1
	}
	return t
}

func (t *minTree) pick(a, b int32) int32 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	case t.rank != nil:
		if t.rank[b] < t.rank[a] {
			return b
		}
		return a
	case t.better(b, a):
		return b
	default:
		return a
	}
}

// set places machine m (or -1 to clear) at position pos.
func (t *minTree) set(pos int, m int32) {
	i := pos + t.size
	t.node[i] = m
	for i >>= 1; i > 0; i >>= 1 {
		t.node[i] = t.pick(t.node[2*i], t.node[2*i+1])
	}
}

// build fills the tree from leaves already placed with setLeaf, in O(n).
func (t *minTree) setLeaf(pos int, m int32) { t.node[pos+t.size] = m }

func (t *minTree) build() {
	for i := t.size - 1; i > 0; i-- {
		t.node[i] = t.pick(t.node[2*i], t.node[2*i+1])
	}
}

// prefix returns the best machine among positions [0, k), or -1.
func (t *minTree) prefix(k int) int32 {
	if k <= 0 {
		return -1
	}
	if k >= t.size {
		return t.node[1]
	}
	best := int32(-1)
	lo, hi := t.size, k+t.size
	for lo < hi {
		if lo&1 == 1 {
			best = t.pick(best, t.node[lo])
			lo++
		}
		if hi&1 == 1 {
			hi--
			best = t.pick(best, t.node[hi])
		}
		lo >>= 1
		hi >>= 1
	}
	return best
}

// wattOrder sorts machines by busy draw so that "draw ≤ bound" is a prefix.
type wattOrder struct {
	pos   []int   // machine index → position
	watts []int64 // position → draw, ascending
	byPos []int32 // position → machine index
	// energy is each machine's rank in algorithm 4's order
	// (energyBetter), which the free machines' tree compares; victim its
	// rank in victimBetter's ties (smaller d, then ID), which the busy
	// machines' treaps compare after the waste.
	energy, victim []int32
}

func newWattOrder(ms []Machine) wattOrder {
	byPos := make([]int32, len(ms))
	for i := range byPos {
		byPos[i] = int32(i)
	}
	sort.Slice(byPos, func(a, b int) bool {
		ma, mb := ms[byPos[a]], ms[byPos[b]]
		if ma.BusyMilliW != mb.BusyMilliW {
			return ma.BusyMilliW < mb.BusyMilliW
		}
		return byPos[a] < byPos[b]
	})
	w := wattOrder{pos: make([]int, len(ms)), watts: make([]int64, len(ms)), byPos: byPos}
	for p, m := range byPos {
		w.pos[m] = p
		w.watts[p] = ms[m].BusyMilliW
	}
	byEnergy := make([]int32, len(ms))
	for i := range byEnergy {
		byEnergy[i] = int32(i)
	}
	slices.SortFunc(byEnergy, func(a, b int32) int {
		switch {
		case a == b:
			return 0
		case energyBefore(&ms[a], &ms[b]):
			return -1
		}
		return 1 // a total order: machine IDs are unique
	})
	w.energy = make([]int32, len(ms))
	for r, m := range byEnergy {
		w.energy[m] = int32(r)
	}
	slices.SortFunc(byEnergy, func(a, b int32) int { // now by victim ties
		switch ma, mb := &ms[a], &ms[b]; {
		case a == b:
			return 0
		case ma.MFLOPS != mb.MFLOPS:
			return cmp.Compare(ma.MFLOPS, mb.MFLOPS)
		case ma.ID < mb.ID:
			return -1
		}
		return 1 // a total order: machine IDs are unique
	})
	w.victim = make([]int32, len(ms))
	for r, m := range byEnergy {
		w.victim[m] = int32(r)
	}
	return w
}

// upTo is the number of machines whose draw is ≤ bound.
func (w wattOrder) upTo(bound int64) int {
	return sort.Search(len(w.watts), func(p int) bool { return w.watts[p] > bound })
}

// energyBetter orders machines for algorithm 4: least energy for a task,
// E = s/d · c, that is least c/d (compared exactly as c_a·d_b < c_b·d_a);
// ties: larger d (L835), then machine ID.
func energyBetter(a, b Machine) bool { return energyBefore(&a, &b) }

// energyBefore is energyBetter without copying the machines.
func energyBefore(a, b *Machine) bool {
	ea, eb := a.BusyMilliW*b.MFLOPS, b.BusyMilliW*a.MFLOPS
	if ea != eb {
		return ea < eb
	}
	if a.MFLOPS != b.MFLOPS {
		return a.MFLOPS > b.MFLOPS
	}
	return a.ID < b.ID
}

// victimBetter orders a victim organisation's busy machines for algorithm 5:
// least waste if stopped (L891); ties: smaller d, then machine ID.
func victimBetter(wasteA, wasteB float64, a, b Machine) bool {
	if wasteA != wasteB {
		return wasteA < wasteB
	}
	if a.MFLOPS != b.MFLOPS {
		return a.MFLOPS < b.MFLOPS
	}
	return a.ID < b.ID
}

// taskBefore orders an organisation's queue: smallest first (algorithm 4
// line 1), ties earliest submitted, then ID. bestFit reverses the size
// order (largest first, seed 000 §4.5) and keeps the other ties.
func taskBefore(a, b *Task, bestFit bool) bool {
	if a.SizeMFlop != b.SizeMFlop {
		if bestFit {
			return a.SizeMFlop > b.SizeMFlop
		}
		return a.SizeMFlop < b.SizeMFlop
	}
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	return a.ID < b.ID
}

// taskHeap is a binary heap of one organisation's waiting tasks. It holds
// pointers: a Task is large (requests, requirements, avoided machines), and
// the heap moves its items at every push and pop.
type taskHeap struct {
	items   []*Task
	bestFit bool
}

// fillQueues distributes the waiting tasks to their organisations' heaps,
// carving every heap out of one allocation (one per pass, not one per
// organisation and growth step: the simulator calls this at every event).
// The heaps point into tasks (the state's, which no policy modifies).
func fillQueues(queues []taskHeap, tasks []Task) {
	count := make([]int, len(queues))
	for i := range tasks {
		count[tasks[i].Org]++
	}
	// Room for one requeued victim per organisation per running task is
	// not reserved: push grows a heap past its share only on preemption.
	backing := make([]*Task, len(tasks))
	off := 0
	for i := range queues {
		queues[i].items = backing[off : off : off+count[i]]
		off += count[i]
	}
	for i := range tasks {
		t := &tasks[i]
		queues[t.Org].items = append(queues[t.Org].items, t)
	}
	for i := range queues {
		queues[i].init()
	}
}

func (h *taskHeap) less(i, j int) bool { return taskBefore(h.items[i], h.items[j], h.bestFit) }

func (h *taskHeap) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// push adds a copy of t.
func (h *taskHeap) push(t Task) {
	h.items = append(h.items, &t)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *taskHeap) pop() Task { return *h.popPtr() }

// popPtr removes the first task and returns it: a pointer into the state
// or to a copy push made, never changed afterwards.
func (h *taskHeap) popPtr() *Task {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items[last] = nil
	h.items = h.items[:last]
	if last > 0 {
		h.down(0)
	}
	return top
}

func (h *taskHeap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			return
		}
		h.items[i], h.items[c] = h.items[c], h.items[i]
		i = c
	}
}

// orgBefore is algorithm 3 line 5's order: DP ascending; ties larger Quota,
// then smaller PowerQuota (L796), then name.
func orgBefore(dpA, dpB float64, quotaA, quotaB, pqA, pqB int64, nameA, nameB string) bool {
	if dpA != dpB {
		return dpA < dpB
	}
	if quotaA != quotaB {
		return quotaA > quotaB
	}
	if pqA != pqB {
		return pqA < pqB
	}
	return nameA < nameB
}

// firstPos is the smallest position holding a machine, or −1.
func (t *minTree) firstPos() int {
	if t.node[1] < 0 {
		return -1
	}
	i := 1
	for i < t.size {
		if t.node[2*i] >= 0 {
			i = 2 * i
		} else {
			i = 2*i + 1
		}
	}
	return i - t.size
}
