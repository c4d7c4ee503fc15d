package policy

import "fmt"

// plainPass is the straightforward working state used by HOSEP and OSEP and
// by the reference EHOSEP in the tests: every question is answered by a scan.
// It is O(machines) per decision, fine for the papers' 12- and 64-machine
// grids.
type plainPass struct {
	s       *State
	tot     Totals
	alloc   []int64
	pi      []int64
	queue   []taskHeap
	running []Task
	busy    []bool
	waste   []float64
	exec    []float64
	out     []Decision
}

func newPlainPass(s *State, bestFit bool) *plainPass {
	n := len(s.Orgs)
	p := &plainPass{
		s: s, tot: ComputeTotals(s),
		alloc: make([]int64, n), pi: make([]int64, n), queue: make([]taskHeap, n),
		running: make([]Task, len(s.Machines)), busy: make([]bool, len(s.Machines)),
		waste: make([]float64, len(s.Machines)), exec: make([]float64, len(s.Machines)),
	}
	for i := range p.queue {
		p.queue[i].bestFit = bestFit
	}
	fillQueues(p.queue, s.Queued)
	for _, r := range s.Running {
		m := s.Machines[r.Machine]
		p.busy[r.Machine] = true
		p.running[r.Machine] = r.Task
		p.waste[r.Machine] = Waste(r, m.MFLOPS, s.CheckpointBlockSeconds)
		p.exec[r.Machine] = Executed(r, m.MFLOPS)
		p.alloc[r.Task.Org] += m.MFLOPS
		p.pi[r.Task.Org] += m.BusyMilliW
	}
	return p
}

func (p *plainPass) dp(i int) float64 { return DP(p.alloc[i], p.tot.QuotaMFLOPS[i]) }

func (p *plainPass) limit() int { return 4*(len(p.s.Queued)+len(p.s.Running)+len(p.s.Machines)) + 16 }

func (p *plainPass) allocate(i, m int) {
	t := p.queue[i].pop()
	p.place(t, m)
	p.out = append(p.out, Decision{Kind: Allocate, Task: t.ID, Org: i, Machine: m})
}

func (p *plainPass) place(t Task, m int) {
	mc := p.s.Machines[m]
	p.busy[m], p.running[m], p.waste[m], p.exec[m] = true, t, 0, 0
	p.alloc[t.Org] += mc.MFLOPS
	p.pi[t.Org] += mc.BusyMilliW
}

// preemptFor stops the task on machine m and gives m to organisation i's
// first waiting task.
func (p *plainPass) preemptFor(i, m int) {
	mc := p.s.Machines[m]
	victim := p.running[m]
	z := victim.Org
	waste, kept := p.waste[m], p.exec[m]-p.waste[m]
	p.busy[m] = false
	p.alloc[z] -= mc.MFLOPS
	p.pi[z] -= mc.BusyMilliW
	requeued := victim
	requeued.SizeMFlop = remainingAfter(victim.SizeMFlop, kept)
	p.queue[z].push(requeued)
	t := p.queue[i].pop()
	p.place(t, m)
	p.out = append(p.out, Decision{
		Kind: Preempt, Task: t.ID, Org: i, Machine: m,
		Victim: victim.ID, VictimOrg: z, VictimWasteMFlop: waste, VictimKeptMFlop: kept,
	})
}

func (p *plainPass) orgBefore(a, b int) bool {
	return orgBefore(p.dp(a), p.dp(b), p.tot.QuotaMFLOPS[a], p.tot.QuotaMFLOPS[b],
		p.tot.PowerQuotaMilliW[a], p.tot.PowerQuotaMilliW[b], p.s.Orgs[a].Name, p.s.Orgs[b].Name)
}

