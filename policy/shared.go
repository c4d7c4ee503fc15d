package policy

import (
	"fmt"
	"sort"
)

// sharedPass is EHOSEP (seed 000 algorithms 3-5) on machines that tasks
// share and that not every task may use (docs/POLICY.md, "Shared
// machines"). It answers every question by a scan, like the reference, and
// generalises the papers' steps:
//
//   - line 8 (algorithm 4): the organisation's first waiting task, in queue
//     order, that matches some machine with room for it within the
//     organisation's remaining power goes to the least-energy such machine;
//     a task that fits nowhere does not block the ones behind it;
//   - algorithm 5: the victim is a running task of the victim organisation
//     whose machine matches the beneficiary and would have room for it once
//     the victim stops: least waste, then least computing power counted,
//     then machine and task ID;
//   - a task counts share·d in Allocated and share·c in PI (Share).
//
// On a one-slot state (State.OneSlot) every task matches every machine and
// each takes a whole one, and these steps are exactly the indexed EHOSEP's
// (TestSharedPassDecidesAsIndexedOnOneSlot).
type sharedPass struct {
	s       *State
	tot     Totals
	bestFit bool
	alloc   []int64
	pi      []int64
	queue   [][]Task // per organisation, in taskBefore order
	capa    []Resources
	free    []Resources
	runs    [][]sharedRun // per machine
	// match caches, per task shape (shapeKey), the machines it matches;
	// shapes caches each task's key. Tasks of one job usually share one
	// shape, so a full federation with a long queue is scanned once per
	// shape, not once per task.
	match  map[string][]bool
	shapes map[string]string
	// byRoom finds machines with room by their free resources (algorithm
	// 4 without a scan); few holds, per shape that few machines may run,
	// those machines in energy order, scanned instead (fewMachines).
	byRoom *freeIndex
	few    map[string][]int
	// noFree holds the shapes that found no machine with room within their
	// organisation's limit. Within a pass room and remaining power only
	// shrink, except when a preemption gives some back, which clears it.
	noFree map[string]bool
	// stuck marks the organisations every waiting task of which has its
	// shape in noFree, so that line 8 does not go through their queues
	// again at every decision; cleared with noFree (a preemption, which
	// is also the only way a queue gains a task within a pass).
	stuck []bool
	// noVictim holds, per victim organisation, the shapes for which none
	// of its running tasks would make room. Valid until that organisation
	// gets a new running task (a new candidate) or a preemption frees room.
	noVictim map[int]map[string]bool
	out      []Decision
}

// sharedRun is a task running on a machine and what it counts for.
type sharedRun struct {
	task   Task
	mflops int64 // share·d: its part of Allocated
	milliW int64 // share·c: its part of PI
	waste  float64
	exec   float64
}

func newSharedPass(s *State, bestFit bool) *sharedPass {
	n := len(s.Orgs)
	p := &sharedPass{
		s: s, bestFit: bestFit,
		alloc: make([]int64, n), pi: make([]int64, n), queue: make([][]Task, n),
		capa: make([]Resources, len(s.Machines)), free: make([]Resources, len(s.Machines)),
		runs: make([][]sharedRun, len(s.Machines)), match: map[string][]bool{}, few: map[string][]int{}, shapes: map[string]string{}, noFree: map[string]bool{}, stuck: make([]bool, n), noVictim: map[int]map[string]bool{},
	}
	if f := s.federation(); f != nil {
		p.tot = f.tot
	} else {
		p.tot = ComputeTotals(s)
	}
	for m, mc := range s.Machines {
		p.capa[m] = mc.Capacity.Capacity()
		p.free[m] = p.capa[m]
	}
	p.byRoom = newFreeIndex(s.Machines, p.free, p.capa)
	for _, t := range s.Queued {
		p.queue[t.Org] = append(p.queue[t.Org], t)
	}
	for i := range p.queue {
		q := p.queue[i]
		sort.Slice(q, func(a, b int) bool { return taskBefore(&q[a], &q[b], bestFit) })
	}
	for _, r := range s.Running {
		sr := p.newRun(r.Task, r.Machine)
		d := sr.mflops
		sr.waste, sr.exec = Waste(r, d, s.CheckpointBlockSeconds), Executed(r, d)
		p.add(sr, r.Machine)
	}
	return p
}

