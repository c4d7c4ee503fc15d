package policy

import (
	"cmp"
	"fmt"
	"slices"
)

// Gangs inside the policy (issue 21; docs/POLICY.md §8, "Gangs in the
// policy"). A waiting gang is State.Gangs: its parts, which are in no
// queue. Two policies read them: LiveBackfill, whose timelines plan a gang
// like a task of k parts (livebackfill.go), and GangFirst, the gang step
// of EHOSEP (and of any policy without a plan of time), here.

// GangJob is a waiting gang: Parts in rank order (at least 2), every part
// of one organisation with one request, the gang's ID the first part's.
// A gang starts whole, each part on its own machine, every machine of one
// owner (whose one peer starts them), or not at all.
type GangJob struct {
	ID    string
	Parts []Task
}

// first is the part that stands for the gang in orders: rank 0.
func (g *GangJob) first() *Task { return &g.Parts[0] }

// validateGangs checks s.Gangs: sizes, one organisation and one request
// per gang; the parts' IDs are checked unique with the other tasks by
// checkTask.
func validateGangs(s *State, checkTask func(*Task, string) error) error {
	for i := range s.Gangs {
		g := &s.Gangs[i]
		if len(g.Parts) < 2 || len(g.Parts) > MaxGangSize {
			return fmt.Errorf("policy state: gang %q: %d parts, want 2 to %d", g.ID, len(g.Parts), MaxGangSize)
		}
		for k := range g.Parts {
			p := &g.Parts[k]
			if err := checkTask(p, "gang"); err != nil {
				return err
			}
			if p.Org != g.Parts[0].Org || p.Request.Request() != g.Parts[0].Request.Request() {
				return fmt.Errorf("policy state: gang %q: part %q differs from the first in organisation or request", g.ID, p.ID)
			}
		}
	}
	return nil
}

// gangEligible is the machines every part of g may use (Eligible of each
// part: their Avoid lists may differ).
func gangEligible(s *State, g *GangJob) []bool {
	ok := Eligible(s.Machines, g.Parts[0], s.Orgs)
	for _, p := range g.Parts[1:] {
		e := Eligible(s.Machines, p, s.Orgs)
		for m := range ok {
			ok[m] = ok[m] && e[m]
		}
	}
	return ok
}

// gangOwner picks the machines of a gang of k parts: machines in index
// order, each owner's usable ones (usable) counted in turn; at each
// machine, its owner's k usable machines so far of least draw (draw, ties
// by index) are tried, and the first set that passes power takes the
// gang. So the gang's last machine is as early in index order as it can
// be, and among one owner's machines up to there the cheapest in power
// serve. It returns the machines in index order, nil when none passes.
func gangOwner(s *State, k int, usable func(m int) bool, draw func(m int) int64, power func(ms []int) bool) []int {
	byOwner := map[int][]int{}
	for m := range s.Machines {
		if !usable(m) {
			continue
		}
		o := s.Machines[m].Owner
		byOwner[o] = append(byOwner[o], m)
		if len(byOwner[o]) < k {
			continue
		}
		ms := slices.Clone(byOwner[o])
		slices.SortStableFunc(ms, func(x, y int) int { return cmp.Compare(draw(x), draw(y)) })
		ms = ms[:k]
		slices.Sort(ms)
		if power(ms) {
			return ms
		}
	}
	return nil
}

// GangFirst is the gang step of a policy that plans no time (EHOSEP, the
// job policy ehosep), then Base on what is left (docs/POLICY.md §8):
//
//   - Order: the gangs' organisations in EHOSEP's order (DP ascending,
//     orgBefore's ties), DP recomputed after every gang started (a gang's
//     parts count whole in its organisation's allocation and power); one
//     organisation's gangs in submission order (first part's Seq, then
//     ID).
//   - A gang starts now when an owner has k usable machines with room for
//     a part each, and the gang's whole draw keeps its organisation within
//     its limit (gangOwner: machines in index order, the first place where
//     an owner's k least-draw machines so far pass power). Usable: eligible for every part, not held, and not of an
//     owner in deficit (DP < 0) with single tasks waiting, unless the gang
//     is the owner's own: the owner's claim comes first (EHOSEP would
//     preempt the gang's part at once, stopping it whole).
//   - The owner's claim (preemptFor): a gang of an organisation in
//     deficit that cannot start on free machines may start on its own
//     machines by preempting guests of organisations in excess, as
//     EHOSEP's algorithm 5 does for a task.
//   - The first gang that cannot start is the head: it reserves k usable
//     machines of one owner, those whose running tasks leave room for a
//     part soonest (each task ending at its planned end, as LiveBackfill
//     plans it: unbounded without a limit); owner by the k-th soonest
//     machine's instant, then its index. The reserved machines are held
//     for Base (nothing placed there, nothing preempted there: as they
//     free up they wait for the gang), and the gang's draw on them is
//     taken off its organisation's limit for Base, so the head's start is
//     not delayed by room or power given to single tasks. Later gangs only
//     start now, beside the reservation.
//   - Base then runs on the state with the gangs started as running (their
//     machines held) and the head's reservation.
//
// Without gangs it is Base exactly.
type GangFirst struct{ Base Policy }

