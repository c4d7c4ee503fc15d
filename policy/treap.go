package policy

// The orders below are treaps: binary search trees over small integer
// node IDs (organisation or machine indices) with a subtree aggregate.
// Priorities are a fixed hash of the node ID: the shape is deterministic,
// and the answers do not depend on it anyway (every query is a function of
// the order and the aggregates, and the orders are total).

// prio is splitmix64 of the node ID.
func prio(n int32) uint64 {
	z := uint64(n) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// orgOrder keeps the organisations in algorithm 3's order (orgBefore),
// each carrying its headroom when it may be served (tasks waiting, PI
// below its limit; −1 otherwise) and each subtree the largest headroom in
// it, so that "the first organisation in order that may be served and has
// at least W of headroom" costs O(log organisations): the question
// algorithm 3's walk asks, with W the least draw of a free machine (it can
// allocate) or of a victim organisation's busy machine (it may preempt).
//
// The comparison is on two arrays (DP, and a rank of the static
// tie-breaks), not a call through a function value: every decision moves
// an organisation.
type orgOrder struct {
	root        int32
	left, right []int32
	head        []int64   // own headroom, or −1
	most        []int64   // the subtree's largest head
	dp          []float64 // the pass's DP of each organisation
	tie         []int32   // rank by orgBefore's ties: larger quota, smaller power quota, name
}

// newOrgOrder returns an empty order over n organisations whose DP the
// caller keeps in dp; tie ranks them by orgBefore's tie-breaks.
func newOrgOrder(dp []float64, tie []int32) *orgOrder {
	n := len(dp)
	o := &orgOrder{root: -1, left: make([]int32, n), right: make([]int32, n),
		head: make([]int64, n), most: make([]int64, n), dp: dp, tie: tie}
	for i := range o.left {
		o.left[i], o.right[i] = -1, -1
	}
	return o
}

// less is orgBefore: DP ascending (+Inf equals +Inf), then the ties.
func (o *orgOrder) less(a, b int32) bool {
	if da, db := o.dp[a], o.dp[b]; da != db {
		return da < db
	}
	return o.tie[a] < o.tie[b]
}

func (o *orgOrder) pull(n int32) {
	m := o.head[n]
	if l := o.left[n]; l >= 0 && o.most[l] > m {
		m = o.most[l]
	}
	if r := o.right[n]; r >= 0 && o.most[r] > m {
		m = o.most[r]
	}
	o.most[n] = m
}

func (o *orgOrder) split(n, a int32) (int32, int32) {
	if n < 0 {
		return -1, -1
	}
	if o.less(n, a) {
		l, r := o.split(o.right[n], a)
		o.right[n] = l
		o.pull(n)
		return n, r
	}
	l, r := o.split(o.left[n], a)
	o.left[n] = r
	o.pull(n)
	return l, n
}

func (o *orgOrder) merge(a, b int32) int32 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	case prio(a) > prio(b):
		o.right[a] = o.merge(o.right[a], b)
		o.pull(a)
		return a
	default:
		o.left[b] = o.merge(a, o.left[b])
		o.pull(b)
		return b
	}
}

// insert adds organisation a at its place: one descent to the depth its
// priority gives it, then one split of the subtree there.
func (o *orgOrder) insert(a int32) {
	o.left[a], o.right[a] = -1, -1
	o.pull(a)
	o.root = o.insertAt(o.root, a)
}

func (o *orgOrder) insertAt(n, a int32) int32 {
	if n < 0 {
		return a
	}
	if prio(a) > prio(n) {
		o.left[a], o.right[a] = o.split(n, a)
		o.pull(a)
		return a
	}
	if o.less(a, n) {
		o.left[n] = o.insertAt(o.left[n], a)
	} else {
		o.right[n] = o.insertAt(o.right[n], a)
	}
	o.pull(n)
	return n
}

// remove takes organisation a out; its DP must be the one it was
// inserted with (the descent follows it).
func (o *orgOrder) remove(a int32) { o.root = o.removeAt(o.root, a) }

func (o *orgOrder) removeAt(n, a int32) int32 {
	if n == a {
		return o.merge(o.left[n], o.right[n])
	}
	if o.less(a, n) {
		o.left[n] = o.removeAt(o.left[n], a)
	} else {
		o.right[n] = o.removeAt(o.right[n], a)
	}
	o.pull(n)
	return n
}

// first is the first organisation in order with head ≥ bound (bound > 0),
// or −1.
func (o *orgOrder) first(bound int64) int32 { return o.firstIn(o.root, bound) }

func (o *orgOrder) firstIn(n int32, bound int64) int32 {
	for n >= 0 && o.most[n] >= bound {
		if l := o.left[n]; l >= 0 && o.most[l] >= bound {
			n = l
			continue
		}
		if o.head[n] >= bound {
			return n
		}
		n = o.right[n]
	}
	return -1
}

// after is the first organisation in order after a with head ≥ bound, or
// −1. Each call of firstIn below either finds the answer or stops at once,
// so this is one root-to-leaf path.
func (o *orgOrder) after(a int32, bound int64) int32 { return o.afterIn(o.root, a, bound) }

