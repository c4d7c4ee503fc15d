package main

import (
	"context"
	"encoding/json"
	"os"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/node/nodetest"
)

// TestMachinesMarksUnprotected: a real peer whose owner opted in to tasks
// running as the peer's own user (unsafe_run_as_peer_user, no sandbox: a
// root peer) declares its machine unprotected in the ledger, and `peer
// machines` and the API show it; a peer with a run_as user does not
// (issue 16, docs/SECURITY.md "Tasks").
func TestMachinesMarksUnprotected(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two real peers (a few seconds)")
	}
	if os.Geteuid() != 0 {
		// Not root, the opt-in gives the Landlock sandbox where the kernel
		// has it (protected), and run_as cannot switch users.
		t.Skip("needs root: only a root peer runs tasks unprotected with the opt-in, and switches to run_as")
	}
	if _, err := user.Lookup("coopgrid-task"); err != nil {
		t.Skipf("needs the run_as user coopgrid-task: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	check := func(t *testing.T, p *nodetest.Peer, wantUnprotected bool) {
		t.Helper()
		c := api.NewClient(p.URL, p.Token, nil)
		ms, err := c.Machines(ctx)
		if err != nil || len(ms) != 1 || ms[0].ID != "alpha/m1" || ms[0].Unprotected != wantUnprotected {
			t.Fatalf("API machines %+v (%v), want alpha/m1 unprotected=%v", ms, err, wantUnprotected)
		}
		code, out, errs := runCLI(t, "machines", "--data", p.DataDir)
		if code != 0 {
			t.Fatalf("peer machines: exit %d: %s", code, errs)
		}
		if got := strings.Contains(out, "alpha/m1 "+unprotectedMark) && strings.Contains(out, unprotectedNote); got != wantUnprotected {
			t.Fatalf("peer machines, want the unprotected mark and note: %v:\n%s", wantUnprotected, out)
		}
		if !wantUnprotected && strings.Contains(out, "UNPROTECTED") {
			t.Fatalf("peer machines marks a protected machine:\n%s", out)
		}
		code, out, errs = runCLI(t, "machines", "--json", "--data", p.DataDir)
		if code != 0 {
			t.Fatalf("peer machines --json: exit %d: %s", code, errs)
		}
		var js []map[string]any
		if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 1 {
			t.Fatalf("peer machines --json: %v\n%s", err, out)
		}
		if v, ok := js[0]["unprotected"]; ok != wantUnprotected || (ok && v != true) {
			t.Fatalf("peer machines --json: unprotected %v (present %v), want %v", v, ok, wantUnprotected)
		}
	}

	t.Run("opt-in", func(t *testing.T) {
		check(t, nodetest.StartWithPolicy(ctx, t, "  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n"), true)
	})
	t.Run("run_as", func(t *testing.T) {
		check(t, nodetest.StartWithPolicy(ctx, t, "  allow: [/bin/sh]\n  run_as: coopgrid-task\n"), false)
	})
}
