package policy

import "fmt"

// Federation is the static part of a State: the machines and who owns them,
// with what every pass derives from them (quotas, power quotas, the order of
// machines by draw). A caller that schedules the same machines many times
// (the simulator at every event, the leader at every pass) builds it once
// with NewFederation and sets State.Federation; Schedule then neither
// re-validates nor re-derives the machines.
//
// The machines slice is taken over: it must not be modified afterwards,
// except for each machine's MTBFMs, from which nothing is prepared (the
// ledger refreshes them in place at every pass: they grow with the time).
// A State whose Machines is not that very slice (same backing array and
// length) or whose number of organisations differs is scheduled as if
// Federation were nil.
type Federation struct {
	machines []Machine
	nOrgs    int
	tot      Totals
	// watt orders the machines by draw and ranks them by energy
	// (algorithm 4's order), once for every pass.
	watt wattOrder
	// oneSlot: every machine is one slot open to every task (unitMachines).
	oneSlot bool
}

// NewFederation validates machines owned by nOrgs organisations and
// prepares them for scheduling.
func NewFederation(nOrgs int, machines []Machine) (*Federation, error) {
	if err := validateMachines(nOrgs, machines); err != nil {
		return nil, err
	}
	s := &State{Orgs: make([]Org, nOrgs), Machines: machines}
	return &Federation{machines: machines, nOrgs: nOrgs, tot: ComputeTotals(s), watt: newWattOrder(machines), oneSlot: unitMachines(machines)}, nil
}

// federation returns s's prepared federation if it applies to s, else nil.
func (s *State) federation() *Federation {
	f := s.Federation
	if f == nil || f.nOrgs != len(s.Orgs) || len(f.machines) != len(s.Machines) {
		return nil
	}
	if len(s.Machines) > 0 && &f.machines[0] != &s.Machines[0] {
		return nil
	}
	return f
}

func validateMachines(nOrgs int, machines []Machine) error {
	mids := make(map[string]struct{}, len(machines))
	for i, m := range machines {
		if m.Owner < 0 || m.Owner >= nOrgs {
			return fmt.Errorf("policy state: machine %q: owner index %d out of range", m.ID, m.Owner)
		}
		if m.MFLOPS <= 0 || m.BusyMilliW <= 0 {
			return fmt.Errorf("policy state: machine %q: power %d MFLOPS and draw %d mW must be > 0", m.ID, m.MFLOPS, m.BusyMilliW)
		}
		if err := m.Capacity.validate("machine " + m.ID); err != nil {
			return fmt.Errorf("policy state: %w", err)
		}
		if m.MTBFMs < 0 {
			return fmt.Errorf("policy state: machine %q: MTBF %d ms < 0", m.ID, m.MTBFMs)
		}
		if _, dup := mids[m.ID]; dup {
			return fmt.Errorf("policy state: machines[%d]: duplicate id %q", i, m.ID)
		}
		mids[m.ID] = struct{}{}
	}
	return nil
}

// unitMachines says every machine is the papers' machine: one slot
// (Capacity is the zero value or one CPU and nothing else) whose owner
// refuses nothing.
func unitMachines(ms []Machine) bool {
	for _, m := range ms {
		if m.Capacity.Capacity() != (Resources{CPUs: 1}) || !m.Policy.unrestricted() {
			return false
		}
	}
	return true
}

// unitTask says t takes a whole one-slot machine and asks nothing of its
// attributes.
func unitTask(t *Task) bool {
	return t.Request.CPUs <= 1 && t.Request.GPUs == 0 && len(t.Requirements) == 0 && len(t.Avoid) == 0
}

// OneSlot says s is the papers' model: every machine one slot open to
// every task, every task a whole machine. EHOSEP then runs its indexed
// implementation; otherwise the shared-machine pass, which decides the same
// on such states (policy/shared_test.go).
func (s *State) OneSlot() bool {
	if f := s.federation(); f != nil {
		if !f.oneSlot {
			return false
		}
	} else if !unitMachines(s.Machines) {
		return false
	}
	if s.Queue != nil && s.Queue.shaped > 0 {
		return false
	}
	for i := range s.Queued {
		if !unitTask(&s.Queued[i]) {
			return false
		}
	}
	for i := range s.Running {
		if !unitTask(&s.Running[i].Task) {
			return false
		}
	}
	return true
}
