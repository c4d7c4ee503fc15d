package policy

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
)

// refPlannedEnd is when running task r ends for a plan (LiveBackfill's
// rule): its own limit, else its machine owner's cap, counted from its
// start, at least 1 ms from now; Unbounded without either.
func refPlannedEnd(s *State, r Running) int64 {
	l := r.Task.WallLimitMs
	if l == 0 && s.Machines[r.Machine].Policy != nil {
		l = s.Machines[r.Machine].Policy.MaxWallMs
	}
	if l == 0 {
		return Unbounded
	}
	return max(1, l-int64(r.RunSeconds*1000+0.5))
}

// referenceGangStep is GangFirst's gang step stated plainly: every
// quantity (allocation, PI, free room) summed afresh over the running
// tasks before each gang, the gangs fully sorted each time, each owner's
// machines listed and compared whole.
func referenceGangStep(s *State) (starts []Decision, head string, reserved []int, rest *State) {
	tot := ComputeTotals(s)
	running := slices.Clone(s.Running)
	held := make([]bool, len(s.Machines))
	for m := range held {
		held[m] = len(s.Held) > 0 && s.Held[m]
	}
	lims := make([]int64, len(s.Orgs))
	waiting := make([]bool, len(s.Orgs))
	for i, o := range s.Orgs {
		lims[i] = o.LimitMilliW
	}
	for _, t := range s.Queued {
		waiting[t.Org] = true
	}
	draw := func(t Task, m int) int64 {
		return ShareOf(s.Machines[m].Capacity, t.Request).Of(s.Machines[m].BusyMilliW)
	}
	left := slices.Clone(s.Gangs)
	var requeued []Task
	for len(left) > 0 {
		alloc, pi := make([]int64, len(s.Orgs)), make([]int64, len(s.Orgs))
		free := make([]Resources, len(s.Machines))
		for m, mc := range s.Machines {
			free[m] = mc.Capacity.Capacity()
		}
		for _, r := range running {
			mc := s.Machines[r.Machine]
			alloc[r.Task.Org] += ShareOf(mc.Capacity, r.Task.Request).Of(mc.MFLOPS)
			pi[r.Task.Org] += draw(r.Task, r.Machine)
			free[r.Machine] = free[r.Machine].minus(r.Task.Request.Request())
		}
		dp := func(o int) float64 { return DP(alloc[o], tot.QuotaMFLOPS[o]) }
		sort.SliceStable(left, func(i, j int) bool {
			a, b := left[i].Parts[0], left[j].Parts[0]
			if a.Org != b.Org {
				return orgBefore(dp(a.Org), dp(b.Org), tot.QuotaMFLOPS[a.Org], tot.QuotaMFLOPS[b.Org],
					tot.PowerQuotaMilliW[a.Org], tot.PowerQuotaMilliW[b.Org], s.Orgs[a.Org].Name, s.Orgs[b.Org].Name)
			}
			if a.Seq != b.Seq {
				return a.Seq < b.Seq
			}
			return a.ID < b.ID
		})
		g := left[0]
		left = left[1:]
		t, k := g.Parts[0], len(g.Parts)
		usable := func(m int) bool {
			for _, p := range g.Parts {
				if !refMay(s, p, m) {
					return false
				}
			}
			o := s.Machines[m].Owner
			return !held[m] && (o == t.Org || !(dp(o) < 0 && waiting[o]))
		}
		// Now: for each owner, the first machine index p at which its k
		// least-draw usable machines with room up to p pass power; the
		// owner with the least p.
		bestP, var_ := len(s.Machines), []int(nil)
		for o := range s.Orgs {
			for p := range s.Machines {
				var ms []int
				for m := 0; m <= p; m++ {
					if s.Machines[m].Owner == o && usable(m) && Fits(t.Request.Request(), free[m], s.Machines[m].Capacity.Capacity()) {
						ms = append(ms, m)
					}
				}
				if len(ms) < k {
					continue
				}
				sort.SliceStable(ms, func(i, j int) bool { return draw(t, ms[i]) < draw(t, ms[j]) })
				ms = ms[:k]
				sort.Ints(ms)
				d := pi[t.Org]
				for _, m := range ms {
					d += draw(t, m)
				}
				if d <= s.Orgs[t.Org].LimitMilliW {
					if p < bestP {
						bestP, var_ = p, ms
					}
					break
				}
			}
		}
		started := var_ != nil
		for r, m := range var_ {
			running = append(running, Running{Task: g.Parts[r], Machine: m})
			held[m] = true
			starts = append(starts, Decision{Kind: Allocate, Task: g.Parts[r].ID, Org: t.Org, Machine: m})
		}
		if started {
			continue
		}
		// The owner's claim: o in deficit, k of its own usable machines
		// each free for a part or running a guest whose stopping makes
		// room (guest's organisation in excess, at or above quota without
		// it, not a gang's part): free ones, then least waste, then index;
		// the victim per machine its least-waste guest, then ID; the gang
		// within o's limit; the victims' organisations at or above quota
		// without all of theirs taken.
		if o := t.Org; dp(o) < 0 {
			type claim struct {
				m, v  int
				waste float64
			}
			var cs []claim
			for m, mc := range s.Machines {
				if mc.Owner != o || !usable(m) {
					continue
				}
				if Fits(t.Request.Request(), free[m], mc.Capacity.Capacity()) {
					cs = append(cs, claim{m, -1, 0})
					continue
				}
				var vs []claim
				for v, r := range running {
					z := r.Task.Org
					d := ShareOf(mc.Capacity, r.Task.Request).Of(mc.MFLOPS)
					if r.Machine == m && z != o && !r.Task.Gang && dp(z) > 0 && PREPreempt(alloc[z], tot.QuotaMFLOPS[z], d) >= 0 &&
						Fits(t.Request.Request(), free[m].plus(r.Task.Request.Request()), mc.Capacity.Capacity()) {
						vs = append(vs, claim{m, v, Waste(r, d, s.CheckpointBlockSeconds)})
					}
				}
				sort.Slice(vs, func(i, j int) bool {
					return vs[i].waste < vs[j].waste || vs[i].waste == vs[j].waste && running[vs[i].v].Task.ID < running[vs[j].v].Task.ID
				})
				if len(vs) > 0 {
					cs = append(cs, vs[0])
				}
			}
			sort.SliceStable(cs, func(i, j int) bool {
				if (cs[i].v < 0) != (cs[j].v < 0) {
					return cs[i].v < 0
				}
				return cs[i].waste < cs[j].waste || cs[i].waste == cs[j].waste && cs[i].m < cs[j].m
			})
			if len(cs) >= k {
				cs = cs[:k]
				sort.Slice(cs, func(i, j int) bool { return cs[i].m < cs[j].m })
				p, lost := pi[o], map[int]int64{}
				for _, c := range cs {
					p += draw(t, c.m)
					if c.v >= 0 {
						r := running[c.v]
						lost[r.Task.Org] += ShareOf(s.Machines[c.m].Capacity, r.Task.Request).Of(s.Machines[c.m].MFLOPS)
					}
				}
				ok := p <= s.Orgs[o].LimitMilliW
				for z, d := range lost {
					ok = ok && PREPreempt(alloc[z], tot.QuotaMFLOPS[z], d) >= 0
				}
				if ok {
					var victims []int
					for r, c := range cs {
						d := Decision{Kind: Allocate, Task: g.Parts[r].ID, Org: o, Machine: c.m}
						if c.v >= 0 {
							v := running[c.v]
							mc := s.Machines[c.m]
							kept := Executed(v, ShareOf(mc.Capacity, v.Task.Request).Of(mc.MFLOPS)) - c.waste
							d.Kind, d.Victim, d.VictimOrg, d.VictimWasteMFlop, d.VictimKeptMFlop = Preempt, v.Task.ID, v.Task.Org, c.waste, kept
							back := v.Task
							back.SizeMFlop = remainingAfter(v.Task.SizeMFlop, kept)
							requeued = append(requeued, back)
							waiting[v.Task.Org] = true
							victims = append(victims, c.v)
						}
						starts = append(starts, d)
					}
					var keep []Running
					for i, r := range running {
						if !slices.Contains(victims, i) {
							keep = append(keep, r)
						}
					}
					running = keep
					for r, c := range cs {
						running = append(running, Running{Task: g.Parts[r], Machine: c.m})
						held[c.m] = true
					}
					continue
				}
			}
		}
		if reserved != nil {
			continue
		}
		// The head: per owner, its usable machines by the instant their
		// running tasks leave room for a part (trying now and every end),
		// then index; its first k, if their draw is within the limit.
		type cand struct {
			m  int
			at int64
		}
		var best []cand
		for o := range s.Orgs {
			var cs []cand
			for m, mc := range s.Machines {
				if mc.Owner != o || !usable(m) {
					continue
				}
				xs := []int64{0}
				for _, r := range running {
					if r.Machine == m {
						xs = append(xs, refPlannedEnd(s, r))
					}
				}
				slices.Sort(xs)
				at := Unbounded
				for _, x := range xs {
					var used Resources
					for _, r := range running {
						if r.Machine == m && refPlannedEnd(s, r) > x {
							used = used.plus(r.Task.Request.Request())
						}
					}
					capa := mc.Capacity.Capacity()
					if x != Unbounded && Fits(t.Request.Request(), capa.minus(used), capa) {
						at = x
						break
					}
				}
				cs = append(cs, cand{m, at})
			}
			if len(cs) < k {
				continue
			}
			sort.Slice(cs, func(i, j int) bool {
				return cs[i].at < cs[j].at || cs[i].at == cs[j].at && cs[i].m < cs[j].m
			})
			cs = cs[:k]
			var d int64
			for _, c := range cs {
				d += draw(t, c.m)
			}
			if d > s.Orgs[t.Org].LimitMilliW {
				continue
			}
			if best == nil || cs[k-1].at < best[k-1].at || cs[k-1].at == best[k-1].at && cs[k-1].m < best[k-1].m {
				best = cs
			}
		}
		if best == nil {
			continue
		}
		head = g.ID
		var d int64
		for _, c := range best {
			reserved = append(reserved, c.m)
			held[c.m] = true
			d += draw(t, c.m)
		}
		slices.Sort(reserved)
		lims[t.Org] = max(0, lims[t.Org]-d)
	}
	r := *s
	if len(requeued) > 0 {
		r.Queued = append(slices.Clone(s.Queued), requeued...)
	}
	r.Gangs, r.Running, r.Held = nil, running, held
	r.Orgs = slices.Clone(s.Orgs)
	for i := range r.Orgs {
		r.Orgs[i].LimitMilliW = lims[i]
	}
	return starts, head, reserved, &r
}

