package policy

import "fmt"

// Federation is the static part of a State: the machines and who owns them,
// with what every pass derives from them (quotas, power quotas, the order of
// machines by draw). A caller that schedules the same machines many times
// (the simulator at every event, the leader at every pass) builds it once
// with NewFederation and sets State.Federation; Schedule then neither
// re-validates nor re-derives the machines.
//
// The machines slice is taken over: it must not be modified afterwards. A
// State whose Machines is not that very slice (same backing array and
// length) or whose number of organisations differs is scheduled as if
// Federation were nil.
type Federation struct {
	machines []Machine
	nOrgs    int
	tot      Totals
	watt     wattOrder
}

// NewFederation validates machines owned by nOrgs organisations and
// prepares them for scheduling.
func NewFederation(nOrgs int, machines []Machine) (*Federation, error) {
	if err := validateMachines(nOrgs, machines); err != nil {
		return nil, err
	}
	s := &State{Orgs: make([]Org, nOrgs), Machines: machines}
	return &Federation{machines: machines, nOrgs: nOrgs, tot: ComputeTotals(s), watt: newWattOrder(machines)}, nil
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
		if _, dup := mids[m.ID]; dup {
			return fmt.Errorf("policy state: machines[%d]: duplicate id %q", i, m.ID)
		}
		mids[m.ID] = struct{}{}
	}
	return nil
}
