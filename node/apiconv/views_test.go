package apiconv_test

import (
	"testing"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

func TestTaskDetail(t *testing.T) {
	task := ledger.Task{
		ID: "a-1", Org: "a", State: ledger.TaskDone, SizeMFlop: 2500, RemainingMFlop: 500,
		Spec:     ledger.Spec{Name: "n", Env: map[string]string{"K": "v"}, Outputs: []string{"o"}},
		Segments: []ledger.Segment{{Machine: "b/m1", MachineOrg: "b", StartMs: 1, EndMs: 2, EnergyMilliJ: 1500, Outcome: ledger.OutcomeDone}},
	}
	d := apiconv.TaskDetail(&task)
	if d.Machine != "b/m1" || d.SizeGFlop != 2.5 || d.RemainingGFlop != 0.5 || d.Name != "n" || d.State != "done" ||
		len(d.Segments) != 1 || d.Segments[0].EnergyJ != 1.5 || d.Segments[0].MachineOrg != "b" {
		t.Errorf("detail %+v", d)
	}
	// Argv is [] in JSON, never null, even for a task submitted without one.
	if d.Argv == nil || len(d.Argv) != 0 {
		t.Errorf("argv %#v", d.Argv)
	}
	// The view shares no memory with the ledger's task.
	task.Spec.Env["K"] = "changed"
	task.Spec.Outputs[0] = "changed"
	if d.Env["K"] != "v" || d.Outputs[0] != "o" {
		t.Error("the view shares memory with the task")
	}
}

func TestLedgerNeverNil(t *testing.T) {
	if v := apiconv.Ledger(3, "h", nil); v.Orgs == nil || v.AppliedIndex != 3 || v.StateHash != "h" {
		t.Errorf("%+v", v)
	}
	if apiconv.Orgs(nil) == nil || apiconv.Machines(nil) == nil || apiconv.Tasks(nil) == nil {
		t.Error("an empty list converts to nil")
	}
}

// TestMachineUnprotected: the ledger's unprotected flag reaches the view,
// and a protected machine's JSON does not carry it (omitempty).
func TestMachineUnprotected(t *testing.T) {
	m := ledger.Machine{ID: "a/m1", Org: "a", Name: "m1", MFLOPS: 1000, BusyMilliW: 1000, State: ledger.MachineUp}
	if v := apiconv.Machine(m); v.Unprotected {
		t.Errorf("protected machine viewed as unprotected: %+v", v)
	}
	m.Unprotected = true
	if v := apiconv.Machine(m); !v.Unprotected {
		t.Errorf("unprotected machine viewed as protected: %+v", v)
	}
}