// randomGangState is randomLiveState with one to three waiting gangs of
// two to three parts, sometimes held machines.
func randomGangState(r *rand.Rand) *State {
	s := randomLiveState(r)
	limits := []int64{0, 2000, 5000, 13000}
	for g := range 1 + r.IntN(3) {
		k := 2 + r.IntN(2)
		org := r.IntN(len(s.Orgs))
		req := Resources{CPUs: int64(1 + r.IntN(4))}
		wl := limits[r.IntN(len(limits))]
		seq := uint64(r.IntN(12))
		gj := GangJob{ID: fmt.Sprintf("g%d-0", g)}
		for p := range k {
			gj.Parts = append(gj.Parts, Task{ID: fmt.Sprintf("g%d-%d", g, p), Org: org, SizeMFlop: 1000, Seq: seq, Request: req, WallLimitMs: wl})
		}
		s.Gangs = append(s.Gangs, gj)
	}
	for i := range s.Running {
		s.Running[i].Task.Gang = r.IntN(6) == 0 // a running gang's part: never a gang's victim
	}
	if r.IntN(5) == 0 {
		s.Held = make([]bool, len(s.Machines))
		s.Held[r.IntN(len(s.Machines))] = true
	}
	return s
}

// gangsQueued is s with its gangs' parts queued, so that ApplyDecisions
// can check a pass that starts them.
func gangsQueued(s *State) *State {
	c := *s
	c.Queued = slices.Clone(s.Queued)
	for _, g := range s.Gangs {
		c.Queued = append(c.Queued, g.Parts...)
	}
	c.Gangs = nil
	return &c
}