// Name implements Policy: the base's.
func (p GangFirst) Name() string { return p.Base.Name() }

// GangStep is what the gang step decided: the starts (Allocate decisions,
// each gang's parts consecutive, in rank order), the head gang and its
// reserved machines (nil when no gang waits for machines), and the state
// Base runs on.
type GangStep struct {
	Starts   []Decision
	Head     string
	Reserved []int
	Rest     *State
}

// Schedule implements Policy.
func (p GangFirst) Schedule(s *State) ([]Decision, error) {
	if len(s.Gangs) == 0 {
		return p.Base.Schedule(s)
	}
	st, err := PlanGangStep(s)
	if err != nil {
		return nil, err
	}
	more, err := p.Base.Schedule(st.Rest)
	if err != nil {
		return nil, err
	}
	return append(st.Starts, more...), nil
}

// gangStep is GangFirst's working state.
type gangStep struct {
	s       *State
	tot     Totals
	alloc   []int64
	pi      []int64
	free    []Resources
	held    []bool
	waiting []bool // an organisation has single tasks waiting
	running []Running
	// requeued are the tasks preempted for gangs, back in their queues
	// with the work they keep.
	requeued []Task
}

// PlanGangStep runs GangFirst's gang step on s.
func PlanGangStep(s *State) (GangStep, error) {
	s = withQueued(s)
	if err := Validate(s); err != nil {
		return GangStep{}, err
	}
	u := ComputeUsage(s)
	g := &gangStep{s: s, tot: ComputeTotals(s), alloc: u.AllocatedMFLOPS, pi: u.PIMilliW,
		free: make([]Resources, len(s.Machines)), held: make([]bool, len(s.Machines)),
		waiting: make([]bool, len(s.Orgs)), running: slices.Clone(s.Running)}
	for m, mc := range s.Machines {
		g.free[m] = mc.Capacity.Capacity()
		g.held[m] = s.held(m)
	}
	for _, r := range s.Running {
		g.free[r.Machine] = g.free[r.Machine].minus(r.Task.Request.Request())
	}
	for _, t := range s.Queued {
		g.waiting[t.Org] = true
	}
	lims := make([]int64, len(s.Orgs))
	for i, o := range s.Orgs {
		lims[i] = o.LimitMilliW
	}
	var out GangStep
	left := slices.Clone(s.Gangs)
	for len(left) > 0 {
		k := g.next(left)
		gang := left[k]
		left = slices.Delete(left, k, k+1)
		elig := gangEligible(s, &gang)
		if ms := g.startNow(&gang, elig); ms != nil {
			for r, m := range ms {
				g.place(gang.Parts[r], m)
				out.Starts = append(out.Starts, Decision{Kind: Allocate, Task: gang.Parts[r].ID, Org: gang.first().Org, Machine: m})
			}
			continue
		}
		if ds := g.preemptFor(&gang, elig); ds != nil {
			out.Starts = append(out.Starts, ds...)
			continue
		}
		if out.Reserved != nil {
			continue
		}
		if ms := g.reserve(&gang, elig); ms != nil {
			out.Head, out.Reserved = gang.ID, ms
			var draw int64
			for _, m := range ms {
				g.held[m] = true
				draw += g.draw(*gang.first(), m)
			}
			lims[gang.first().Org] = max(0, lims[gang.first().Org]-draw)
		}
	}
	rest := *s
	if len(g.requeued) > 0 {
		rest.Queued = append(slices.Clone(s.Queued), g.requeued...)
	}
	rest.Gangs = nil
	rest.Running = g.running
	rest.Held = g.held
	rest.Orgs = slices.Clone(s.Orgs)
	for i := range rest.Orgs {
		rest.Orgs[i].LimitMilliW = lims[i]
	}
	out.Rest = &rest
	return out, nil
}

func (g *gangStep) dp(o int) float64 { return DP(g.alloc[o], g.tot.QuotaMFLOPS[o]) }

