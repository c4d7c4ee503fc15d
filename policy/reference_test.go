package policy

import (
	"fmt"
	"slices"
	"sort"
)

// referenceEHOSEP is a plain transliteration of seed 000 algorithms 3-5
// (L755-893), extended to shared machines as docs/POLICY.md ("Shared
// machines") states it: every quantity (Allocated, PI, each machine's free
// resources, each running task's waste) is recomputed from scratch by a
// scan before every decision, the organisation list and each queue are
// fully re-sorted, and whether a task may use a machine is asked of
// Mismatch and the Avoid rule every time (refMay); a held machine
// (State.Held) is neither free nor a victim. It is slow and obviously correct; the indexed EHOSEP
// (one-slot states) and the shared-machine pass must agree with it decision
// for decision.
func referenceEHOSEP(s *State, bestFit bool) ([]Decision, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	tot := ComputeTotals(s)
	running := append([]Running(nil), s.Running...)
	queued := append([]Task(nil), s.Queued...)
	var out []Decision
	counted := func(r Running) (mflops, milliW int64) {
		m := s.Machines[r.Machine]
		sh := ShareOf(m.Capacity, r.Task.Request)
		return sh.Of(m.MFLOPS), sh.Of(m.BusyMilliW)
	}
	for step := 0; ; step++ {
		if step > 4*(len(s.Queued)+len(s.Running)+len(s.Machines))+16 {
			return nil, fmt.Errorf("reference: no quiescence")
		}
		alloc, pi := make([]int64, len(s.Orgs)), make([]int64, len(s.Orgs))
		free := make([]Resources, len(s.Machines))
		for m, mc := range s.Machines {
			free[m] = mc.Capacity.Capacity()
		}
		for _, r := range running {
			d, c := counted(r)
			alloc[r.Task.Org] += d
			pi[r.Task.Org] += c
			free[r.Machine] = free[r.Machine].minus(r.Task.Request.Request())
		}
		dp := refDPs(tot, alloc)
		users := refOrgOrder(s, tot, dp) // line 5
		sort.Slice(queued, func(a, b int) bool { return taskBefore(&queued[a], &queued[b], bestFit) })
		draw := func(t Task, m int) int64 {
			return ShareOf(s.Machines[m].Capacity, t.Request).Of(s.Machines[m].BusyMilliW)
		}
		place := func(q int, m int) Task {
			t := queued[q]
			queued = append(queued[:q:q], queued[q+1:]...)
			running = append(running, Running{Task: t, Machine: m})
			return t
		}
		served := false
		for _, i := range users { // line 6
			lim := s.Orgs[i].LimitMilliW
			var mine []int // i's waiting tasks, in queue order
			for q, t := range queued {
				if t.Org == i {
					mine = append(mine, q)
				}
			}
			if !(pi[i] < lim && len(mine) > 0) { // line 7
				continue
			}
			// Line 8: i's first task that some machine has room for within
			// the limit, on the least-energy such machine.
			for _, q := range mine {
				t := queued[q]
				best := -1
				for m, mc := range s.Machines {
					if s.held(m) || !refMay(s, t, m) || !fitsIn(t.Request.Request(), free[m], mc.Capacity.Capacity()) || pi[i]+draw(t, m) > lim {
						continue
					}
					if best < 0 || energyBetter(mc, s.Machines[best]) {
						best = m
					}
				}
				if best >= 0 {
					best = refDeadlinePlace(s, t, best, func(m int) bool {
						return !s.held(m) && refMay(s, t, m) && fitsIn(t.Request.Request(), free[m], s.Machines[m].Capacity.Capacity()) && pi[i]+draw(t, m) <= lim
					})
					place(q, best) // algorithm 4
					out = append(out, Decision{Kind: Allocate, Task: t.ID, Org: i, Machine: best})
					served = true
					break
				}
			}
			if served {
				break
			}
			// Algorithm 5.
			if !(dp[i] < 0) {
				continue
			}
			z := refVictimOrg(s, tot, alloc, pi, dp)
			if z < 0 {
				continue
			}
			for _, q := range mine {
				t := queued[q]
				y := -1 // index in running
				var yWaste float64
				var yD int64
				for k, r := range running {
					m, mc := r.Machine, s.Machines[r.Machine]
					if r.Task.Org != z || s.held(m) || !refMay(s, t, m) || pi[i]+draw(t, m) > lim ||
						!fitsIn(t.Request.Request(), free[m].plus(r.Task.Request.Request()), mc.Capacity.Capacity()) {
						continue
					}
					d, _ := counted(r)
					waste := Waste(r, d, s.CheckpointBlockSeconds)
					if y < 0 || waste < yWaste || waste == yWaste && (d < yD || d == yD &&
						(mc.ID < s.Machines[running[y].Machine].ID || mc.ID == s.Machines[running[y].Machine].ID && r.Task.ID < running[y].Task.ID)) {
						y, yWaste, yD = k, waste, d
					}
				}
				if y < 0 {
					continue
				}
				if !(PREPreempt(alloc[z], tot.QuotaMFLOPS[z], yD) >= 0 || lim < s.Orgs[z].LimitMilliW) {
					break
				}
				v := running[y]
				kept := Executed(v, yD) - yWaste
				running = append(running[:y:y], running[y+1:]...)
				requeued := v.Task
				requeued.SizeMFlop = remainingAfter(v.Task.SizeMFlop, kept)
				m := v.Machine
				place(q, m)
				queued = append(queued, requeued)
				out = append(out, Decision{Kind: Preempt, Task: t.ID, Org: i, Machine: m,
					Victim: v.Task.ID, VictimOrg: z, VictimWasteMFlop: yWaste, VictimKeptMFlop: kept})
				served = true
				break
			}
			if served {
				break
			}
		}
		if !served {
			return out, nil
		}
	}
}

