package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestMachinesReclaim: `peer machines reclaim` and `release` over the API
// on a real ledger: the owner's opportunistic machine is reclaimed (its
// running task evicted) and released; another organisation's machine, a
// dedicated machine and a client with a bad token are refused and leave
// the ledger as it was; peer machines shows the stability columns once the
// federation tracks stability.
func TestMachinesReclaim(t *testing.T) {
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewServer(b, api.ServerOptions{Token: cliToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	data, badToken := dataDir(t, cliToken, addr), dataDir(t, "not-the-token", addr)
	// Two opportunistic machines (version-3 commands: stability is
	// tracked from the first), alpha's o1 running beta's task.
	for _, c := range []ledger.Command{
		{AddMachine: &ledger.AddMachine{Machine: ledger.MachineSpec{Name: "o1", MFLOPS: 5_000, BusyMilliW: 50_000, Opportunistic: true}}},
		{Org: "beta", Peer: apitest.PeerBeta, AddMachine: &ledger.AddMachine{Machine: ledger.MachineSpec{Name: "o2", MFLOPS: 5_000, BusyMilliW: 50_000, Opportunistic: true}}},
		{Org: "beta", Peer: apitest.PeerBeta, SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"/bin/true"}, WallLimitMs: 60_000}}}}},
		{Decisions: &ledger.Decisions{Decisions: []ledger.Decision{{Kind: ledger.DecideAllocate, Task: "beta-2", Machine: "alpha/o1"}}}},
		{TaskStarted: &ledger.TaskStarted{Task: "beta-2", Machine: "alpha/o1"}},
	} {
		if r, err := b.Apply(c); err != nil || !r.Applied() || (c.Decisions != nil && r.AcceptedDecisions() != 1) {
			t.Fatalf("setup %s: %v %+v", r.Kind, err, r)
		}
	}
	runMachinesCases(t, b, data, "reclaimed", func(m api.MachineView) bool { return m.Reclaimed }, []machinesCase{
		{"another organisation's machine", "", []string{"reclaim", "beta/o2"}, 1, "", "reclaim beta/o2: forbidden: ", map[string]bool{"beta/o2": false}},
		{"a bad token", badToken, []string{"reclaim", "o1"}, 1, "", "refused the token", map[string]bool{"alpha/o1": false}},
		{"a dedicated machine", "", []string{"reclaim", "a1"}, 1, "", "not opportunistic", nil},
		{"unknown machine", "", []string{"reclaim", "a9"}, 1, "", "not_found", nil},
		{"malformed machine", "", []string{"release", "a b"}, 2, "", "want a machine's name", nil},
		{"reclaim by name", "", []string{"reclaim", "o1"}, 0, "alpha/o1 reclaimed", "", map[string]bool{"alpha/o1": true}},
		{"reclaim again", "", []string{"reclaim", "alpha/o1"}, 0, "alpha/o1 reclaimed", "", map[string]bool{"alpha/o1": true}},
		{"release", "", []string{"release", "o1"}, 0, "alpha/o1 released", "", map[string]bool{"alpha/o1": false}},
	})
	if task, err := b.Task(context.Background(), "beta-2"); err != nil || task.State != "queued" {
		t.Fatalf("the reclaimed machine's task: %+v %v", task, err)
	}
	st := machineView(t, b, "alpha/o1").Stability
	if st == nil || st.Reclaims != 1 || st.Failures != 0 || st.Availability != 1 {
		t.Fatalf("alpha/o1 stability %+v", st)
	}
	_, out, _ := runCLI(t, "machines", "--data", data)
	if !strings.Contains(out, "MTBF") || !strings.Contains(out, "0+1r") || !strings.Contains(out, "up (opportunistic)") {
		t.Fatalf("peer machines:\n%s", out)
	}
	_, out, _ = runCLI(t, "machines", "--json", "--data", data)
	var ms []api.MachineView
	if err := json.Unmarshal([]byte(out), &ms); err != nil || ms[0].Stability == nil {
		t.Fatalf("peer machines --json: %v\n%s", err, out)
	}
}