// next is the index in left of the gang served next.
func (g *gangStep) next(left []GangJob) int {
	best := 0
	for k := 1; k < len(left); k++ {
		a, b := left[k].first(), left[best].first()
		if a.Org != b.Org {
			if orgBefore(g.dp(a.Org), g.dp(b.Org), g.tot.QuotaMFLOPS[a.Org], g.tot.QuotaMFLOPS[b.Org],
				g.tot.PowerQuotaMilliW[a.Org], g.tot.PowerQuotaMilliW[b.Org], g.s.Orgs[a.Org].Name, g.s.Orgs[b.Org].Name) {
				best = k
			}
			continue
		}
		if c := cmp.Compare(a.Seq, b.Seq); c < 0 || c == 0 && a.ID < b.ID {
			best = k
		}
	}
	return best
}

func (g *gangStep) draw(t Task, m int) int64 {
	mc := g.s.Machines[m]
	return ShareOf(mc.Capacity, t.Request).Of(mc.BusyMilliW)
}

// usable says machine m may take a part of gang (of organisation org):
// eligible, not held, and not claimed by its owner (see GangFirst).
func (g *gangStep) usable(elig []bool, org, m int) bool {
	o := g.s.Machines[m].Owner
	return elig[m] && !g.held[m] && (o == org || !(g.dp(o) < 0 && g.waiting[o]))
}

// startNow is the machines the gang starts on now, or nil.
func (g *gangStep) startNow(gang *GangJob, elig []bool) []int {
	t := *gang.first()
	req := t.Request.Request()
	return gangOwner(g.s, len(gang.Parts), func(m int) bool {
		return g.usable(elig, t.Org, m) && fitsIn(req, g.free[m], g.s.Machines[m].Capacity.Capacity())
	}, func(m int) int64 { return g.draw(t, m) }, func(ms []int) bool {
		pi := g.pi[t.Org]
		for _, m := range ms {
			pi += g.draw(t, m)
		}
		return pi <= g.s.Orgs[t.Org].LimitMilliW
	})
}

// place runs part t on m.
func (g *gangStep) place(t Task, m int) {
	mc := g.s.Machines[m]
	sh := ShareOf(mc.Capacity, t.Request)
	g.alloc[t.Org] += sh.Of(mc.MFLOPS)
	g.pi[t.Org] += sh.Of(mc.BusyMilliW)
	g.free[m] = g.free[m].minus(t.Request.Request())
	g.held[m] = true
	g.running = append(g.running, Running{Task: t, Machine: m})
}

// reserve is the head's machines: k usable machines of one owner whose
// running tasks leave room for a part soonest, and whose draw together is
// within the gang's organisation's limit (nil when no owner has k).
func (g *gangStep) reserve(gang *GangJob, elig []bool) []int {
	t := *gang.first()
	k := len(gang.Parts)
	lp := newLivePass(&State{Orgs: g.s.Orgs, Machines: g.s.Machines, Running: g.running})
	type cand struct {
		m  int
		at int64
	}
	byOwner := map[int][]cand{}
	for m := range g.s.Machines {
		if g.usable(elig, t.Org, m) {
			o := g.s.Machines[m].Owner
			byOwner[o] = append(byOwner[o], cand{m, lp.roomFrom(t, m)})
		}
	}
	var best []cand
	for _, cs := range byOwner {
		if len(cs) < k {
			continue
		}
		slices.SortFunc(cs, func(x, y cand) int { return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.m, y.m)) })
		cs = cs[:k]
		var draw int64
		for _, c := range cs {
			draw += g.draw(t, c.m)
		}
		if draw > g.s.Orgs[t.Org].LimitMilliW {
			continue // the gang could never start there
		}
		if best == nil || cs[k-1].at < best[k-1].at || cs[k-1].at == best[k-1].at && cs[k-1].m < best[k-1].m {
			best = cs
		}
	}
	if best == nil {
		return nil
	}
	ms := make([]int, k)
	for i, c := range best {
		ms[i] = c.m
	}
	slices.Sort(ms)
	return ms
}

// Truncate returns the first n decisions of ds (a pass on s), fewer when
// the n-th would split a gang of s: a gang's parts are placed in one
// command or not at all.
func Truncate(s *State, ds []Decision, n int) []Decision {
	if len(ds) <= n {
		return ds
	}
	if len(s.Gangs) == 0 {
		return ds[:n]
	}
	gangOf := map[string]string{}
	for _, g := range s.Gangs {
		for _, p := range g.Parts {
			gangOf[p.ID] = g.ID
		}
	}
	// Cut before the gang the n-th decision's successor continues.
	for n > 0 && gangOf[ds[n].Task] != "" && gangOf[ds[n].Task] == gangOf[ds[n-1].Task] {
		n--
	}
	return ds[:n]
}

