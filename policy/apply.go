package policy

import "fmt"

// ApplyDecisions returns the state after applying ds to s in order, checking
// each against the state as the previous ones left it: a placed task must be
// waiting and match the machine, the machine must have room for it (after
// the victim stops, for a preemption), a preempted machine must run the
// named victim, and no organisation may go over its limit. Placed tasks
// start with RunSeconds 0; a preempted task returns to the queue with the
// work it keeps subtracted. s is not modified.
//
// Tests use it to check the invariants of a pass; it is also the simplest
// statement of what a decision means.
func ApplyDecisions(s *State, ds []Decision) (*State, error) {
	s = withQueued(s)
	out := &State{
		Orgs:                   s.Orgs,
		Machines:               s.Machines,
		Federation:             s.Federation,
		CheckpointBlockSeconds: s.CheckpointBlockSeconds,
	}
	queued := make(map[string]Task, len(s.Queued))
	order := make([]string, 0, len(s.Queued))
	for _, t := range s.Queued {
		queued[t.ID] = t
		order = append(order, t.ID)
	}
	on := make([][]Running, len(s.Machines))
	free := make([]Resources, len(s.Machines))
	for m, mc := range s.Machines {
		free[m] = mc.Capacity.Capacity()
	}
	for _, r := range s.Running {
		on[r.Machine] = append(on[r.Machine], r)
		free[r.Machine] = free[r.Machine].minus(r.Task.Request.Request())
	}
	pi := ComputeUsage(s).PIMilliW
	for k, d := range ds {
		if d.Machine < 0 || d.Machine >= len(s.Machines) {
			return nil, fmt.Errorf("decision %d: machine index %d out of range", k, d.Machine)
		}
		m := s.Machines[d.Machine]
		switch d.Kind {
		case Allocate:
		case Preempt:
			at := -1
			for j, r := range on[d.Machine] {
				if r.Task.ID == d.Victim {
					at = j
				}
			}
			if at < 0 {
				return nil, fmt.Errorf("decision %d: preempt %s: machine %s does not run it", k, d.Victim, m.ID)
			}
			v := on[d.Machine][at].Task
			on[d.Machine] = append(on[d.Machine][:at:at], on[d.Machine][at+1:]...)
			free[d.Machine] = free[d.Machine].plus(v.Request.Request())
			pi[v.Org] -= ShareOf(m.Capacity, v.Request).Of(m.BusyMilliW)
			v.SizeMFlop = remainingAfter(v.SizeMFlop, d.VictimKeptMFlop)
			queued[v.ID] = v
			order = append(order, v.ID)
		default:
			return nil, fmt.Errorf("decision %d: unknown kind %v", k, d.Kind)
		}
		t, ok := queued[d.Task]
		if !ok {
			return nil, fmt.Errorf("decision %d: task %s is not waiting", k, d.Task)
		}
		if t.Org != d.Org {
			return nil, fmt.Errorf("decision %d: task %s belongs to org %d, not %d", k, d.Task, t.Org, d.Org)
		}
		if why := Mismatch(m, t, s.Orgs); why != "" {
			return nil, fmt.Errorf("decision %d: task %s on %s: %s", k, d.Task, m.ID, why)
		}
		if !Eligible(s.Machines, t, s.Orgs)[d.Machine] {
			return nil, fmt.Errorf("decision %d: task %s on %s: it avoids the machine and another matches it", k, d.Task, m.ID)
		}
		if !fitsIn(t.Request.Request(), free[d.Machine], m.Capacity.Capacity()) {
			return nil, fmt.Errorf("decision %d: task %s on %s: no room (%s)", k, d.Task, m.ID,
				unmetResource(t.Request.Request(), free[d.Machine], m.Capacity.Capacity()))
		}
		draw := ShareOf(m.Capacity, t.Request).Of(m.BusyMilliW)
		if pi[t.Org]+draw > s.Orgs[t.Org].LimitMilliW {
			return nil, fmt.Errorf("decision %d: task %s on %s: org %s would draw %d mW over its limit %d mW",
				k, d.Task, m.ID, s.Orgs[t.Org].Name, pi[t.Org]+draw, s.Orgs[t.Org].LimitMilliW)
		}
		pi[t.Org] += draw
		free[d.Machine] = free[d.Machine].minus(t.Request.Request())
		delete(queued, d.Task)
		on[d.Machine] = append(on[d.Machine], Running{Task: t, Machine: d.Machine})
	}
	for _, id := range order {
		if t, ok := queued[id]; ok {
			out.Queued = append(out.Queued, t)
			delete(queued, id)
		}
	}
	for _, rs := range on {
		out.Running = append(out.Running, rs...)
	}
	return out, nil
}
