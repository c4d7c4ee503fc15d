package policy

import (
	"fmt"
	"math"
)

// Validate checks that s is a well-formed view: indices in range, a machine
// busy at most once, positive powers and sizes, task IDs unique. Every
// policy calls it first, so a malformed view is an error, never a panic or a
// silently wrong decision.
func Validate(s *State) error {
	if s == nil {
		return fmt.Errorf("policy state: nil")
	}
	if math.IsNaN(s.CheckpointBlockSeconds) || math.IsInf(s.CheckpointBlockSeconds, 0) || s.CheckpointBlockSeconds < 0 {
		return fmt.Errorf("policy state: checkpoint block %v s: must be a finite number ≥ 0", s.CheckpointBlockSeconds)
	}
	for i, o := range s.Orgs {
		// Few organisations: a quadratic check is cheaper than a map.
		for _, p := range s.Orgs[:i] {
			if p.Name == o.Name {
				return fmt.Errorf("policy state: orgs[%d]: duplicate name %q", i, o.Name)
			}
		}
		if o.LimitMilliW < 0 {
			return fmt.Errorf("policy state: org %q: limit %d mW < 0", o.Name, o.LimitMilliW)
		}
	}
	if len(s.Held) != 0 && len(s.Held) != len(s.Machines) {
		return fmt.Errorf("policy state: %d held flags for %d machines", len(s.Held), len(s.Machines))
	}
	if s.federation() == nil {
		if err := validateMachines(len(s.Orgs), s.Machines); err != nil {
			return err
		}
	}
	tids := make(map[string]struct{}, len(s.Queued)+len(s.Running))
	// checkTask takes a pointer and builds no string unless it fails: it
	// runs for every task at every pass of the simulator.
	checkTask := func(t *Task, where string) error {
		if t.Org < 0 || t.Org >= len(s.Orgs) {
			return fmt.Errorf("policy state: %s task %q: org index %d out of range", where, t.ID, t.Org)
		}
		if t.SizeMFlop < 0 {
			return fmt.Errorf("policy state: %s task %q: size %d MFlop < 0", where, t.ID, t.SizeMFlop)
		}
		if t.Request != (Resources{}) {
			if err := t.Request.validate("task " + t.ID); err != nil {
				return fmt.Errorf("policy state: %s %w", where, err)
			}
		}
		if len(t.Requirements) > MaxRequirements {
			return fmt.Errorf("policy state: %s task %q: %d requirements, more than %d", where, t.ID, len(t.Requirements), MaxRequirements)
		}
		for k, r := range t.Requirements {
			if err := CheckRequirement(r); err != nil {
				return fmt.Errorf("policy state: %s task %q: requirements[%d]: %w", where, t.ID, k, err)
			}
		}
		if _, dup := tids[t.ID]; dup {
			return fmt.Errorf("policy state: %s task %q: duplicate id", where, t.ID)
		}
		tids[t.ID] = struct{}{}
		return nil
	}
	for i := range s.Queued {
		if err := checkTask(&s.Queued[i], "queued"); err != nil {
			return err
		}
	}
	used := make([]Resources, len(s.Machines))
	for i := range s.Running {
		r := &s.Running[i]
		if err := checkTask(&r.Task, "running"); err != nil {
			return err
		}
		if r.Machine < 0 || r.Machine >= len(s.Machines) {
			return fmt.Errorf("policy state: running task %q: machine index %d out of range", r.Task.ID, r.Machine)
		}
		m := &s.Machines[r.Machine]
		capa := m.Capacity.Capacity()
		if !fitsIn(r.Task.Request.Request(), capa.minus(used[r.Machine]), capa) {
			return fmt.Errorf("policy state: machine %q runs more than its capacity (task %q does not fit)", m.ID, r.Task.ID)
		}
		used[r.Machine] = used[r.Machine].plus(r.Task.Request.Request())
		for _, v := range []float64{r.RunSeconds, r.SinceCheckpointSeconds} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("policy state: running task %q: run time %v s must be finite and ≥ 0", r.Task.ID, v)
			}
		}
	}
	return nil
}
