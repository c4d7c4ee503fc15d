package policy

import (
	"fmt"
	"sort"
)

// referenceEHOSEP is a plain transliteration of seed 000 algorithms 3-5
// (L755-893): every quantity is recomputed from scratch by a scan before
// every decision and the organisation list is fully re-sorted. It is slow
// and obviously correct; the indexed EHOSEP must agree with it decision for
// decision.
func referenceEHOSEP(s *State, bestFit bool) ([]Decision, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	p := newPlainPass(s, bestFit)
	tot := ComputeTotals(s)
	sums := func() (alloc, pi []int64) {
		alloc, pi = make([]int64, len(s.Orgs)), make([]int64, len(s.Orgs))
		for m, mc := range s.Machines {
			if p.busy[m] {
				alloc[p.running[m].Org] += mc.MFLOPS
				pi[p.running[m].Org] += mc.BusyMilliW
			}
		}
		return alloc, pi
	}
	for step := 0; ; step++ {
		if step > p.limit() {
			return nil, fmt.Errorf("reference: no quiescence")
		}
		alloc, pi := sums()
		dp := make([]float64, len(s.Orgs))
		for i := range dp {
			dp[i] = DP(alloc[i], tot.QuotaMFLOPS[i])
		}
		// Line 5: sort by DP ascending, ties larger quota, smaller power quota.
		users := make([]int, len(s.Orgs))
		for i := range users {
			users[i] = i
		}
		sort.Slice(users, func(a, b int) bool {
			x, y := users[a], users[b]
			return orgBefore(dp[x], dp[y], tot.QuotaMFLOPS[x], tot.QuotaMFLOPS[y],
				tot.PowerQuotaMilliW[x], tot.PowerQuotaMilliW[y], s.Orgs[x].Name, s.Orgs[y].Name)
		})
		served := false
		for _, i := range users { // line 6
			lim := s.Orgs[i].LimitMilliW
			if !(pi[i] < lim && len(p.queue[i].items) > 0) { // line 7
				continue
			}
			// Line 8: a free machine that fits the limit.
			best := -1
			for m, mc := range s.Machines {
				if p.busy[m] || mc.BusyMilliW+pi[i] > lim {
					continue
				}
				if best < 0 || energyBetter(mc, s.Machines[best]) {
					best = m
				}
			}
			if best >= 0 {
				p.allocate(i, best) // algorithm 4
				served = true
				break
			}
			// Algorithm 5.
			if !(dp[i] < 0) {
				continue
			}
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
			if z < 0 {
				continue
			}
			y := -1
			for m, mc := range s.Machines {
				if !p.busy[m] || p.running[m].Org != z || mc.BusyMilliW+pi[i] > lim {
					continue
				}
				if y < 0 || victimBetter(p.waste[m], p.waste[y], mc, s.Machines[y]) {
					y = m
				}
			}
			if y < 0 {
				continue
			}
			if PREPreempt(alloc[z], tot.QuotaMFLOPS[z], s.Machines[y].MFLOPS) >= 0 || lim < s.Orgs[z].LimitMilliW {
				p.preemptFor(i, y)
				served = true
				break
			}
		}
		if !served {
			return p.out, nil
		}
	}
}
