package policy

import (
	"fmt"
	"strings"
)

// Pending reason codes (stable: the API and `peer tasks` show them).
const (
	// PendingNoMatch: no machine of the federation can ever run the task
	// (its owner refuses the executable or the organisation, an attribute
	// requirement is unmet, or the machine is too small).
	PendingNoMatch = "no_match"
	// PendingPowerLimit: a machine it may use has room for it, but running
	// it there would take its organisation over its power limit
	// (PI + draw > Lim).
	PendingPowerLimit = "power_limit"
	// PendingFairShare: the machines it may run on are busy with other
	// organisations' tasks, and its own organisation already has at least
	// its quota (DP ≥ 0), so EHOSEP does not preempt for it.
	PendingFairShare = "fair_share"
	// PendingNoResources: the machines it may run on have no room for it
	// now, and preempting would not give it any.
	PendingNoResources = "no_free_resources"
	// PendingAvoided: it waits only because of machines it avoids: one
	// that failed an earlier run of it has room for it within its
	// organisation's limit, while the other machines it may use (at least
	// one, else avoidance is lifted: Eligible) have none.
	PendingAvoided = "avoided"
	// PendingNextPass: a machine has room for it within its organisation's
	// limit: the next scheduling pass places it (or another task of its
	// organisation that comes first in its queue).
	PendingNextPass = "next_pass"
	// PendingGang: it is a part of a parallel job (a gang), which waits
	// until one organisation has a machine with room for each part at
	// once (docs/POLICY.md, "Gangs on real peers"). The ledger gives it;
	// Pending never sees gang parts.
	PendingGang = "gang"
)

// PendingReason says why a queued task waits: Code is one of the Pending*
// codes, Detail a sentence for people.
type PendingReason struct {
	Code   string
	Detail string
}

// Pending explains why every queued task of s waits, as EHOSEP sees s
// after its pass (docs/POLICY.md, "Pending reasons"). It is pure and
// depends on s only, so that every peer computes the same reason from the
// same replicated state and nothing is written to the log for it. s must
// be valid (Validate); an invalid s gives no reasons.
func Pending(s *State) map[string]PendingReason {
	s = withQueued(s)
	if Validate(s) != nil {
		return nil
	}
	u := ComputeUsage(s)
	tot := ComputeTotals(s)
	free := make([]Resources, len(s.Machines))
	for m, mc := range s.Machines {
		free[m] = mc.Capacity.Capacity()
	}
	runsOf := make([]map[int]bool, len(s.Machines)) // the organisations each machine runs tasks of
	for _, r := range s.Running {
		free[r.Machine] = free[r.Machine].minus(r.Task.Request.Request())
		if runsOf[r.Machine] == nil {
			runsOf[r.Machine] = map[int]bool{}
		}
		runsOf[r.Machine][r.Task.Org] = true
	}
	out := make(map[string]PendingReason, len(s.Queued))
	for _, t := range s.Queued {
		out[t.ID] = pendingOne(s, t, u, tot, free, runsOf)
	}
	return out
}

func pendingOne(s *State, t Task, u Usage, tot Totals, free []Resources, runsOf []map[int]bool) PendingReason {
	var match []int
	eligible := Eligible(s.Machines, t, s.Orgs)
	for m, ok := range eligible {
		if ok {
			match = append(match, m)
		}
	}
	if len(match) == 0 {
		return PendingReason{PendingNoMatch, "no machine matches: " + firstUnmet(s, t)}
	}
	lim, pi := s.Orgs[t.Org].LimitMilliW, u.PIMilliW[t.Org]
	var minDraw int64 = -1 // the least draw among the machines with room
	room, roomWithin, busyWithOthers := false, false, false
	for _, m := range match {
		mc := s.Machines[m]
		for org := range runsOf[m] {
			if org != t.Org {
				busyWithOthers = true
			}
		}
		if !fitsIn(t.Request.Request(), free[m], mc.Capacity.Capacity()) {
			continue
		}
		draw := ShareOf(mc.Capacity, t.Request).Of(mc.BusyMilliW)
		room = true
		if minDraw < 0 || draw < minDraw {
			minDraw = draw
		}
		if pi+draw <= lim {
			roomWithin = true
		}
	}
	// Resources first: when no machine it may use has room, raising the
	// power limit would not start it.
	if roomWithin {
		return PendingReason{PendingNextPass, "a machine has room for it: waiting for the next scheduling pass"}
	}
	if avoided := avoidedWithRoom(s, t, eligible, free, pi); len(avoided) > 0 {
		return PendingReason{PendingAvoided, fmt.Sprintf("earlier runs failed on %s, which has room for it: it waits for one of the other %d machine(s) it may use",
			strings.Join(avoided, ", "), len(match))}
	}
	switch {
	case room:
		return PendingReason{PendingPowerLimit, fmt.Sprintf("over the power limit of %s: %s in use + %s for this task > %s",
			s.Orgs[t.Org].Name, watts(pi), watts(minDraw), watts(lim))}
	case busyWithOthers && !(DP(u.AllocatedMFLOPS[t.Org], tot.QuotaMFLOPS[t.Org]) < 0):
		return PendingReason{PendingFairShare, fmt.Sprintf("waiting for its fair share: %s already has at least its quota and the machines it may use are busy", s.Orgs[t.Org].Name)}
	}
	return PendingReason{PendingNoResources, fmt.Sprintf("no free resources on the %d machine(s) it may use", len(match))}
}