func (o *orgOrder) afterIn(n, a int32, bound int64) int32 {
	if n < 0 || o.most[n] < bound {
		return -1
	}
	if n == a || o.less(n, a) {
		return o.afterIn(o.right[n], a, bound)
	}
	if r := o.afterIn(o.left[n], a, bound); r >= 0 {
		return r
	}
	if o.head[n] >= bound {
		return n
	}
	return o.firstIn(o.right[n], bound)
}

// busySets keeps, for each organisation, the machines running its tasks in
// a treap ordered by draw (their position in wattOrder), each subtree
// carrying its best victim (victimBetter), so that algorithm 5's "the
// least-waste machine of z whose draw fits" is one O(log machines) path.
// A one-slot machine runs one task, so it is in at most one set, and the
// sets share one set of arrays. Written out like orgOrder: no calls
// through function values on the paths every decision takes.
type busySets struct {
	root              []int32 // per organisation
	left, right, best []int32 // per machine; best: the subtree's best victim
	pos               []int   // machine → position in draw order
	waste             []float64
	tie               []int32 // machine → rank by victimBetter's ties (wattOrder.victim)
}

func newBusySets(nOrgs int, pos []int, waste []float64, tie []int32) *busySets {
	n := len(pos)
	b := &busySets{root: make([]int32, nOrgs), left: make([]int32, n), right: make([]int32, n),
		best: make([]int32, n), pos: pos, waste: waste, tie: tie}
	for i := range b.root {
		b.root[i] = -1
	}
	return b
}

// better is victimBetter without reading the machines: least waste, then
// the rank of the ties (smaller computing power, then ID).
func (b *busySets) better(x, y int32) bool {
	if wx, wy := b.waste[x], b.waste[y]; wx != wy {
		return wx < wy
	}
	return b.tie[x] < b.tie[y]
}

func (b *busySets) pick(x, y int32) int32 {
	switch {
	case x < 0:
		return y
	case y < 0:
		return x
	case b.better(y, x):
		return y
	}
	return x
}

func (b *busySets) pull(n int32) {
	m := n
	if l := b.left[n]; l >= 0 {
		m = b.pick(m, b.best[l])
	}
	if r := b.right[n]; r >= 0 {
		m = b.pick(m, b.best[r])
	}
	b.best[n] = m
}

func (b *busySets) split(n int32, p int) (int32, int32) {
	if n < 0 {
		return -1, -1
	}
	if b.pos[n] < p {
		l, r := b.split(b.right[n], p)
		b.right[n] = l
		b.pull(n)
		return n, r
	}
	l, r := b.split(b.left[n], p)
	b.left[n] = r
	b.pull(n)
	return l, n
}

func (b *busySets) merge(x, y int32) int32 {
	switch {
	case x < 0:
		return y
	case y < 0:
		return x
	case prio(x) > prio(y):
		b.right[x] = b.merge(b.right[x], y)
		b.pull(x)
		return x
	default:
		b.left[y] = b.merge(x, b.left[y])
		b.pull(y)
		return y
	}
}

// add puts machine m in org's set; its waste must be set first.
func (b *busySets) add(org int, m int32) {
	b.left[m], b.right[m] = -1, -1
	b.pull(m)
	b.root[org] = b.insertAt(b.root[org], m)
}

func (b *busySets) insertAt(n, m int32) int32 {
	if n < 0 {
		return m
	}
	if prio(m) > prio(n) {
		b.left[m], b.right[m] = b.split(n, b.pos[m])
		b.pull(m)
		return m
	}
	if b.pos[m] < b.pos[n] {
		b.left[n] = b.insertAt(b.left[n], m)
	} else {
		b.right[n] = b.insertAt(b.right[n], m)
	}
	b.pull(n)
	return n
}

// remove takes machine m out of org's set.
func (b *busySets) remove(org int, m int32) { b.root[org] = b.removeAt(b.root[org], m) }

func (b *busySets) removeAt(n, m int32) int32 {
	if n == m {
		return b.merge(b.left[n], b.right[n])
	}
	if b.pos[m] < b.pos[n] {
		b.left[n] = b.removeAt(b.left[n], m)
	} else {
		b.right[n] = b.removeAt(b.right[n], m)
	}
	b.pull(n)
	return n
}

// lowest is org's busy machine of least draw, or −1.
func (b *busySets) lowest(org int) int32 {
	n := b.root[org]
	if n < 0 {
		return -1
	}
	for b.left[n] >= 0 {
		n = b.left[n]
	}
	return n
}

// prefix is org's best victim among its machines at positions below k,
// or −1.
func (b *busySets) prefix(org int, k int) int32 {
	best := int32(-1)
	for n := b.root[org]; n >= 0; {
		if b.pos[n] < k {
			best = b.pick(best, n)
			if l := b.left[n]; l >= 0 {
				best = b.pick(best, b.best[l])
			}
			n = b.right[n]
		} else {
			n = b.left[n]
		}
	}
	return best
}
