package policy

import (
	"math"
	"sort"
)

// freeIndex answers the shared pass's algorithm-4 question, "the first
// machine in the papers' energy order (energyBetter) with room for this
// request", without looking at every machine: a segment tree over the
// machines in energy order holding, per subtree, the most free CPUs, GPUs
// and memory of any one of its machines (memory unbounded on a machine that
// declares none, which takes any memory request: fitsIn).
//
// A subtree none of whose machines could hold the request is skipped
// whole; one that passes the three maxima may still hold no machine that
// passes all three at once, so a search can descend into it for nothing,
// but never returns a wrong machine: leaves are exact.
type freeIndex struct {
	order  []int // position → machine, in energy order
	pos    []int // machine → position
	leaves int   // a power of two ≥ len(order)
	// cpus, gpus and mem are the subtree maxima, in heap layout (node 1 is
	// the root; node k's children are 2k and 2k+1; leaves from `leaves`).
	cpus, gpus, mem []int64
}

func newFreeIndex(ms []Machine, free, capa []Resources) *freeIndex {
	x := &freeIndex{order: make([]int, len(ms)), pos: make([]int, len(ms)), leaves: 1}
	for i := range x.order {
		x.order[i] = i
	}
	sort.Slice(x.order, func(a, b int) bool { return energyBefore(&ms[x.order[a]], &ms[x.order[b]]) })
	for p, m := range x.order {
		x.pos[m] = p
	}
	for x.leaves < len(ms) {
		x.leaves *= 2
	}
	n := 2 * x.leaves
	x.cpus, x.gpus, x.mem = make([]int64, n), make([]int64, n), make([]int64, n)
	for k := range n { // padding leaves hold nothing: CPUs −1 fits no request
		x.cpus[k], x.gpus[k], x.mem[k] = -1, -1, -1
	}
	for m := range ms {
		x.setLeaf(m, free[m], capa[m])
	}
	for k := x.leaves - 1; k >= 1; k-- {
		x.pull(k)
	}
	return x
}

func (x *freeIndex) setLeaf(m int, free, capa Resources) {
	k := x.leaves + x.pos[m]
	x.cpus[k], x.gpus[k], x.mem[k] = free.CPUs, free.GPUs, free.MemoryBytes
	if capa.MemoryBytes == 0 {
		x.mem[k] = math.MaxInt64
	}
}

func (x *freeIndex) pull(k int) {
	x.cpus[k] = max(x.cpus[2*k], x.cpus[2*k+1])
	x.gpus[k] = max(x.gpus[2*k], x.gpus[2*k+1])
	x.mem[k] = max(x.mem[2*k], x.mem[2*k+1])
}

// set records machine m's free resources after a change.
func (x *freeIndex) set(m int, free, capa Resources) {
	x.setLeaf(m, free, capa)
	for k := (x.leaves + x.pos[m]) / 2; k >= 1; k /= 2 {
		x.pull(k)
	}
}

// first is the first machine at energy position ≥ from with room for req,
// and its position; (-1, -1) when there is none.
func (x *freeIndex) first(req Resources, from int) (m, pos int) {
	if p := x.search(1, 0, x.leaves, from, req); p >= 0 {
		return x.order[p], p
	}
	return -1, -1
}

func (x *freeIndex) search(k, lo, hi, from int, req Resources) int {
	if hi <= from || x.cpus[k] < req.CPUs || x.gpus[k] < req.GPUs || x.mem[k] < req.MemoryBytes {
		return -1
	}
	if hi-lo == 1 {
		return lo
	}
	mid := (lo + hi) / 2
	if p := x.search(2*k, lo, mid, from, req); p >= 0 {
		return p
	}
	return x.search(2*k+1, mid, hi, from, req)
}