func (p *sharedPass) newRun(t Task, m int) sharedRun {
	mc := p.s.Machines[m]
	sh := ShareOf(mc.Capacity, t.Request)
	return sharedRun{task: t, mflops: sh.Of(mc.MFLOPS), milliW: sh.Of(mc.BusyMilliW)}
}

func (p *sharedPass) add(r sharedRun, m int) {
	delete(p.noVictim, r.task.Org)
	p.runs[m] = append(p.runs[m], r)
	p.free[m] = p.free[m].minus(r.task.Request.Request())
	p.byRoom.set(m, p.free[m], p.capa[m])
	p.alloc[r.task.Org] += r.mflops
	p.pi[r.task.Org] += r.milliW
}

func (p *sharedPass) remove(m, k int) sharedRun {
	r := p.runs[m][k]
	p.runs[m] = append(p.runs[m][:k:k], p.runs[m][k+1:]...)
	p.free[m] = p.free[m].plus(r.task.Request.Request())
	p.byRoom.set(m, p.free[m], p.capa[m])
	p.alloc[r.task.Org] -= r.mflops
	p.pi[r.task.Org] -= r.milliW
	return r
}

// shapeKey is what decides where a task may run and how much room and
// power it takes there: two tasks of one key are interchangeable for
// bestFree and bestVictim.
func (p *sharedPass) shapeKey(t Task) string {
	k, ok := p.shapes[t.ID]
	if !ok {
		k = fmt.Sprintf("%d|%d|%d|%d|%d|%q|%q|%q", t.Org, t.Request.CPUs, t.Request.MemoryBytes, t.Request.GPUs, t.WallLimitMs, t.Executable, t.Requirements, t.Avoid)
		p.shapes[t.ID] = k
	}
	return k
}

// matches says task t may ever run on machine m (owner policy, attributes,
// capacity, avoided machines: Eligible), cached per shape for the pass.
func (p *sharedPass) matches(t Task, m int) bool { return p.eligible(t)[m] }

// eligible is Eligible for t, machine by machine, less the held machines,
// cached per shape.
func (p *sharedPass) eligible(t Task) []bool {
	k := p.shapeKey(t)
	ok, seen := p.match[k]
	if !seen {
		ok = Eligible(p.s.Machines, t, p.s.Orgs)
		// A held machine (State.Held) is neither free nor a victim in
		// this pass: no task may use it, whatever it matches. Its running
		// tasks still count (newSharedPass adds them all).
		for m := range ok {
			ok[m] = ok[m] && !p.s.held(m)
		}
		p.match[k] = ok
	}
	return ok
}

func (p *sharedPass) dp(i int) float64 { return DP(p.alloc[i], p.tot.QuotaMFLOPS[i]) }

func (p *sharedPass) limit() int {
	return 4*(len(p.s.Queued)+len(p.s.Running)+len(p.s.Machines)) + 16
}

func (p *sharedPass) run() ([]Decision, error) {
	for n := 0; ; n++ {
		if n > p.limit() {
			return nil, fmt.Errorf("ehosep: no quiescence after %d services (a bug: the pass must terminate)", n)
		}
		if !p.serveOne() {
			return p.out, nil
		}
	}
}