// preemptFor is the owner's claim for its own gang (EHOSEP's algorithm 5
// for a gang): when gang's organisation o is in deficit (DP < 0) and k of
// its own usable machines are each free for a part or run a guest task
// whose stopping leaves room for one (a task of an organisation in excess,
// DP > 0, that stays at or above its quota without it, PREPreempt ≥ 0,
// and that is no gang's part), the gang starts there, preempting those
// guests: free machines first, then the least waste, then index; the
// victim on a machine is its least-waste such guest (then ID). The gang's
// whole draw must keep o within its limit. It returns the decisions
// (Allocate or Preempt, in rank order), nil when the claim cannot place
// the gang.
func (g *gangStep) preemptFor(gang *GangJob, elig []bool) []Decision {
	t := *gang.first()
	o, k := t.Org, len(gang.Parts)
	if !(g.dp(o) < 0) {
		return nil
	}
	req := t.Request.Request()
	type cand struct {
		m, v  int // v: index in g.running, -1 for a free machine
		waste float64
	}
	var cs []cand
	for m, mc := range g.s.Machines {
		if mc.Owner != o || !g.usable(elig, o, m) {
			continue
		}
		capa := mc.Capacity.Capacity()
		if fitsIn(req, g.free[m], capa) {
			cs = append(cs, cand{m, -1, 0})
			continue
		}
		best := cand{m, -1, 0}
		for v, r := range g.running {
			z := r.Task.Org
			if r.Machine != m || z == o || r.Task.Gang || !(g.dp(z) > 0) || !fitsIn(req, g.free[m].plus(r.Task.Request.Request()), capa) {
				continue
			}
			d := ShareOf(mc.Capacity, r.Task.Request).Of(mc.MFLOPS)
			if PREPreempt(g.alloc[z], g.tot.QuotaMFLOPS[z], d) < 0 {
				continue
			}
			w := Waste(r, d, g.s.CheckpointBlockSeconds)
			if best.v < 0 || w < best.waste || w == best.waste && r.Task.ID < g.running[best.v].Task.ID {
				best = cand{m, v, w}
			}
		}
		if best.v >= 0 {
			cs = append(cs, best)
		}
	}
	if len(cs) < k {
		return nil
	}
	slices.SortStableFunc(cs, func(x, y cand) int {
		if (x.v < 0) != (y.v < 0) {
			if x.v < 0 {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(x.waste, y.waste), cmp.Compare(x.m, y.m))
	})
	cs = cs[:k]
	slices.SortFunc(cs, func(x, y cand) int { return cmp.Compare(x.m, y.m) })
	pi := g.pi[o]
	for _, c := range cs {
		pi += g.draw(t, c.m)
	}
	if pi > g.s.Orgs[o].LimitMilliW {
		return nil
	}
	// Victims' organisations must stay at or above quota together.
	lost := map[int]int64{}
	for _, c := range cs {
		if c.v >= 0 {
			r := g.running[c.v]
			lost[r.Task.Org] += ShareOf(g.s.Machines[c.m].Capacity, r.Task.Request).Of(g.s.Machines[c.m].MFLOPS)
		}
	}
	for z, d := range lost {
		if PREPreempt(g.alloc[z], g.tot.QuotaMFLOPS[z], d) < 0 {
			return nil
		}
	}
	var out []Decision
	var gone []int
	for r, c := range cs {
		part := gang.Parts[r]
		d := Decision{Kind: Allocate, Task: part.ID, Org: o, Machine: c.m}
		if c.v >= 0 {
			v := g.running[c.v]
			mc := g.s.Machines[c.m]
			sh := ShareOf(mc.Capacity, v.Task.Request)
			kept := Executed(v, sh.Of(mc.MFLOPS)) - c.waste
			d.Kind, d.Victim, d.VictimOrg, d.VictimWasteMFlop, d.VictimKeptMFlop = Preempt, v.Task.ID, v.Task.Org, c.waste, kept
			g.alloc[v.Task.Org] -= sh.Of(mc.MFLOPS)
			g.pi[v.Task.Org] -= sh.Of(mc.BusyMilliW)
			g.free[c.m] = g.free[c.m].plus(v.Task.Request.Request())
			back := v.Task
			back.SizeMFlop = remainingAfter(v.Task.SizeMFlop, kept)
			g.requeued = append(g.requeued, back)
			g.waiting[v.Task.Org] = true
			gone = append(gone, c.v)
		}
		out = append(out, d)
	}
	slices.Sort(gone)
	for i := len(gone) - 1; i >= 0; i-- {
		g.running = slices.Delete(g.running, gone[i], gone[i]+1)
	}
	for r, c := range cs {
		g.place(gang.Parts[r], c.m)
	}
	return out
}
