package ledger

import (
	"fmt"
	"slices"
	"sort"

	"github.com/coopgrid/coopgrid/policy"
)

// MaxTimelinePoints bounds the sample times of one Timeline call.
const MaxTimelinePoints = 2000

// OrgTimeline is one organisation's recent past as the tasks' segments
// record it, one value per sample time (Timeline).
type OrgTimeline struct {
	Org string
	// AllocatedMFLOPS and PIMilliW at each time: the machines (their
	// share, for a task sharing one) running the organisation's tasks,
	// counted as OrgInfo counts them now.
	AllocatedMFLOPS []int64
	PIMilliW        []int64
	// UserMilliJ and OwnerMilliJ: the energy account at each time, that is
	// today's account less the segments closed after it, so that the
	// last value is the account itself.
	UserMilliJ  []int64
	OwnerMilliJ []int64
	// DP is policy.DP of the allocation at each time against the quota
	// now (the ledger keeps no history of quotas); nil when that is 0.
	DP []*float64
}

// Timeline reconstructs each organisation's allocated MFLOPS, PI and energy
// account at the given times (strictly increasing, at most
// MaxTimelinePoints) from the segments of the tasks this replica holds, in
// registration order. It is what a dashboard shows as the recent past when
// it opens: it changes nothing, and it is approximate in two ways the
// ledger cannot do better: a segment on a machine removed since counts
// for energy but not for allocation or PI, a task placed but not started
// counts at the last time only (the ledger does not record when it was
// placed), and it knows nothing of what left the replicated state. With
// the last time now, the last values are the live ones.
func (l *Ledger) Timeline(times []int64) ([]OrgTimeline, error) {
	if len(times) > MaxTimelinePoints {
		return nil, fmt.Errorf("history: %d sample times, at most %d", len(times), MaxTimelinePoints)
	}
	for i := 1; i < len(times); i++ {
		if times[i] <= times[i-1] {
			return nil, fmt.Errorf("history: sample time %d (%d ms) is not after the one before it", i, times[i])
		}
	}
	out := make([]OrgTimeline, len(l.order))
	idx := make(map[string]int, len(l.order))
	for i, name := range l.order {
		idx[name] = i
		n := len(times)
		out[i] = OrgTimeline{Org: name, AllocatedMFLOPS: make([]int64, n), PIMilliW: make([]int64, n),
			UserMilliJ: make([]int64, n), OwnerMilliJ: make([]int64, n)}
		acct := l.orgs[name].Energy
		for k := range times {
			out[i].UserMilliJ[k] = acct.UserMilliJ
			out[i].OwnerMilliJ[k] = acct.OwnerMilliJ()
		}
	}
	// after is the first sample at or after ms.
	after := func(ms int64) int { return sort.Search(len(times), func(k int) bool { return times[k] >= ms }) }
	for _, t := range l.tasks {
		user, ok := idx[t.Org]
		if !ok {
			continue
		}
		if m := l.machines[t.Machine]; t.State == TaskAssigned && m != nil && len(times) > 0 {
			// Placed, not started: the ledger counts it in PI already but
			// does not record since when, so it counts at the last time.
			sh := m.share(t)
			out[user].AllocatedMFLOPS[len(times)-1] += sh.Of(m.MFLOPS)
			out[user].PIMilliW[len(times)-1] += sh.Of(m.BusyMilliW)
		}
		for _, s := range t.Segments {
			if s.EndMs > 0 {
				// The account holds this segment's energy from EndMs on:
				// the samples before it did not have it yet.
				if owner, ok := idx[s.MachineOrg]; ok {
					subtractBefore(out[owner].OwnerMilliJ, after(s.EndMs), s.EnergyMilliJ)
				}
				subtractBefore(out[user].UserMilliJ, after(s.EndMs), s.EnergyMilliJ)
			}
			m := l.machines[s.Machine]
			if m == nil {
				continue
			}
			sh := m.share(t)
			gf, pw := sh.Of(m.MFLOPS), sh.Of(m.BusyMilliW)
			// Running over [StartMs, EndMs), open-ended while it runs.
			lo, hi := after(s.StartMs), len(times)
			if s.EndMs > 0 {
				hi = after(s.EndMs)
			}
			for k := lo; k < hi; k++ {
				out[user].AllocatedMFLOPS[k] += gf
				out[user].PIMilliW[k] += pw
			}
		}
	}
	quota := make(map[string]int64, len(l.order))
	for _, m := range l.machines {
		if m.State == MachineUp {
			quota[m.Org] += m.MFLOPS
		}
	}
	for i := range out {
		out[i].DP = make([]*float64, len(times))
		if q := quota[out[i].Org]; q > 0 {
			for k, a := range out[i].AllocatedMFLOPS {
				dp := policy.DP(a, q)
				out[i].DP[k] = &dp
			}
		}
		for _, xs := range [][]int64{out[i].UserMilliJ, out[i].OwnerMilliJ} {
			for k, v := range xs {
				xs[k] = max(v, 0)
			}
		}
	}
	return out, nil
}

// subtractBefore takes x from the first n values of xs.
func subtractBefore(xs []int64, n int, x int64) {
	for k := range xs[:n] {
		xs[k] -= x
	}
}

// TimelineTimes is the sample times of a history of points samples ending
// at nowMs and spanning windowMs (oldest first, the last one nowMs).
func TimelineTimes(nowMs, windowMs int64, points int) []int64 {
	if points < 1 {
		return nil
	}
	if points == 1 || windowMs <= 0 {
		return []int64{nowMs}
	}
	times := make([]int64, 0, points)
	for k := range points {
		t := nowMs - windowMs + windowMs*int64(k)/int64(points-1)
		if len(times) == 0 || t > times[len(times)-1] {
			times = append(times, t)
		}
	}
	return slices.Clip(times)
}