// serveOne is one iteration of algorithm 3's outer loop.
func (p *sharedPass) serveOne() bool {
	s := p.s
	order := make([]int, len(s.Orgs))
	dp := make([]float64, len(s.Orgs))
	for i := range order {
		order[i], dp[i] = i, p.dp(i)
	}
	tot := p.tot
	sort.Slice(order, func(a, b int) bool {
		x, y := order[a], order[b]
		return orgBefore(dp[x], dp[y], tot.QuotaMFLOPS[x], tot.QuotaMFLOPS[y],
			tot.PowerQuotaMilliW[x], tot.PowerQuotaMilliW[y], s.Orgs[x].Name, s.Orgs[y].Name)
	})
	for _, i := range order {
		lim := s.Orgs[i].LimitMilliW
		if p.pi[i] >= lim || len(p.queue[i]) == 0 { // line 7
			continue
		}
		bound := lim - p.pi[i]
		for k, t := range p.queue[i] { // line 8
			if p.stuck[i] {
				break
			}
			key := p.shapeKey(t)
			if p.noFree[key] {
				continue
			}
			if m := p.bestFree(t, bound); m >= 0 {
				m = deadlinePlace(s, &t, m, p.freeFor(t, bound)) // deadline_place.go
				p.place(i, k, m)
				p.out = append(p.out, Decision{Kind: Allocate, Task: t.ID, Org: i, Machine: m})
				return true
			}
			p.noFree[key] = true
		}
		p.stuck[i] = true
		if !(dp[i] < 0) { // algorithm 5, line 1
			continue
		}
		z := p.victimOrg(dp)
		if z < 0 {
			continue
		}
		if p.noVictim[z] == nil {
			p.noVictim[z] = map[string]bool{}
		}
		failed := p.noVictim[z]
		for k, t := range p.queue[i] {
			key := p.shapeKey(t)
			if failed[key] {
				continue
			}
			m, v := p.bestVictim(t, z, bound)
			if m < 0 {
				failed[key] = true
				continue
			}
			// Line 6, with the victim's part of Allocated.
			if PREPreempt(p.alloc[z], tot.QuotaMFLOPS[z], p.runs[m][v].mflops) >= 0 || lim < s.Orgs[z].LimitMilliW {
				p.preempt(i, k, m, v, z)
				return true
			}
			break // faithful to the paper: one victim is tried
		}
	}
	return false
}

// bestFree is the least-energy machine matching t with room for it whose
// share of draw fits bound, or -1. A task's energy on a machine is
// size/(share·d)·(share·c) = size·c/d whatever its share, so the order is
// the papers' (energyBetter): the first machine in that order with room
// (freeIndex) that t matches and whose draw fits. A shape that few
// machines may run scans those instead.
func (p *sharedPass) bestFree(t Task, bound int64) int {
	req := t.Request.Request()
	ok := p.fitsBound(t, bound)
	if few, isFew := p.fewMachines(t); isFew {
		for _, m := range few {
			if fitsIn(req, p.free[m], p.capa[m]) && ok(m) {
				return m
			}
		}
		return -1
	}
	for from := 0; ; from++ {
		m, at := p.byRoom.first(req, from)
		if m < 0 || ok(m) {
			return m
		}
		from = at
	}
}

// fitsBound says t matches machine m and its share of m's draw fits bound.
func (p *sharedPass) fitsBound(t Task, bound int64) func(m int) bool {
	elig := p.eligible(t)
	return func(m int) bool {
		return elig[m] && ShareOf(p.s.Machines[m].Capacity, t.Request).Of(p.s.Machines[m].BusyMilliW) <= bound
	}
}

// freeFor says machine m has room for t now and fitsBound.
func (p *sharedPass) freeFor(t Task, bound int64) func(m int) bool {
	req, ok := t.Request.Request(), p.fitsBound(t, bound)
	return func(m int) bool { return fitsIn(req, p.free[m], p.capa[m]) && ok(m) }
}

