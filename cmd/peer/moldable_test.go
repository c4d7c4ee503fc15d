package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// TestPrintChoices: every alternative is printed with its prediction, the
// chosen one marked; one predicted never to start says so.
func TestPrintChoices(t *testing.T) {
	out := submitOutput{Moldable: []api.MoldableChoice{{Task: 0, MoldableView: api.MoldableView{Chosen: 1, Alternatives: []api.AlternativeView{
		{Nodes: 2, CPUs: 4, WallLimitMs: 3_600_000},
		{Nodes: 1, CPUs: 4, WallLimitMs: 6_600_000, PredictedStartMs: 1_800_000_000_000, PredictedEndMs: 1_800_006_600_000},
	}}}}}
	var b bytes.Buffer
	if err := printChoices(&b, out); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"tasks[0]: SA_s chose alternative 1\n",
		"alternative 0  2 × 4 cpus for 1h0m0s: predicted never to start\n",
		"alternative 1  1 × 4 cpus for 1h50m0s: predicted 2027-01-15 08:00:00Z to 2027-01-15 09:50:00Z (chosen by SA_s)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestApplyChoices: a chosen task's parts are its chosen alternative's.
func TestApplyChoices(t *testing.T) {
	ts := []api.SubmitTask{{Nodes: 2, Alternatives: []api.SubmitAlternative{{Nodes: 2}, {Nodes: 1}}}, {}}
	applyChoices(ts, []api.MoldableChoice{{Task: 0, MoldableView: api.MoldableView{Chosen: 1, Alternatives: []api.AlternativeView{{Nodes: 2}, {Nodes: 1}}}}})
	if ts[0].Nodes != 1 || taskCount(ts) != 2 {
		t.Fatalf("nodes %d, %d task IDs", ts[0].Nodes, taskCount(ts))
	}
}