// HOSEP is the heterogeneous OSEP of seed 001 (fig. 2) and seed 000
// algorithm 1 (L489-514), without power limits. It serves only the
// organisation with the lowest DP among those with waiting work, and stops
// when that one cannot be served.
//
// The zero value follows the published pseudocode. The two options follow
// the author's iSPD code instead (gspd-unesp/ispd at 196cdf6,
// src/ispd/externo/HOSEP.java), where it differs; the simulator's iSPD
// engine sets both (docs/REPRODUCTION.md):
//
//   - StrictExcess: the preemption test's second clause is PRE_Preemp > 0
//     (HOSEP.java L173: "penalidaUserEscravoPosterior > 0"), not ≥ 0.
//   - NextOrg: when the organisation with the lowest DP can be served
//     neither by a free machine nor by preemption, try the next one in DP
//     order (HOSEP.java L237-288: escalonar's loop goes on when buscarRecurso
//     returns -1) instead of ending the pass.
type HOSEP struct {
	StrictExcess bool
	NextOrg      bool
}

// Name implements Policy.
func (HOSEP) Name() string { return "hosep" }

// Schedule implements Policy.
func (h HOSEP) Schedule(s *State) ([]Decision, error) {
	s = withQueued(s)
	if err := Validate(s); err != nil {
		return nil, err
	}
	if !s.OneSlot() {
		return nil, errNotOneSlot("hosep")
	}
	p := newPlainPass(s, false)
	for n := 0; ; n++ {
		if n > p.limit() {
			return nil, fmt.Errorf("hosep: no quiescence after %d services", n)
		}
		// Line 2: the organisations with waiting work, lowest DP first. The
		// published algorithm tries only the first; NextOrg tries them all.
		served := false
		for _, i := range p.waitingByDP() {
			if p.serveHOSEP(i, h) {
				served = true
				break
			}
			if !h.NextOrg {
				break
			}
		}
		if !served {
			return p.out, nil
		}
	}
}

// waitingByDP lists the organisations with waiting work in DP order
// (orgBefore).
func (p *plainPass) waitingByDP() []int {
	var os []int
	for o := range p.s.Orgs {
		if len(p.queue[o].items) > 0 {
			os = append(os, o)
		}
	}
	for a := 1; a < len(os); a++ {
		for b := a; b > 0 && p.orgBefore(os[b], os[b-1]); b-- {
			os[b], os[b-1] = os[b-1], os[b]
		}
	}
	return os
}

// serveHOSEP serves organisation i once (lines 3-13) and says whether it
// could.
func (p *plainPass) serveHOSEP(i int, h HOSEP) bool {
	s := p.s
	// Lines 3-6: the free machine with the highest computing power.
	best := -1
	for m, mc := range s.Machines {
		if !p.busy[m] && !s.held(m) && (best < 0 || fasterMachine(mc, s.Machines[best])) {
			best = m
		}
	}
	if best >= 0 {
		p.allocate(i, best)
		return true
	}
	// Lines 8-13: preempt from the organisation with the highest DP.
	if !(p.dp(i) < 0) {
		return false
	}
	j := -1
	for o := range s.Orgs {
		if j < 0 || p.orgBefore(j, o) {
			j = o
		}
	}
	if j < 0 || j == i || !(p.dp(j) > 0) {
		return false
	}
	// Its running task on the machine of least computing power
	// (L510: "to minimise the impact on the loser's DP"); ties: least
	// waste, then machine ID.
	y := -1
	for m, mc := range s.Machines {
		if !p.busy[m] || s.held(m) || p.running[m].Org != j {
			continue
		}
		if y < 0 || slowerMachine(mc, s.Machines[y], p.waste[m], p.waste[y]) {
			y = m
		}
	}
	if y < 0 {
		return false
	}
	d := s.Machines[y].MFLOPS
	pre := PREPreempt(p.alloc[j], p.tot.QuotaMFLOPS[j], d)
	// The pseudocode's condition (L500), not the prose (L484); with
	// StrictExcess the author's code's > 0.
	excess := pre >= 0
	if h.StrictExcess {
		excess = pre > 0
	}
	if !(pre >= PREAlloc(p.alloc[i], p.tot.QuotaMFLOPS[i], d) || excess) {
		return false
	}
	p.preemptFor(i, y)
	return true
}

