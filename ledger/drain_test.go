package ledger

import (
	"bytes"
	"slices"
	"testing"
)

func drain(org, machine string, drained bool, at int64) Command {
	c := act(org, at)
	c.DrainMachine = &DrainMachine{Machine: machine, Drained: drained}
	return c
}

// TestDrainRefusals: a drain that is not the owner's, of an unknown or
// malformed machine, is refused with its code and changes nothing.
func TestDrainRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  Command
		code Code
	}{
		{"another organisation's machine", drain("uni-b", "uni-a/m1", true, 3000), CodeNotOwner},
		{"unknown machine", drain("uni-a", "uni-a/m9", true, 3000), CodeUnknownMachine},
		{"malformed machine", drain("uni-a", "m1", true, 3000), CodeMalformed},
		{"unregistered organisation", drain("uni-z", "uni-z/m1", true, 3000), CodeUnknownOrg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base(t)
			before := f.l.Hash()
			if r := f.apply(tc.cmd); r.Err == nil || r.Err.Code != tc.code {
				t.Fatalf("result %+v, want %s", r, tc.code)
			}
			if f.l.Hash() != before {
				t.Fatal("a refused drain changed the state")
			}
		})
	}
}

// TestDrain: a drained machine leaves the policy's view and takes no
// decision, its running task goes on and ends as usual with its power
// still charged to its organisation's limit in the view; undrained, it
// takes work again; the flag survives a snapshot.
func TestDrain(t *testing.T) {
	f := assignedFixture(t) // uni-a-1 on uni-a/m1, uni-a-2 on uni-a/m2
	f.must(started("uni-a", "uni-a-1", "uni-a/m1", 2600))
	f.must(drain("uni-a", "uni-a/m1", true, 2700))
	f.must(drain("uni-a", "uni-a/m1", true, 2701)) // again: no error
	if m, _ := f.l.Machine("uni-a/m1"); !m.Drained || m.State != MachineUp || m.Task != "uni-a-1" {
		t.Fatalf("drained machine: %+v", m)
	}

	s, vm := f.l.PolicyView(3000, 0)
	if slices.Contains(vm.Machines, "uni-a/m1") {
		t.Fatalf("the view offers the drained machine: %v", vm.Machines)
	}
	for _, r := range s.Running {
		if r.Task.ID == "uni-a-1" {
			t.Fatal("the view lists the drained machine's task as running (the policy could preempt it)")
		}
	}
	if got := s.Orgs[0].LimitMilliW; got != 300_000-100_000 {
		t.Fatalf("uni-a's limit in the view: %d mW, want 300000 less uni-a/m1's 100000", got)
	}

	// Decisions on the drained machine are refused; elsewhere accepted.
	r := f.apply(decide("uni-b", 3000, preempt("uni-b-1", "uni-a/m1", "uni-a-1")))
	if r.AcceptedDecisions() != 0 || r.Decisions[0].Err.Code != CodeMachineDown {
		t.Fatalf("preemption onto a drained machine: %+v", r.Decisions)
	}

	// Its task ends as usual; the machine then stays idle.
	f.must(ended("uni-a", "uni-a-1", "uni-a/m1", 3100, 10_000, false))
	r = f.apply(decide("uni-b", 3200, alloc("uni-a-3", "uni-a/m1")))
	if r.AcceptedDecisions() != 0 || r.Decisions[0].Err.Code != CodeMachineDown {
		t.Fatalf("allocation on a drained machine: %+v", r.Decisions)
	}

	var snap bytes.Buffer
	if err := f.l.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	restored := New()
	if err := restored.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	if m, _ := restored.Machine("uni-a/m1"); !m.Drained || restored.Hash() != f.l.Hash() {
		t.Fatalf("after a snapshot: %+v, hash %s vs %s", m, restored.Hash(), f.l.Hash())
	}

	f.must(drain("uni-a", "uni-a/m1", false, 3300))
	if _, vm := f.l.PolicyView(3400, 0); !slices.Contains(vm.Machines, "uni-a/m1") {
		t.Fatalf("undrained, the machine is not offered: %v", vm.Machines)
	}
	f.must(decide("uni-b", 3400, alloc("uni-a-3", "uni-a/m1")))
}
