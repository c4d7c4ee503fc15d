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
	var names map[string]struct{}
	if len(s.Orgs) > 16 {
		names = make(map[string]struct{}, len(s.Orgs))
	}
	for i, o := range s.Orgs {
		// Few organisations: a quadratic check is cheaper than a map.
		dup := false
		if names != nil {
			_, dup = names[o.Name]
			names[o.Name] = struct{}{}
		} else {
			for _, p := range s.Orgs[:i] {
				dup = dup || p.Name == o.Name
			}
		}
		if dup {
			return fmt.Errorf("policy state: orgs[%d]: duplicate name %q", i, o.Name)
		}
		if o.LimitMilliW < 0 {
			return fmt.Errorf("policy state: org %q: limit %d mW < 0", o.Name, o.LimitMilliW)
		}
	}
	if s.NowMs < 0 || s.NowMs > maxDeadlineMs {
		return fmt.Errorf("policy state: now %d ms outside [0, 2^60]", s.NowMs)
	}
	if len(s.Held) != 0 && len(s.Held) != len(s.Machines) {
		return fmt.Errorf("policy state: %d held flags for %d machines", len(s.Held), len(s.Machines))
	}
	if s.federation() == nil {
		if err := validateMachines(len(s.Orgs), s.Machines); err != nil {
			return err
		}
	}
	if s.Queue != nil {
		if len(s.Queued) > 0 {
			return fmt.Errorf("policy state: both Queued and Queue are set")
		}
		if s.Queue.Orgs() != len(s.Orgs) {
			return fmt.Errorf("policy state: the queue knows %d organisations, the state %d", s.Queue.Orgs(), len(s.Orgs))
		}
	}
	tids := make(map[string]struct{}, len(s.Queued)+len(s.Running))
	// checkTask takes a pointer and builds no string unless it fails: it
	// runs for every task at every pass of the simulator.
	checkTask := func(t *Task, where string) error {
		if t.Org < 0 || t.Org >= len(s.Orgs) {
			return fmt.Errorf("policy state: %s task %q: org index %d out of range", where, t.ID, t.Org)
		}
		if err := checkTaskShape(t); err != nil {
			return fmt.Errorf("policy state: %s %w", where, err)
		}
		if _, dup := tids[t.ID]; dup {
			return fmt.Errorf("policy state: %s task %q: duplicate id", where, t.ID)
		}
		// The queue's tasks were checked when they were added, and are
		// unique among themselves.
		if s.Queue != nil && s.Queue.Has(t.ID) {
			return fmt.Errorf("policy state: %s task %q: duplicate id (also waiting in the queue)", where, t.ID)
		}
		tids[t.ID] = struct{}{}
		return nil
	}
	for i := range s.Queued {
		if err := checkTask(&s.Queued[i], "queued"); err != nil {
			return err
		}
	}
	if err := validateGangs(s, checkTask); err != nil {
		return err
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

// checkTaskShape checks what Validate checks of one task by itself: size,
// request, requirements (not its organisation index, nor uniqueness).
func checkTaskShape(t *Task) error {
	if t.SizeMFlop < 0 {
		return fmt.Errorf("task %q: size %d MFlop < 0", t.ID, t.SizeMFlop)
	}
	// Only a task that declares resources has them checked: building the
	// "task <ID>" context for every task of every pass cost 7.5 % of the
	// reproduction campaign (issue 19).
	if t.Request != (Resources{}) {
		if err := t.Request.validate("task " + t.ID); err != nil {
			return err
		}
	}
	if t.Class != 0 {
		if err := checkTaskClass(t); err != nil {
			return err
		}
	}
	if len(t.Requirements) > MaxRequirements {
		return fmt.Errorf("task %q: %d requirements, more than %d", t.ID, len(t.Requirements), MaxRequirements)
	}
	for k, r := range t.Requirements {
		if err := CheckRequirement(r); err != nil {
			return fmt.Errorf("task %q: requirements[%d]: %w", t.ID, k, err)
		}
	}
	return nil
}
