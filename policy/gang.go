package policy

import "fmt"

// Gangs (issue 21; docs/POLICY.md §8, "Gangs on real peers"). A parallel
// job wider than one machine runs as a gang of parts, each asking for the
// same resources of one machine; the parts start together on distinct
// machines of one organisation (whose one peer starts them), or none
// starts. PlaceGang is that rule on a list of free machines, pure: which
// machines, if any, take a gang now. The scheduling pass no longer calls
// it: gangs are placed inside the policy (gangpass.go: GangFirst and
// LiveBackfill, with reservations and the gang's power counted whole), by
// gangOwner, which takes an owner's least-draw machines where PlaceGang
// takes its first ones.

// MaxGangSize bounds the parts of one gang.
const MaxGangSize = 1024

// GangMachine is a machine as a gang placement sees it: its owner and
// what is free on it now (Capacity tells whether memory is counted).
type GangMachine struct {
	ID       string
	Owner    int
	Free     Resources
	Capacity Resources
}

// PlaceGang places a gang of parts parts, each asking for req, on the
// machines free now. machines are in the caller's order of preference
// (the policy's ranking, ties already broken), which decides both the
// owner and the machines: the owner served is the one whose parts-th
// machine fitting a part comes earliest in machines (so the gang's least
// preferred machine is as preferred as it can be), and its first parts
// fitting machines, in the given order, take the parts in turn. ok is
// false, and nothing placed, when no owner has enough: all or nothing.
func PlaceGang(parts int, req Resources, machines []GangMachine) (ids []string, ok bool, err error) {
	if parts < 2 || parts > MaxGangSize {
		return nil, false, fmt.Errorf("gang of %d parts: want 2 to %d", parts, MaxGangSize)
	}
	if err := req.validate("gang part request"); err != nil {
		return nil, false, err
	}
	req = req.Request()
	fitting := map[int][]string{}
	seen := map[string]bool{}
	for _, m := range machines {
		if seen[m.ID] {
			return nil, false, fmt.Errorf("machine %q listed twice", m.ID)
		}
		seen[m.ID] = true
		if !fitsIn(req, m.Free, m.Capacity.Capacity()) {
			continue
		}
		fitting[m.Owner] = append(fitting[m.Owner], m.ID)
		if len(fitting[m.Owner]) == parts {
			return fitting[m.Owner], true, nil
		}
	}
	return nil, false, nil
}