// fasterMachine: higher computing power; ties: lower draw, then ID.
func fasterMachine(a, b Machine) bool {
	if a.MFLOPS != b.MFLOPS {
		return a.MFLOPS > b.MFLOPS
	}
	if a.BusyMilliW != b.BusyMilliW {
		return a.BusyMilliW < b.BusyMilliW
	}
	return a.ID < b.ID
}

// slowerMachine: lower computing power; ties: less waste, then ID.
func slowerMachine(a, b Machine, wasteA, wasteB float64) bool {
	if a.MFLOPS != b.MFLOPS {
		return a.MFLOPS < b.MFLOPS
	}
	if wasteA != wasteB {
		return wasteA < wasteB
	}
	return a.ID < b.ID
}

// OSEP is the owner-share enforcement policy of Falavinha 2009 (seed 001
// fig. 1): it counts machines, not power. f_i = machines owned − machines
// serving i. Free machines are filled first (to the waiting organisation
// with the largest f, on the free machine first in State order, since OSEP
// assumes identical machines); then, while an organisation with waiting work
// has f > 0 and another has f < 0, the most-over organisation's task that
// wastes least is vacated for the most-under organisation's smallest task.
type OSEP struct{}

// Name implements Policy.
func (OSEP) Name() string { return "osep" }

// Schedule implements Policy.
func (OSEP) Schedule(s *State) ([]Decision, error) {
	s = withQueued(s)
	if err := Validate(s); err != nil {
		return nil, err
	}
	if !s.OneSlot() {
		return nil, errNotOneSlot("osep")
	}
	p := newPlainPass(s, false)
	owned := make([]int, len(s.Orgs))
	for _, m := range s.Machines {
		owned[m.Owner]++
	}
	inUse := make([]int, len(s.Orgs))
	for m := range s.Machines {
		if p.busy[m] {
			inUse[p.running[m].Org]++
		}
	}
	f := func(o int) int { return owned[o] - inUse[o] }
	// The waiting organisation with the largest f; ties: name.
	mostUnder := func() int {
		u := -1
		for o := range s.Orgs {
			if len(p.queue[o].items) == 0 {
				continue
			}
			if u < 0 || f(o) > f(u) || (f(o) == f(u) && s.Orgs[o].Name < s.Orgs[u].Name) {
				u = o
			}
		}
		return u
	}
	for n := 0; ; n++ {
		if n > p.limit() {
			return nil, fmt.Errorf("osep: no quiescence after %d services", n)
		}
		u := mostUnder()
		if u < 0 {
			return p.out, nil
		}
		freeM := -1
		for m := range s.Machines {
			if !p.busy[m] && !s.held(m) {
				freeM = m
				break
			}
		}
		if freeM >= 0 {
			p.allocate(u, freeM)
			inUse[u]++
			continue
		}
		if f(u) <= 0 {
			return p.out, nil
		}
		o := -1
		for c := range s.Orgs {
			if f(c) < 0 && (o < 0 || f(c) < f(o) || (f(c) == f(o) && s.Orgs[c].Name < s.Orgs[o].Name)) {
				o = c
			}
		}
		if o < 0 {
			return p.out, nil
		}
		y := -1
		for m := range s.Machines {
			if p.busy[m] && !s.held(m) && p.running[m].Org == o && (y < 0 || p.waste[m] < p.waste[y] ||
				(p.waste[m] == p.waste[y] && s.Machines[m].ID < s.Machines[y].ID)) {
				y = m
			}
		}
		if y < 0 {
			// Every machine of o is held (State.Held).
			return p.out, nil
		}
		p.preemptFor(u, y)
		inUse[u]++
		inUse[o]--
	}
}

// errNotOneSlot: OSEP and HOSEP are the papers' baselines, defined on
// one-slot machines open to every task; only EHOSEP decides on shared
// machines, owner policies and requirements (docs/POLICY.md).
func errNotOneSlot(name string) error {
	return fmt.Errorf("%s: decides only on one-slot machines open to every task (a machine here has resources or an owner policy, or a task a request or requirements): use ehosep", name)
}