// refMay says t may be placed on machine m of s: it matches m, and either
// does not avoid m or avoids every machine it matches (docs/POLICY.md,
// "Avoided machines").
func refMay(s *State, t Task, m int) bool {
	if Mismatch(s.Machines[m], t, s.Orgs) != "" {
		return false
	}
	if !slices.Contains(t.Avoid, s.Machines[m].ID) {
		return true
	}
	for _, o := range s.Machines {
		if Mismatch(o, t, s.Orgs) == "" && !slices.Contains(t.Avoid, o.ID) {
			return false
		}
	}
	return true
}

// refDeadlinePlace is docs/POLICY.md §9's placement of a task with a class,
// by sorting: the candidates (machines EHOSEP lets t's organisation use
// now) most stable first (MTBF descending, then ID); a nice task takes the
// last, a soft-deadline task the first on which now + the predicted run
// time with the margin is at most its deadline, else the candidate with
// the earliest such finish (most stable first among equals). The run time
// is at the task's share of the machine's speed. A task
// without a class keeps EHOSEP's machine, def.
func refDeadlinePlace(s *State, t Task, def int, candidate func(m int) bool) int {
	if t.Class == 0 {
		return def
	}
	var cs []int
	for m := range s.Machines {
		if candidate(m) {
			cs = append(cs, m)
		}
	}
	if len(cs) == 0 {
		return def
	}
	sort.Slice(cs, func(a, b int) bool { return refMoreStable(s, cs[a], cs[b]) })
	if t.Class == Nice {
		return cs[len(cs)-1]
	}
	size := max(t.SizeMFlop, 1)
	finish := func(m int) int64 {
		sh := ShareOf(s.Machines[m].Capacity, t.Request)
		avail := refAvailable(s.Machines[m])
		speed := max(avail*sh.Num/sh.Den, 1)
		if avail*sh.Num%sh.Den != 0 {
			speed = avail*sh.Num/sh.Den + 1 // Share.Of rounds up
		}
		run := (size*1000 + speed - 1) / speed
		return s.NowMs + (run*110+99)/100
	}
	for _, m := range cs {
		if finish(m) <= t.DeadlineMs {
			return m
		}
	}
	sort.SliceStable(cs, func(a, b int) bool { return finish(cs[a]) < finish(cs[b]) })
	return cs[0]
}

// refMoreStable says machine a of s is more stable than machine b: a
// longer MTBF, ties the smaller ID.
func refMoreStable(s *State, a, b int) bool {
	ma, mb := s.Machines[a], s.Machines[b]
	if ma.MTBFMs != mb.MTBFMs {
		return ma.MTBFMs > mb.MTBFMs
	}
	return ma.ID < mb.ID
}

// refAvailable is the speed the deadline predictor assumes for machine m:
// its MFLOPS with its owner's load share taken off, rounded down, at
// least 1 (small test values: no overflow).
func refAvailable(m Machine) int64 {
	load := min(max(m.OwnerLoadPermille, 0), 1000)
	return max(m.MFLOPS*(1000-load)/1000, 1)
}

// refDPs is every organisation's DP: its allocation alloc against its
// quota.
func refDPs(tot Totals, alloc []int64) []float64 {
	dp := make([]float64, len(alloc))
	for i := range dp {
		dp[i] = DP(alloc[i], tot.QuotaMFLOPS[i])
	}
	return dp
}

// refOrgOrder is algorithm 3's line 5, by sorting: the organisations by
// DP ascending, ties larger quota, then smaller power quota, then name.
func refOrgOrder(s *State, tot Totals, dp []float64) []int {
	users := make([]int, len(s.Orgs))
	for i := range users {
		users[i] = i
	}
	sort.Slice(users, func(a, b int) bool {
		x, y := users[a], users[b]
		return orgBefore(dp[x], dp[y], tot.QuotaMFLOPS[x], tot.QuotaMFLOPS[y],
			tot.PowerQuotaMilliW[x], tot.PowerQuotaMilliW[y], s.Orgs[x].Name, s.Orgs[y].Name)
	})
	return users
}

// refVictimOrg is algorithm 5's victim organisation z, by a scan: of the
// organisations in excess (DP > 0), the largest CSQ·PI; ties: larger
// excess Allocated − Quota, then name (victimOrgBefore); -1 when none is
// in excess.
func refVictimOrg(s *State, tot Totals, alloc, pi []int64, dp []float64) int {
	z := -1
	for c := range s.Orgs {
		if !(dp[c] > 0) {
			continue
		}
		key := CSQ(tot.PowerQuotaMilliW[c], tot.PowerSystemMilliW, tot.ComputeSystemMFLOPS, tot.QuotaMFLOPS[c]) * float64(pi[c])
		if z < 0 {
			z = c
			continue
		}
		zkey := CSQ(tot.PowerQuotaMilliW[z], tot.PowerSystemMilliW, tot.ComputeSystemMFLOPS, tot.QuotaMFLOPS[z]) * float64(pi[z])
		if victimOrgBefore(key, zkey, alloc[c]-tot.QuotaMFLOPS[c], alloc[z]-tot.QuotaMFLOPS[z], s.Orgs[c].Name, s.Orgs[z].Name) {
			z = c
		}
	}
	return z
}
