package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// TestMachinesDrain: `peer machines drain` and `undrain` on the API over a
// real ledger: the organisation's own machine, by name or ID, is drained
// and marked; another organisation's machine is refused and the ledger
// left as it was; bad arguments are usage errors.
func TestMachinesDrain(t *testing.T) {
	b, data := fixture(t) // organisation alpha: alpha/a1, alpha/a2; beta: beta/b1
	runMachinesCases(t, b, data, "drained", func(m api.MachineView) bool { return m.Drained }, []machinesCase{
		{"drain by name", "", []string{"drain", "a1"}, 0, "alpha/a1 drained: no new work", "", map[string]bool{"alpha/a1": true}},
		{"drain again", "", []string{"drain", "alpha/a1"}, 0, "alpha/a1 drained", "", map[string]bool{"alpha/a1": true}},
		{"another organisation's machine", "", []string{"drain", "beta/b1"}, 1, "", "drain beta/b1: forbidden: ", map[string]bool{"beta/b1": false}},
		{"unknown machine", "", []string{"drain", "a9"}, 1, "", "not_found", nil},
		{"malformed machine", "", []string{"drain", "a b"}, 2, "", "want a machine's name", nil},
		{"no machine", "", []string{"undrain"}, 2, "", "usage", nil},
		{"undrain", "", []string{"undrain", "a1"}, 0, "alpha/a1 takes work again", "", map[string]bool{"alpha/a1": false}},
	})

	t.Run("listing marks it", func(t *testing.T) {
		if code, _, errs := runCLI(t, "machines", "drain", "a2", "--data", data); code != 0 {
			t.Fatal(errs)
		}
		_, out, _ := runCLI(t, "machines", "--data", data)
		if !strings.Contains(out, "up (drained)") {
			t.Fatalf("peer machines:\n%s", out)
		}
		_, out, _ = runCLI(t, "machines", "--json", "--data", data)
		var ms []api.MachineView
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Drained != (m.ID == "alpha/a2") {
				t.Fatalf("--json: %+v", m)
			}
		}
	})
}
