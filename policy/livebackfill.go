package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Backfilling on a live federation (issue 21; docs/POLICY.md §8 and
// docs/JOBS.md, "Backfilling on a live federation"). The job policies of
// backfill.go plan one machine of P interchangeable processors; a
// federation has many machines of different sizes, owner policies,
// requirements and organisations' power limits. LiveBackfill plans a
// federation's State with the same rules:
//
//   - Order: submission order (Task.Seq, then ID) across the federation,
//     as the seed's policies define; EHOSEPEasy's is EHOSEP's organisation
//     order (see there).
//   - Length: a task's planned length is its WallLimitMs (its
//     wall_clock_limit, the seed's tr), else the wall-clock cap of the
//     machine's owner (OwnerPolicy.MaxWallMs: the executor cuts the run
//     there), else it never ends. A running task ends, for the plan, when
//     that length runs out (at least 1 ms from now: one past its limit
//     still holds its room now).
//   - Room: a task fits on an eligible machine (Eligible) at an instant
//     when its request fits beside every task running or reserved there at
//     that instant, for its whole length; and its organisation's power,
//     PI, stays within Lim at every instant of it (PI counts every task of
//     the organisation running or reserved then, at its share of its
//     machine's draw). So PI ≤ Lim after each decision, and the head's
//     reservation is a reservation of power too.
//   - A task starts now on the least-energy machine (energyBetter) where
//     it fits from now; a reservation is the earliest instant any eligible
//     machine fits it, on the least-energy such machine.
//   - A task that no eligible machine could ever run within its
//     organisation's limit (no machine matches it, or every one draws more
//     than Lim) never blocks the queue: it is passed over.
//   - No preemption: a reservation promises a start that preempting would
//     have to respect, and the seed's policies do not preempt.
//
// Modes:
//   - fcfs: tasks start in order while they fit; the first that does not
//     stops the pass.
//   - easy: the first task that does not fit (the head) is reserved at
//     the earliest instant it fits; every later task starts now if it fits
//     from now beside that reservation (so it never delays it); others
//     wait without a reservation.
//   - conservative: every task that does not fit now is reserved, in
//     order, at its earliest instant beside the running tasks and the
//     reservations before it; a later task starts now only if it fits
//     beside all of them, so no start delays any reservation.
//
// A head (easy) or a task (conservative) whose earliest instant is
// unbounded, because it waits for room or power held by tasks without a
// limit, stops the pass: no backfilling past it, as fcfs.
//
// Reservations are not replicated: every pass recomputes them from the
// committed state, so they survive leader changes as a deterministic
// function of the ledger. A reservation moves later only when the state
// changes under it other than by the plan (a task ending earlier than its
// limit lets an earlier task's reservation move into its slot, under
// conservative); with every task running its limit, none ever does.
type LiveBackfill struct {
	// Mode is "fcfs", "easy", "conservative" (LiveModes) or EHOSEPEasy.
	Mode string
}

// LiveReservation is a waiting task's promised start: AtMs milliseconds
// from the pass's now, on Machine (an index in State.Machines).
type LiveReservation struct {
	Task    string
	Org     int
	Machine int
	AtMs    int64
}

// LivePlan is one pass of LiveBackfill: the tasks started now (Allocate
// decisions, in order) and the reservations of waiting tasks, in order.
type LivePlan struct {
	Starts       []Decision
	Reservations []LiveReservation
}

// Unbounded is the end of a task without a wall-clock limit.
const Unbounded = int64(math.MaxInt64)

// LiveModes are the backfilling modes of the seed (fcfs, easy,
// conservative); LiveBackfill also knows EHOSEPEasy. A federation may
// vote for any of the four (JobModes, WithJobPolicy).
func LiveModes() []string { return []string{"fcfs", "easy", "conservative"} }

// JobModes are the job policies that run LiveBackfill: LiveModes and
// EHOSEPEasy.
func JobModes() []string { return append(LiveModes(), EHOSEPEasy) }

// WithJobPolicy returns the policy a pass runs under the federation's job
// policy job (ledger.JobPolicy): base with GangFirst's gang step for
// "ehosep" (or ""), base being the pass the federation's settings name
// (EHOSEP unless they name another); the live backfilling of that mode
// otherwise, which plans gangs itself. Without gangs, the first is base
// exactly.
func WithJobPolicy(base Policy, job string) (Policy, error) {
	if job == "" || job == "ehosep" {
		return GangFirst{Base: base}, nil
	}
	if !slices.Contains(JobModes(), job) {
		return nil, fmt.Errorf("job policy %q: want ehosep or one of %v", job, JobModes())
	}
	return LiveBackfill{Mode: job}, nil
}

// Name implements Policy.
func (p LiveBackfill) Name() string { return p.Mode }

// Schedule implements Policy: the plan's starts.
func (p LiveBackfill) Schedule(s *State) ([]Decision, error) {
	pl, err := p.Plan(s)
	return pl.Starts, err
}

// Plan computes one pass.
func (p LiveBackfill) Plan(s *State) (LivePlan, error) {
	if !slices.Contains(JobModes(), p.Mode) {
		return LivePlan{}, fmt.Errorf("live backfill: unknown mode %q", p.Mode)
	}
	s = withQueued(s)
	if err := Validate(s); err != nil {
		return LivePlan{}, err
	}
	b := newLivePass(s)
	var out LivePlan
	q := newLiveOrder(s, p.Mode)
	// ehosep-easy's head is fixed first: the oldest item that cannot start
	// now (stableHead); every item then only starts now, beside it.
	var head *liveItem
	if p.Mode == EHOSEPEasy {
		head = b.stableHead(s, &out)
	}
	for {
		it, more := q.next()
		if !more {
			break
		}
		if head != nil && it.id() == head.id() {
			continue
		}
		if head != nil && head.unbounded && itemBefore(*head, it) {
			continue // nothing starts past an unbounded head
		}
		elig, ok := b.feasible(it)
		if !ok {
			continue
		}
		// fcfs, and easy once its head is reserved, only ask whether an
		// item starts now: its earliest instant otherwise does not matter.
		backfill := p.Mode == EHOSEPEasy || p.Mode == "easy" && len(out.Reservations) > 0
		bound := Unbounded
		if p.Mode == "fcfs" || backfill {
			bound = 1
		}
		ms, at := b.earliestItem(it, elig, bound)
		if at == 0 {
			b.addItem(it, ms, 0)
			q.started(it, ms)
			for r, m := range ms {
				t := it.part(r)
				out.Starts = append(out.Starts, Decision{Kind: Allocate, Task: t.ID, Org: t.Org, Machine: m})
			}
			continue
		}
		if backfill {
			continue
		}
		if p.Mode == "fcfs" || at == Unbounded {
			break
		}
		b.reserve(it, ms, at, &out)
	}
	return out, nil
}

// reserve holds it on machines ms from at and records its reservations.
func (b *livePass) reserve(it liveItem, ms []int, at int64, out *LivePlan) {
	b.addItem(it, ms, at)
	for r, m := range ms {
		t := it.part(r)
		out.Reservations = append(out.Reservations, LiveReservation{Task: t.ID, Org: t.Org, Machine: m, AtMs: at})
	}
}

// stableHead is ehosep-easy's head: the oldest item, in submission order,
// that could run (feasible) but cannot start now beside the running
// tasks, reserved at its earliest instant (out.Reservations). An item
// whose earliest instant is unbounded is the head too (unbounded set),
// reserved nowhere: then only items before it in submission order start.
// The head depends on the running tasks and the queue, not on the
// organisations' order. It can move to an older item (one that could start
// in the last pass but was not served), never to a younger one while it
// waits; so once the oldest waiting item is the head it stays the head
// until it starts, and its reservation only moves earlier (every task
// running its limit): no item starves (docs/POLICY.md §8).
func (b *livePass) stableHead(s *State, out *LivePlan) *liveItem {
	for _, it := range newLiveOrder(s, "fcfs").fifo {
		elig, ok := b.feasible(it)
		if !ok {
			continue
		}
		if _, at := b.earliestItem(it, elig, 1); at == 0 {
			continue
		}
		ms, at := b.earliestItem(it, elig, Unbounded)
		if at == Unbounded {
			it.unbounded = true
			return &it
		}
		b.reserve(it, ms, at, out)
		return &it
	}
	return nil
}

// liveItem is what a pass orders: a task, or a gang (its parts, placed
// together on machines of one owner, one part each).
type liveItem struct {
	t    Task     // the task, or the gang's first part
	gang *GangJob // nil for a task
	// unbounded marks ehosep-easy's head whose earliest start is unbounded.
	unbounded bool
}

func (it liveItem) id() string {
	if it.gang != nil {
		return it.gang.ID
	}
	return it.t.ID
}

// parts is 1 for a task, k for a gang; part(r) its r-th.
func (it liveItem) parts() int {
	if it.gang != nil {
		return len(it.gang.Parts)
	}
	return 1
}

func (it liveItem) part(r int) Task {
	if it.gang != nil {
		return it.gang.Parts[r]
	}
	return it.t
}

// itemBefore is submission order: Seq, then ID.
func itemBefore(x, y liveItem) bool {
	return x.t.Seq < y.t.Seq || x.t.Seq == y.t.Seq && x.t.ID < y.t.ID
}

// addItem places it's parts on ms (one each) from at.
func (b *livePass) addItem(it liveItem, ms []int, at int64) {
	for r, m := range ms {
		b.add(it.part(r), m, at)
	}
}

// earliestItem is earliest for a task (one machine), earliestGang for a
// gang.
func (b *livePass) earliestItem(it liveItem, elig []bool, bound int64) ([]int, int64) {
	if it.gang != nil {
		return b.earliestGang(it.gang, elig, bound)
	}
	m, at := b.earliest(it.t, elig, bound)
	if m < 0 {
		return nil, at
	}
	return []int{m}, at
}

// earliestGang is the first instant before bound at which an owner has k
// eligible machines, each with room for a part for its whole length, and
// the gang's organisation stays within its limit with every part drawing
// (gangOwner's choice at that instant), and those machines; Unbounded and
// nil when there is none. Room and power only come back when a span ends,
// so the candidates are now and the ends of the eligible machines' and
// the organisation's spans.
func (b *livePass) earliestGang(g *GangJob, elig []bool, bound int64) ([]int, int64) {
	t := g.Parts[0]
	cands := []int64{0}
	if bound > 1 {
		ends := func(tl *timeline) {
			for _, sp := range tl.ends {
				cands = append(cands, sp.to)
			}
			for _, sp := range tl.later {
				cands = append(cands, sp.to)
			}
		}
		for m, ok := range elig {
			if ok {
				ends(&b.onMach[m])
			}
		}
		ends(&b.ofOrg[t.Org])
		slices.Sort(cands)
		cands = slices.Compact(cands)
	}
	for _, c := range cands {
		if c >= bound || c == Unbounded {
			break
		}
		ms := gangOwner(b.s, len(g.Parts), func(m int) bool {
			return elig[m] && !(c == 0 && b.s.held(m)) && b.roomFrom2(t, m, c)
		}, func(m int) int64 { return b.draw(t, m) }, func(ms []int) bool { return b.gangPowerFrom(g, ms, c) })
		if ms != nil {
			return ms, c
		}
	}
	return nil, Unbounded
}

// roomFrom2 says t's request fits on m over [c, c+length), power aside.
func (b *livePass) roomFrom2(t Task, m int, c int64) bool {
	end := endOf(c, b.limitOn(t, m))
	capa, req := b.s.Machines[m].Capacity.Capacity(), t.Request.Request()
	mach := &b.onMach[m]
	fits := func(x int64) bool {
		used, _ := mach.at(x)
		return fitsIn(req, capa.minus(used), capa)
	}
	if !fits(c) {
		return false
	}
	for _, sp := range mach.later {
		if sp.from > c && sp.from < end && !fits(sp.from) {
			return false
		}
	}
	return true
}

// gangPowerFrom says the gang's organisation stays within its limit with
// part r on ms[r] from c, each for its length: checked at c and wherever
// one of the organisation's reservations starts inside the window.
func (b *livePass) gangPowerFrom(g *GangJob, ms []int, c int64) bool {
	org := &b.ofOrg[g.Parts[0].Org]
	lim := b.s.Orgs[g.Parts[0].Org].LimitMilliW
	last := c
	ends := make([]int64, len(ms))
	for r, m := range ms {
		ends[r] = endOf(c, b.limitOn(g.Parts[r], m))
		last = max(last, ends[r])
	}
	check := func(x int64) bool {
		_, pi := org.at(x)
		for r, m := range ms {
			if x < ends[r] {
				pi += b.draw(g.Parts[r], m)
			}
		}
		return pi <= lim
	}
	if !check(c) {
		return false
	}
	for _, sp := range org.later {
		if sp.from > c && sp.from < last && !check(sp.from) {
			return false
		}
	}
	return true
}

// span is a task's hold on a machine's room and its organisation's power
// over [from, to) ms from now.
type span struct {
	from, to int64
	req      Resources
	draw     int64
}

// timeline is the spans on one machine or of one organisation, as a step
// function of the room and power they hold. The spans from now (running
// tasks and tasks started in the pass) are kept sorted by end with prefix
// sums, so what they hold at an instant is one binary search; the
// reservations (spans from a later instant) are few and scanned.
type timeline struct {
	nowReq  Resources
	nowDraw int64
	ends    []span // spans from now, by end
	goneReq []Resources
	gone    []int64 // goneReq[i], gone[i]: held by ends[:i]
	later   []span
	// peak bounds the power held at any instant: the draw of every span.
	peak int64
}

func (tl *timeline) insert(sp span) {
	tl.peak += sp.draw
	if sp.from > 0 {
		tl.later = append(tl.later, sp)
		return
	}
	tl.nowReq, tl.nowDraw = tl.nowReq.plus(sp.req), tl.nowDraw+sp.draw
	tl.ends = slices.Insert(tl.ends, tl.endedBy(sp.to), sp)
	tl.sums()
}

// build makes the timeline of the running tasks' spans (all from now) in
// one sort, not one insertion each.
func (tl *timeline) build(sps []span) {
	tl.ends = sps
	slices.SortStableFunc(tl.ends, func(x, y span) int { return cmp.Compare(x.to, y.to) })
	for _, sp := range sps {
		tl.peak += sp.draw
		tl.nowReq, tl.nowDraw = tl.nowReq.plus(sp.req), tl.nowDraw+sp.draw
	}
	tl.sums()
}

// sums recomputes the prefix sums of ends.
func (tl *timeline) sums() {
	tl.goneReq = append(tl.goneReq[:0], Resources{})
	tl.gone = append(tl.gone[:0], 0)
	for k, e := range tl.ends {
		tl.goneReq = append(tl.goneReq, tl.goneReq[k].plus(e.req))
		tl.gone = append(tl.gone, tl.gone[k]+e.draw)
	}
}

// endedBy is how many spans from now end by x (to ≤ x): they come first.
func (tl *timeline) endedBy(x int64) int {
	return sort.Search(len(tl.ends), func(k int) bool { return tl.ends[k].to > x })
}

// at is the room and power the spans hold at instant x ≥ 0.
func (tl *timeline) at(x int64) (Resources, int64) {
	i := tl.endedBy(x)
	var req Resources
	var draw int64
	if len(tl.gone) > 0 {
		req, draw = tl.nowReq.minus(tl.goneReq[i]), tl.nowDraw-tl.gone[i]
	}
	for _, sp := range tl.later {
		if sp.from <= x && x < sp.to {
			req, draw = req.plus(sp.req), draw+sp.draw
		}
	}
	return req, draw
}

// livePass is a plan's working state: per machine and per organisation,
// the timeline of the tasks running, started and reserved.
type livePass struct {
	s      *State
	onMach []timeline
	ofOrg  []timeline
	energy []int   // machines in energyBetter order
	cands  []int64 // earliestOn's buffer
}

func newLivePass(s *State) *livePass {
	b := &livePass{s: s, onMach: make([]timeline, len(s.Machines)), ofOrg: make([]timeline, len(s.Orgs))}
	onMach, ofOrg := make([][]span, len(s.Machines)), make([][]span, len(s.Orgs))
	for _, r := range s.Running {
		runMs := int64(math.Round(r.RunSeconds * 1000))
		end := Unbounded
		if l := b.limitOn(r.Task, r.Machine); l > 0 {
			end = max(1, l-runMs)
		}
		sp := span{from: 0, to: end, req: r.Task.Request.Request(), draw: b.draw(r.Task, r.Machine)}
		onMach[r.Machine] = append(onMach[r.Machine], sp)
		ofOrg[r.Task.Org] = append(ofOrg[r.Task.Org], sp)
	}
	for m := range onMach {
		b.onMach[m].build(onMach[m])
	}
	for o := range ofOrg {
		b.ofOrg[o].build(ofOrg[o])
	}
	b.energy = make([]int, len(s.Machines))
	for m := range b.energy {
		b.energy[m] = m
	}
	slices.SortFunc(b.energy, func(x, y int) int {
		if energyBefore(&s.Machines[x], &s.Machines[y]) {
			return -1
		}
		return 1
	})
	return b
}

// EHOSEPEasy is the composition of EHOSEP's organisation order with
// EASY's reservation (docs/POLICY.md §8): the next task is the first, in
// EHOSEP's task order (smallest first), of the organisation with the
// smallest DP (ties as EHOSEP's), recomputed after every start; the first
// that cannot start is the head, reserved as under easy. A federation may
// vote it (ledger/jobpolicy.go, command version 3).
const EHOSEPEasy = "ehosep-easy"

// liveOrder hands out the waiting items (tasks and gangs) in the mode's
// order: submission order, or for EHOSEPEasy the organisations' queues by
// DP, each queue in EHOSEP's task order (a gang by its first part).
type liveOrder struct {
	s     *State
	fifo  []liveItem
	byOrg [][]liveItem
	tot   Totals
	alloc []int64
}

func newLiveOrder(s *State, mode string) *liveOrder {
	o := &liveOrder{s: s}
	items := make([]liveItem, 0, len(s.Queued)+len(s.Gangs))
	for _, t := range s.Queued {
		items = append(items, liveItem{t: t})
	}
	for i := range s.Gangs {
		items = append(items, liveItem{t: s.Gangs[i].Parts[0], gang: &s.Gangs[i]})
	}
	if mode != EHOSEPEasy {
		o.fifo = items
		slices.SortFunc(o.fifo, func(x, y liveItem) int {
			if c := cmp.Compare(x.t.Seq, y.t.Seq); c != 0 {
				return c
			}
			return cmp.Compare(x.t.ID, y.t.ID)
		})
		return o
	}
	o.tot, o.alloc = ComputeTotals(s), ComputeUsage(s).AllocatedMFLOPS
	o.byOrg = make([][]liveItem, len(s.Orgs))
	for _, it := range items {
		o.byOrg[it.t.Org] = append(o.byOrg[it.t.Org], it)
	}
	for i := range o.byOrg {
		slices.SortFunc(o.byOrg[i], func(x, y liveItem) int {
			if taskBefore(&x.t, &y.t, false) {
				return -1
			}
			return 1
		})
	}
	return o
}

func (o *liveOrder) next() (liveItem, bool) {
	if o.byOrg == nil {
		if len(o.fifo) == 0 {
			return liveItem{}, false
		}
		it := o.fifo[0]
		o.fifo = o.fifo[1:]
		return it, true
	}
	best := -1
	for i, q := range o.byOrg {
		if len(q) > 0 && (best < 0 || o.before(i, best)) {
			best = i
		}
	}
	if best < 0 {
		return liveItem{}, false
	}
	it := o.byOrg[best][0]
	o.byOrg[best] = o.byOrg[best][1:]
	return it, true
}

// before is EHOSEP's organisation order (orgBefore) on the pass's DP.
func (o *liveOrder) before(a, b int) bool {
	return orgBefore(DP(o.alloc[a], o.tot.QuotaMFLOPS[a]), DP(o.alloc[b], o.tot.QuotaMFLOPS[b]),
		o.tot.QuotaMFLOPS[a], o.tot.QuotaMFLOPS[b], o.tot.PowerQuotaMilliW[a], o.tot.PowerQuotaMilliW[b],
		o.s.Orgs[a].Name, o.s.Orgs[b].Name)
}

// started counts it, started on ms, in its organisation's allocation.
func (o *liveOrder) started(it liveItem, ms []int) {
	if o.alloc == nil {
		return
	}
	for r, m := range ms {
		t, mc := it.part(r), o.s.Machines[m]
		o.alloc[t.Org] += ShareOf(mc.Capacity, t.Request).Of(mc.MFLOPS)
	}
}

func (b *livePass) draw(t Task, m int) int64 {
	mc := b.s.Machines[m]
	return ShareOf(mc.Capacity, t.Request).Of(mc.BusyMilliW)
}

func (b *livePass) hold(t Task, m int, from, to int64) {
	sp := span{from: from, to: to, req: t.Request.Request(), draw: b.draw(t, m)}
	b.onMach[m].insert(sp)
	b.ofOrg[t.Org].insert(sp)
}

// add places t on m from at (0: now) for its length.
func (b *livePass) add(t Task, m int, at int64) { b.hold(t, m, at, endOf(at, b.limitOn(t, m))) }

// limitOn is t's planned length on machine m: its own wall-clock limit,
// else the cap of m's owner (the executor cuts a run there), else none
// (0: it never ends).
func (b *livePass) limitOn(t Task, m int) int64 {
	if t.WallLimitMs > 0 {
		return t.WallLimitMs
	}
	if p := b.s.Machines[m].Policy; p != nil {
		return p.MaxWallMs
	}
	return 0
}

// endOf is the end of a task of limit limitMs started at at.
func endOf(at, limitMs int64) int64 {
	if limitMs <= 0 || at > Unbounded-limitMs {
		return Unbounded
	}
	return at + limitMs
}

// feasible lists the machines the item's parts may use (Eligible; for a
// gang, eligible for every part) and says whether they could ever run it
// within its organisation's limit: a task, one machine drawing within it;
// a gang, one owner with k of them whose k least draws sum within it.
func (b *livePass) feasible(it liveItem) ([]bool, bool) {
	t := it.t
	lim := b.s.Orgs[t.Org].LimitMilliW
	if it.gang != nil {
		elig := gangEligible(b.s, it.gang)
		return elig, gangOwner(b.s, len(it.gang.Parts), func(m int) bool { return elig[m] },
			func(m int) int64 { return b.draw(t, m) }, func(ms []int) bool {
				var d int64
				for _, m := range ms {
					d += b.draw(t, m)
				}
				return d <= lim
			}) != nil
	}
	elig := Eligible(b.s.Machines, t, b.s.Orgs)
	for m, ok := range elig {
		if ok && b.draw(t, m) <= lim {
			return elig, true
		}
	}
	return elig, false
}

// earliest is the first instant before bound that t fits on an eligible
// machine and that machine, the least-energy one among those fitting
// first (Unbounded and -1 when none does). Only now may start a task on a
// held machine.
func (b *livePass) earliest(t Task, elig []bool, bound int64) (int, int64) {
	best, at := -1, Unbounded
	for _, m := range b.energy {
		if !elig[m] {
			continue
		}
		if b.roomFrom(t, m) >= min(at, bound) {
			continue // it cannot do better than the best so far
		}
		if c := b.earliestOn(t, m, min(at, bound)); c < at {
			best, at = m, c
			if at == 0 {
				break
			}
		}
	}
	return best, at
}

// roomFrom is a lower bound of earliestOn: the first instant the spans
// from now leave room for t on m, reservations and power aside (they only
// take more). Those spans only end, so it is a binary search.
func (b *livePass) roomFrom(t Task, m int) int64 {
	tl := &b.onMach[m]
	capa, req := b.s.Machines[m].Capacity.Capacity(), t.Request.Request()
	fitsAfter := func(i int) bool { // once ends[:i] are gone
		used := tl.nowReq
		if len(tl.goneReq) > 0 {
			used = used.minus(tl.goneReq[i])
		}
		return fitsIn(req, capa.minus(used), capa)
	}
	i := sort.Search(len(tl.ends)+1, fitsAfter)
	switch {
	case i == 0:
		return 0
	case i > len(tl.ends):
		return Unbounded
	}
	return tl.ends[i-1].to
}

// earliestOn is the first instant before bound that t fits on machine m
// for its whole length (Unbounded when none). Room and power only come
// back when a span ends, so the candidates are now and the ends of m's
// and the organisation's spans.
func (b *livePass) earliestOn(t Task, m int, bound int64) int64 {
	cands := b.cands[:0]
	if !b.s.held(m) {
		cands = append(cands, 0)
	}
	tls := []*timeline{&b.onMach[m], &b.ofOrg[t.Org]}
	if b.powerFree(t, m) {
		// Only the machine's room ever stops t: its spans' ends suffice.
		tls = tls[:1]
	}
	if bound > 1 {
		for _, tl := range tls {
			// Sorted by end: those before bound are a prefix.
			for _, sp := range tl.ends[:tl.endedBy(bound-1)] {
				cands = append(cands, sp.to)
			}
			for _, sp := range tl.later {
				if sp.to < bound {
					cands = append(cands, sp.to)
				}
			}
		}
		slices.Sort(cands)
		cands = slices.Compact(cands)
	}
	b.cands = cands
	for _, c := range cands {
		if c >= bound || c == Unbounded {
			break
		}
		if b.fitsFrom(t, m, c) {
			return c
		}
	}
	return Unbounded
}

// powerFree says t's organisation stays within its limit with t on m
// whatever runs when: every span of it together leaves room for t's draw
// (the common case: a limit that does not bind).
func (b *livePass) powerFree(t Task, m int) bool {
	return b.ofOrg[t.Org].peak+b.draw(t, m) <= b.s.Orgs[t.Org].LimitMilliW
}

// fitsFrom says t fits on m over [c, c+length): room and power are checked
// at c and wherever a reservation starts inside the window (the spans from
// now only end, so usage rises nowhere else).
func (b *livePass) fitsFrom(t Task, m int, c int64) bool {
	end := endOf(c, b.limitOn(t, m))
	capa := b.s.Machines[m].Capacity.Capacity()
	req, draw := t.Request.Request(), b.draw(t, m)
	lim := b.s.Orgs[t.Org].LimitMilliW
	mach, org := &b.onMach[m], &b.ofOrg[t.Org]
	tls := []*timeline{mach, org}
	if b.powerFree(t, m) {
		tls = tls[:1]
	}
	check := func(x int64) bool {
		used, _ := mach.at(x)
		if !fitsIn(req, capa.minus(used), capa) {
			return false
		}
		if len(tls) == 1 {
			return true
		}
		_, pi := org.at(x)
		return pi+draw <= lim
	}
	if !check(c) {
		return false
	}
	for _, tl := range tls {
		for _, sp := range tl.later {
			if sp.from > c && sp.from < end && !check(sp.from) {
				return false
			}
		}
	}
	return true
}

// PendingJobPolicy is the pending reason of a task that a machine has room
// for, within its organisation's limit, under a backfilling job policy: it
// starts only when that delays no task submitted before it (stable, like
// the codes of pending.go).
const PendingJobPolicy = "job_policy"

// PendingUnder adjusts Pending's reasons rs (in place, and returned) to
// the federation's job policy job: under ehosep they are EHOSEP's; under
// fcfs, easy and conservative a task a machine has room for waits its
// turn (PendingJobPolicy) rather than for the next pass, and no task
// waits for a preemption (fair_share becomes no_free_resources); so under
// ehosep-easy.
func PendingUnder(job string, rs map[string]PendingReason) map[string]PendingReason {
	if !slices.Contains(JobModes(), job) {
		return rs
	}
	for id, r := range rs {
		switch r.Code {
		case PendingNextPass:
			rs[id] = PendingReason{PendingJobPolicy, "a machine has room for it; under job policy " + job +
				" it starts only when that delays no task submitted before it (a reservation)"}
		case PendingFairShare:
			rs[id] = PendingReason{PendingNoResources, "no free resources on the machines it may use; job policy " + job + " does not preempt"}
		}
	}
	return rs
}