// avoidedWithRoom names the machines t avoids (and is kept off, eligible
// false) that match it and have room for it within its organisation's
// limit, in machine order.
func avoidedWithRoom(s *State, t Task, eligible []bool, free []Resources, pi int64) []string {
	var out []string
	for m, mc := range s.Machines {
		if eligible[m] || !t.Avoids(mc.ID) || Mismatch(mc, t, s.Orgs) != "" ||
			!fitsIn(t.Request.Request(), free[m], mc.Capacity.Capacity()) ||
			pi+ShareOf(mc.Capacity, t.Request).Of(mc.BusyMilliW) > s.Orgs[t.Org].LimitMilliW {
			continue
		}
		out = append(out, mc.ID)
	}
	return out
}

// firstUnmet names the first constraint, in a fixed order (organisation,
// executable, wall-clock cap, each requirement in the task's order, size),
// that no machine left by the previous ones meets.
func firstUnmet(s *State, t Task) string {
	org := orgName(s.Orgs, t.Org)
	left := make([]Machine, 0, len(s.Machines))
	for _, m := range s.Machines {
		if m.Policy.allowsOrg(org, orgName(s.Orgs, m.Owner)) {
			left = append(left, m)
		}
	}
	if len(s.Machines) == 0 {
		return "the federation has no machine up"
	}
	if len(left) == 0 {
		return fmt.Sprintf("no machine's owner accepts organisation %s", org)
	}
	left = keep(left, func(m Machine) bool { return m.Policy.allowsExecutable(t.Executable) })
	if len(left) == 0 {
		return fmt.Sprintf("no machine's owner allows executable %s", t.Executable)
	}
	left = keep(left, func(m Machine) bool { return m.Policy.allowsWall(t.WallLimitMs) })
	if len(left) == 0 {
		return fmt.Sprintf("every owner caps runs below the task's wall limit of %d ms", t.WallLimitMs)
	}
	for _, r := range t.Requirements {
		left = keep(left, func(m Machine) bool { return r.met(m.Attrs) })
		if len(left) == 0 {
			return "no machine meets requirement " + r.String()
		}
	}
	req := t.Request.Request()
	for _, res := range []struct {
		name string
		need int64
		has  func(Resources) bool
	}{
		{"cpus", req.CPUs, func(c Resources) bool { return c.CPUs >= req.CPUs }},
		{"gpus", req.GPUs, func(c Resources) bool { return c.GPUs >= req.GPUs }},
		{"memory bytes", req.MemoryBytes, func(c Resources) bool { return c.MemoryBytes == 0 || c.MemoryBytes >= req.MemoryBytes }},
	} {
		left = keep(left, func(m Machine) bool { return res.has(m.Capacity.Capacity()) })
		if len(left) == 0 {
			return fmt.Sprintf("no machine has %d %s", res.need, res.name)
		}
	}
	return "no machine meets every constraint together"
}

func keep(ms []Machine, ok func(Machine) bool) []Machine {
	out := ms[:0:0]
	for _, m := range ms {
		if ok(m) {
			out = append(out, m)
		}
	}
	return out
}

func watts(milliW int64) string { return fmt.Sprintf("%g W", float64(milliW)/1000) }
