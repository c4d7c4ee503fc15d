package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// TestClientAgainstNode serves the API over a real single-peer federation
// (package node: libp2p host on loopback, Raft with bolt stores, the
// EHOSEP leader, the process executor) and drives it with the CLI from
// the data directory `config.Init` made, as a user would: submit a job of
// real commands, follow it to the end, read its logs and ledger.
func TestClientAgainstNode(t *testing.T) {
	ctx, peer := startPeer(t)
	tmp := t.TempDir()
	n, data := peer.Node, peer.DataDir

	cli := func(args ...string) string {
		t.Helper()
		code, out, errs := runCLI(t, append(args, "--data", data)...)
		if code != 0 {
			t.Fatalf("peer %v: exit %d: %s", args, code, errs)
		}
		return out
	}

	var st api.Status
	if err := json.Unmarshal([]byte(cli("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Self != n.ID().String() || st.Leader != st.Self || st.Org != "alpha" || len(st.Peers) != 1 || !st.Peers[0].Voter ||
		len(st.Orgs) != 1 || st.Orgs[0].Name != "alpha" || st.Orgs[0].QuotaGFLOPS != 10 || st.Orgs[0].PowerQuotaW != 100 {
		t.Fatalf("status %+v", st)
	}

	job := filepath.Join(tmp, "job.yaml")
	if err := os.WriteFile(job, []byte(`name: greet
defaults: {size: 0.5, wall_clock_limit: 1m, outputs: [out.txt]}
tasks:
  - {name: hello, argv: [/bin/sh, -c, 'echo hello from $WHO | tee out.txt'], env: {WHO: alpha}}
  - {name: oops, argv: [/bin/sh, -c, 'echo oops >&2; exit 3']}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var sub submitOutput
	if err := json.Unmarshal([]byte(cli("submit", "--json", job)), &sub); err != nil {
		t.Fatal(err)
	}
	if len(sub.TaskIDs) != 2 || sub.TaskIDs[0] != "alpha-1" || sub.TaskIDs[1] != "alpha-2" {
		t.Fatalf("submitted %+v", sub)
	}

	// Follow the job until both tasks end.
	var ts []api.TaskView
	for {
		if err := json.Unmarshal([]byte(cli("tasks", "--json")), &ts); err != nil {
			t.Fatal(err)
		}
		if len(ts) == 2 && ts[0].State == "done" && ts[1].State == "failed" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tasks never ended: %+v", ts)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if ts[0].Name != "hello" || ts[0].Machine != "alpha/m1" || ts[0].Attempts != 1 || ts[1].ExitCode != 3 {
		t.Errorf("tasks %+v", ts)
	}
	if out := cli("logs", "alpha-1"); out != "hello from alpha\n" {
		t.Errorf("stdout %q", out)
	}
	if out := cli("logs", "--stderr", "alpha-2"); out != "oops\n" {
		t.Errorf("stderr %q", out)
	}
	var d api.TaskDetail
	if err := json.Unmarshal([]byte(cli("task", "--json", "alpha-1")), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Segments) != 1 || d.Segments[0].Machine != "alpha/m1" || d.Segments[0].Outcome != "done" || d.Segments[0].EnergyJ <= 0 {
		t.Errorf("segments %+v", d.Segments)
	}
	if len(d.OutputFiles) == 1 {
		if b, err := os.ReadFile(d.OutputFiles[0]); err != nil || string(b) != "hello from alpha\n" {
			t.Errorf("output file %s: %q %v", d.OutputFiles[0], b, err)
		}
	} else {
		t.Errorf("output files %v", d.OutputFiles)
	}
	var l api.LedgerView
	if err := json.Unmarshal([]byte(cli("ledger", "--json")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Orgs) != 1 || l.Orgs[0].UserJ <= 0 || l.Orgs[0].UserJ != l.Orgs[0].OwnerSelfJ || l.StateHash == "" {
		t.Errorf("ledger %+v", l)
	}
	if out := cli("limit", "set", "50%"); !strings.Contains(out, "alpha: power limit 50 W") {
		t.Errorf("limit: %q", out)
	}

	// Error paths against the real daemon.
	code, _, errs := runCLI(t, "task", "alpha-99", "--data", data)
	if code != 1 || !strings.Contains(errs, "task alpha-99: not_found") {
		t.Errorf("unknown task: exit %d: %s", code, errs)
	}
	code, _, errs = runCLI(t, "cancel", "alpha-1", "--data", data)
	if code != 1 || !strings.Contains(errs, "cancel alpha-1: conflict") {
		t.Errorf("cancel a done task: exit %d: %s", code, errs)
	}

	// /metrics over the real node.
	c := api.NewClient(peer.URL, peer.Token, nil)
	m, err := c.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`coopgrid_raft_state{state="Leader"} 1`, `coopgrid_org_limit_watts{org="alpha"} 50`, `coopgrid_org_tasks{org="alpha",state="done"} 1`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