// fewMachines lists, in energy order, the machines t may run on when they
// are few (at most fewLimit): then scanning them is cheaper than skipping
// through the index past free machines t may not use.
func (p *sharedPass) fewMachines(t Task) ([]int, bool) {
	const fewLimit = 32
	k := p.shapeKey(t)
	few, seen := p.few[k]
	if !seen {
		elig := p.eligible(t)
		n := 0
		for _, ok := range elig {
			if ok {
				n++
			}
		}
		if n <= fewLimit {
			few = make([]int, 0, n)
			for _, m := range p.byRoom.order {
				if elig[m] {
					few = append(few, m)
				}
			}
		}
		p.few[k] = few
	}
	return few, few != nil
}

// victimOrg is algorithm 5 line 3 (as chooseVictimOrg).
func (p *sharedPass) victimOrg(dp []float64) int {
	best, bestKey := -1, 0.0
	for z := range p.s.Orgs {
		if !(dp[z] > 0) {
			continue
		}
		key := CSQ(p.tot.PowerQuotaMilliW[z], p.tot.PowerSystemMilliW, p.tot.ComputeSystemMFLOPS, p.tot.QuotaMFLOPS[z]) * float64(p.pi[z])
		if best < 0 || victimOrgBefore(key, bestKey, p.alloc[z]-p.tot.QuotaMFLOPS[z], p.alloc[best]-p.tot.QuotaMFLOPS[best], p.s.Orgs[z].Name, p.s.Orgs[best].Name) {
			best, bestKey = z, key
		}
	}
	return best
}

// bestVictim is the running task of organisation z whose stopping makes
// room for t on a machine t matches, within bound: machine index and run
// index, or -1.
func (p *sharedPass) bestVictim(t Task, z int, bound int64) (int, int) {
	bm, bv := -1, -1
	req := t.Request.Request()
	elig := p.eligible(t)
	for m, mc := range p.s.Machines {
		if len(p.runs[m]) == 0 || !elig[m] || ShareOf(mc.Capacity, t.Request).Of(mc.BusyMilliW) > bound {
			continue
		}
		for v, r := range p.runs[m] {
			if r.task.Org != z || !fitsIn(req, p.free[m].plus(r.task.Request.Request()), p.capa[m]) {
				continue
			}
			if bm < 0 || p.victimBefore(m, v, bm, bv) {
				bm, bv = m, v
			}
		}
	}
	return bm, bv
}

// victimBefore: least waste; ties smaller counted computing power, then
// machine ID, then task ID (victimBetter with shares).
func (p *sharedPass) victimBefore(m, v, bm, bv int) bool {
	a, b := p.runs[m][v], p.runs[bm][bv]
	if a.waste != b.waste {
		return a.waste < b.waste
	}
	if a.mflops != b.mflops {
		return a.mflops < b.mflops
	}
	if ida, idb := p.s.Machines[m].ID, p.s.Machines[bm].ID; ida != idb {
		return ida < idb
	}
	return a.task.ID < b.task.ID
}

// place runs organisation i's k-th waiting task on machine m.
func (p *sharedPass) place(i, k, m int) {
	t := p.queue[i][k]
	p.queue[i] = append(p.queue[i][:k:k], p.queue[i][k+1:]...)
	p.add(p.newRun(t, m), m)
}

func (p *sharedPass) preempt(i, k, m, v, z int) {
	victim := p.remove(m, v)
	clear(p.noFree)
	clear(p.stuck)
	clear(p.noVictim)
	waste, kept := victim.waste, victim.exec-victim.waste
	requeued := victim.task
	requeued.SizeMFlop = remainingAfter(victim.task.SizeMFlop, kept)
	q := p.queue[z]
	at := sort.Search(len(q), func(j int) bool { return taskBefore(&requeued, &q[j], p.bestFit) })
	p.queue[z] = append(q[:at:at], append([]Task{requeued}, q[at:]...)...)
	t := p.queue[i][k]
	p.place(i, k, m)
	p.out = append(p.out, Decision{
		Kind: Preempt, Task: t.ID, Org: i, Machine: m,
		Victim: victim.task.ID, VictimOrg: z, VictimWasteMFlop: waste, VictimKeptMFlop: kept,
	})
}