// TestGangFirstAgreesWithReference: on random federations with gangs, the
// gang step and the reference's agree start for start and on the head's
// reservation, GangFirst{EHOSEP} decides exactly the gang starts then the
// reference EHOSEP's decisions on the rest, every decision applies (no
// machine over-committed, PI ≤ Lim), each gang starts whole or not at all,
// on one owner's machines, and the input order does not matter.
func TestGangFirstAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 7))
	startsSeen, heads, claims := 0, 0, 0
	for i := range 3000 {
		s := randomGangState(r)
		st, err := PlanGangStep(s)
		if err != nil {
			t.Fatalf("state %d: %v", i, err)
		}
		rs, rh, rr, rest := referenceGangStep(s)
		if !reflect.DeepEqual(st.Starts, rs) || st.Head != rh || !slices.Equal(st.Reserved, rr) ||
			!reflect.DeepEqual(st.Rest.Held, rest.Held) || !reflect.DeepEqual(st.Rest.Orgs, rest.Orgs) ||
			!reflect.DeepEqual(st.Rest.Queued, rest.Queued) {
			t.Fatalf("state %d:\n got %+v head %q %v\nwant %+v head %q %v\nstate %+v", i, st.Starts, st.Head, st.Reserved, rs, rh, rr, s)
		}
		got, err := GangFirst{Base: EHOSEP{}}.Schedule(s)
		if err != nil {
			t.Fatalf("state %d: %v", i, err)
		}
		base, err := referenceEHOSEP(rest, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(slices.Clone(rs), base...); !reflect.DeepEqual(got, want) {
			t.Fatalf("state %d: GangFirst %q, want %q", i, summary(s, got), summary(s, want))
		}
		if _, err := ApplyDecisions(gangsQueued(s), got); err != nil {
			t.Fatalf("state %d: %v (%q)", i, err, summary(s, got))
		}
		checkGangsWhole(t, s, got)
		startsSeen += len(st.Starts)
		for _, d := range st.Starts {
			if d.Kind == Preempt {
				claims++
			}
		}
		if st.Head != "" {
			heads++
		}
		sh := *s
		sh.Gangs = slices.Clone(s.Gangs)
		r.Shuffle(len(sh.Gangs), func(i, j int) { sh.Gangs[i], sh.Gangs[j] = sh.Gangs[j], sh.Gangs[i] })
		if again, _ := (GangFirst{Base: EHOSEP{}}).Schedule(&sh); !reflect.DeepEqual(again, got) {
			t.Fatalf("state %d: shuffled gangs decided %q, want %q", i, summary(s, again), summary(s, got))
		}
	}
	if startsSeen < 300 || heads < 300 || claims < 10 {
		t.Fatalf("%d gang parts started (%d by preemption), %d heads reserved: the generator exercises too little", startsSeen, claims, heads)
	}
}

// checkGangsWhole fails unless each gang of s has every part placed by ds,
// on distinct machines of one owner, or none.
func checkGangsWhole(t *testing.T, s *State, ds []Decision) {
	t.Helper()
	on := map[string]int{}
	for _, d := range ds {
		on[d.Task] = d.Machine
	}
	for _, g := range s.Gangs {
		n, owners, machines := 0, map[int]bool{}, map[int]bool{}
		for _, p := range g.Parts {
			if m, ok := on[p.ID]; ok {
				n++
				owners[s.Machines[m].Owner] = true
				machines[m] = true
			}
		}
		if n != 0 && (n != len(g.Parts) || len(owners) != 1 || len(machines) != n) {
			t.Fatalf("gang %s: %d of %d parts placed, on %d machines of %d owners", g.ID, n, len(g.Parts), len(machines), len(owners))
		}
	}
}
