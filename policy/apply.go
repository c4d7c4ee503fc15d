package policy

import "fmt"

// ApplyDecisions returns the state after applying ds to s in order, checking
// each against the state as the previous ones left it: a placed task must be
// waiting, an allocated machine free, a preempted machine must run the named
// victim, and no organisation may go over its limit. Placed tasks start with
// RunSeconds 0; a preempted task returns to the queue with the work it
// keeps subtracted. s is not modified.
//
// Tests use it to check the invariants of a pass; it is also the simplest
// statement of what a decision means.
func ApplyDecisions(s *State, ds []Decision) (*State, error) {
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
	on := make([]*Running, len(s.Machines))
	for _, r := range s.Running {
		r := r
		on[r.Machine] = &r
	}
	pi := ComputeUsage(s).PIMilliW
	for k, d := range ds {
		if d.Machine < 0 || d.Machine >= len(s.Machines) {
			return nil, fmt.Errorf("decision %d: machine index %d out of range", k, d.Machine)
		}
		m := s.Machines[d.Machine]
		switch d.Kind {
		case Allocate:
			if on[d.Machine] != nil {
				return nil, fmt.Errorf("decision %d: allocate %s on busy machine %s", k, d.Task, m.ID)
			}
		case Preempt:
			r := on[d.Machine]
			if r == nil || r.Task.ID != d.Victim {
				return nil, fmt.Errorf("decision %d: preempt %s: machine %s does not run it", k, d.Victim, m.ID)
			}
			v := r.Task
			v.SizeMFlop = remainingAfter(v.SizeMFlop, d.VictimKeptMFlop)
			queued[v.ID] = v
			order = append(order, v.ID)
			pi[v.Org] -= m.BusyMilliW
			on[d.Machine] = nil
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
		if pi[t.Org]+m.BusyMilliW > s.Orgs[t.Org].LimitMilliW {
			return nil, fmt.Errorf("decision %d: task %s on %s: org %s would draw %d mW over its limit %d mW",
				k, d.Task, m.ID, s.Orgs[t.Org].Name, pi[t.Org]+m.BusyMilliW, s.Orgs[t.Org].LimitMilliW)
		}
		pi[t.Org] += m.BusyMilliW
		delete(queued, d.Task)
		on[d.Machine] = &Running{Task: t, Machine: d.Machine}
	}
	for _, id := range order {
		if t, ok := queued[id]; ok {
			out.Queued = append(out.Queued, t)
			delete(queued, id)
		}
	}
	for _, r := range on {
		if r != nil {
			out.Running = append(out.Running, *r)
		}
	}
	return out, nil
}
