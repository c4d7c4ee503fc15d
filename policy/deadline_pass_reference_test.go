package policy

import (
	"fmt"
	"sort"
)

// refClassedEHOSEP is referenceEHOSEP on one-slot states with the whole of
// figures 4.1 and 4.2 for tasks with a class (docs/POLICY.md §9,
// "Preemption and reservations in the pass"), stated plainly: before every
// service Allocated, PI and DP are recomputed by a scan, the organisations
// and the queue are re-sorted, and each branch sorts its candidate
// machines most stable first and takes the first that qualifies. It also
// returns the pass's reservations (machine index -> task ID).
func refClassedEHOSEP(s *State, bestFit bool) ([]Decision, map[int]string, error) {
	if err := Validate(s); err != nil {
		return nil, nil, err
	}
	if !s.OneSlot() {
		return nil, nil, fmt.Errorf("reference: one-slot states only")
	}
	tot := ComputeTotals(s)
	running := append([]Running(nil), s.Running...)
	queued := append([]Task(nil), s.Queued...)
	reserved := map[int]string{}
	locked := map[int]bool{} // machines a deadline preemption took
	var out []Decision
	byStability := func() []int {
		ms := make([]int, len(s.Machines))
		for m := range ms {
			ms[m] = m
		}
		sort.Slice(ms, func(a, b int) bool { return refMoreStable(s, ms[a], ms[b]) })
		return ms
	}
	finish := func(t Task, m int, ahead int64) int64 {
		size := min(max(t.SizeMFlop, 1), MaxDeadlineMFlop)
		speed := refAvailable(s.Machines[m])
		work := min(size+ahead, MaxDeadlineMFlop)
		run := (work*1000 + speed - 1) / speed
		return s.NowMs + (run*110+99)/100
	}
	for step := 0; ; step++ {
		if step > 4*(len(s.Queued)+len(s.Running)+len(s.Machines))+16 {
			return nil, nil, fmt.Errorf("reference: no quiescence")
		}
		alloc, pi := make([]int64, len(s.Orgs)), make([]int64, len(s.Orgs))
		on := make([]int, len(s.Machines)) // index in running + 1; 0: free
		for k, r := range running {
			alloc[r.Task.Org] += s.Machines[r.Machine].MFLOPS
			pi[r.Task.Org] += s.Machines[r.Machine].BusyMilliW
			on[r.Machine] = k + 1
		}
		dp := refDPs(tot, alloc)
		users := refOrgOrder(s, tot, dp) // line 5
		sort.Slice(queued, func(a, b int) bool { return taskBefore(&queued[a], &queued[b], bestFit) })
		head := func(i int) int {
			for q, t := range queued {
				if t.Org == i {
					return q
				}
			}
			return -1
		}
		take := func(q int) Task {
			t := queued[q]
			queued = append(queued[:q:q], queued[q+1:]...)
			return t
		}
		// stop takes the task off machine m back to its queue, keeping its
		// checkpointed work; it returns the stopped run and its waste.
		stop := func(m int) (Running, float64, float64) {
			k := on[m] - 1
			v := running[k]
			d := s.Machines[m].MFLOPS
			waste := Waste(v, d, s.CheckpointBlockSeconds)
			kept := Executed(v, d) - waste
			running = append(running[:k:k], running[k+1:]...)
			requeued := v.Task
			requeued.SizeMFlop = remainingAfter(v.Task.SizeMFlop, kept)
			queued = append(queued, requeued)
			return v, waste, kept
		}
		// mayTake: busy machine m, not held or reserved, where i's task
		// keeps PI_i within Lim_i (its own task's draw given back).
		mayTake := func(i, m int) bool {
			if s.held(m) || reserved[m] != "" {
				return false
			}
			cost := s.Machines[m].BusyMilliW
			if running[on[m]-1].Task.Org == i {
				cost = 0
			}
			return pi[i]+cost <= s.Orgs[i].LimitMilliW
		}
		niceVictim := func(i int, t Task) int {
			for _, m := range byStability() {
				if on[m] == 0 || running[on[m]-1].Task.Class != Nice {
					continue
				}
				z := running[on[m]-1].Task.Org
				if (z == i || dp[z] > 0 && dp[i] < 0) && mayTake(i, m) && finish(t, m, 0) <= t.DeadlineMs {
					return m
				}
			}
			return -1
		}
		slot := func(i int, t Task, c TaskClass) int {
			for _, m := range byStability() {
				if on[m] == 0 || running[on[m]-1].Task.Class != c || !mayTake(i, m) {
					continue
				}
				r := running[on[m]-1]
				left := remainingAfter(min(r.Task.SizeMFlop, MaxDeadlineMFlop), Executed(r, s.Machines[m].MFLOPS))
				if t.Class == Nice || finish(t, m, left) <= t.DeadlineMs {
					return m
				}
			}
			return -1
		}
		preemptNice := func(i, q, m int) {
			v, waste, kept := stop(m)
			if q > len(queued)-1 || queued[q].Org != i {
				panic("reference: queue moved")
			}
			t := take(q)
			running = append(running, Running{Task: t, Machine: m})
			locked[m] = true
			out = append(out, Decision{Kind: Preempt, Task: t.ID, Org: i, Machine: m,
				Victim: v.Task.ID, VictimOrg: v.Task.Org, VictimWasteMFlop: waste, VictimKeptMFlop: kept})
		}
		served := false
		for _, i := range users {
			lim := s.Orgs[i].LimitMilliW
			q := head(i)
			if !(pi[i] < lim && q >= 0) {
				continue
			}
			t := queued[q]
			var cands []int // free machines within the limit
			for m, mc := range s.Machines {
				if on[m] == 0 && !s.held(m) && pi[i]+mc.BusyMilliW <= lim {
					cands = append(cands, m)
				}
			}
			if len(cands) > 0 {
				served = true
				best := cands[0]
				for _, m := range cands {
					if energyBetter(s.Machines[m], s.Machines[best]) {
						best = m
					}
				}
				if t.Class != 0 {
					best = refDeadlinePlace(s, t, best, func(m int) bool { return on[m] == 0 && !s.held(m) && pi[i]+s.Machines[m].BusyMilliW <= lim })
				}
				if t.Class == SoftDeadline && finish(t, best, 0) > t.DeadlineMs {
					if m := niceVictim(i, t); m >= 0 {
						preemptNice(i, q, m)
						break
					}
					if m := slot(i, t, SoftDeadline); m >= 0 {
						reserved[m] = take(q).ID
						break
					}
				}
				take(q)
				running = append(running, Running{Task: t, Machine: best})
				out = append(out, Decision{Kind: Allocate, Task: t.ID, Org: i, Machine: best})
				break
			}
			// Algorithm 5, on machines neither held, reserved nor taken by a
			// deadline preemption.
			if !(dp[i] < 0) {
				continue
			}
			z := refVictimOrg(s, tot, alloc, pi, dp)
			if z < 0 {
				continue
			}
			y := -1
			var yWaste float64
			for k, r := range running {
				m, mc := r.Machine, s.Machines[r.Machine]
				if r.Task.Org != z || s.held(m) || reserved[m] != "" || locked[m] || pi[i]+mc.BusyMilliW > lim {
					continue
				}
				waste := Waste(r, mc.MFLOPS, s.CheckpointBlockSeconds)
				ym := -1
				if y >= 0 {
					ym = running[y].Machine
				}
				if y < 0 || waste < yWaste || waste == yWaste && (mc.MFLOPS < s.Machines[ym].MFLOPS ||
					mc.MFLOPS == s.Machines[ym].MFLOPS && mc.ID < s.Machines[ym].ID) {
					y, yWaste = k, waste
				}
			}
			if y < 0 || !(PREPreempt(alloc[z], tot.QuotaMFLOPS[z], s.Machines[running[y].Machine].MFLOPS) >= 0 || lim < s.Orgs[z].LimitMilliW) {
				continue
			}
			m := running[y].Machine
			v, waste, kept := stop(m)
			t = take(q)
			running = append(running, Running{Task: t, Machine: m})
			out = append(out, Decision{Kind: Preempt, Task: t.ID, Org: i, Machine: m,
				Victim: v.Task.ID, VictimOrg: z, VictimWasteMFlop: waste, VictimKeptMFlop: kept})
			served = true
			break
		}
		if served {
			continue
		}
		// Nobody could be served: the classed heads, in the same order.
		for _, i := range users {
			q := head(i)
			if !(pi[i] < s.Orgs[i].LimitMilliW && q >= 0) || queued[q].Class == 0 {
				continue
			}
			t := queued[q]
			if t.Class == SoftDeadline {
				if m := niceVictim(i, t); m >= 0 {
					preemptNice(i, q, m)
					served = true
					break
				}
			}
			if m := slot(i, t, t.Class); m >= 0 {
				reserved[m] = take(q).ID
				served = true
				break
			}
		}
		if !served {
			return out, reserved, nil
		}
	}
}
