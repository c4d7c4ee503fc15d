package apiconv

import (
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestSubmitGang: a task of nodes k becomes the k parts of one gang, in
// rank order, which the ledger accepts; nodes 0 and 1 are one task.
func TestSubmitGang(t *testing.T) {
	req := api.SubmitRequest{Job: "mpi", Tasks: []api.SubmitTask{
		{Name: "solve", Argv: []string{"mpirun", "./solve"}, Env: map[string]string{"N": "8"}, SizeMFlop: 10, WallLimitMs: 1000, CPUs: 4, Nodes: 3},
		{Name: "post", Argv: []string{"./post"}, SizeMFlop: 1, WallLimitMs: 1000, Nodes: 1},
		{Name: "plain", Argv: []string{"./post"}, SizeMFlop: 1, WallLimitMs: 1000},
	}}
	if err := api.ValidateSubmit(req, api.SubmitLimits{}); err != nil {
		t.Fatal(err)
	}
	b := SubmitTasks(req, "r1")
	if len(b.Tasks) != 5 {
		t.Fatalf("%d specs, want 5", len(b.Tasks))
	}
	for r := 0; r < 3; r++ {
		g := b.Tasks[r].Spec.Gang
		if g == nil || g.Size != 3 || g.Rank != r || b.Tasks[r].Spec.CPUs != 4 {
			t.Fatalf("part %d: %+v", r, b.Tasks[r].Spec)
		}
	}
	b.Tasks[1].Spec.Env["N"] = "changed"
	if b.Tasks[0].Spec.Env["N"] != "8" {
		t.Fatal("parts share their environment")
	}
	b.Tasks[1].Spec.Env["N"] = "8"
	if b.Tasks[3].Spec.Gang != nil || b.Tasks[4].Spec.Gang != nil {
		t.Fatal("nodes 0 or 1 made a gang")
	}
	c := ledger.Command{Org: "uni-a", Peer: "12D3KooWunixa", AtMs: 1, SubmitTasks: b}
	if _, err := ledger.EncodeCommand(c); err != nil {
		t.Fatalf("the ledger refuses the parts: %v", err)
	}
	v := Task(&ledger.Task{ID: "uni-a-2", Spec: ledger.Spec{Gang: &ledger.Gang{ID: "uni-a-1", Size: 3, Rank: 1}}})
	if v.Gang == nil || *v.Gang != (api.GangView{ID: "uni-a-1", Rank: 1, Size: 3}) {
		t.Fatalf("task view gang %+v", v.Gang)
	}
	bad := req
	bad.Tasks = []api.SubmitTask{{Argv: []string{"x"}, SizeMFlop: 1, WallLimitMs: 1, Nodes: api.MaxNodes + 1}}
	if err := api.ValidateSubmit(bad, api.SubmitLimits{}); err == nil {
		t.Fatal("nodes above the bound accepted")
	}
}
