package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/internal/audit"
)

// peer verify on a real single peer's data directory: refused while the
// peer runs, clean once it stopped, at the index and hash the live peer
// reported; a wrong expected hash is a violation (exit 3).
func TestVerifyCommand(t *testing.T) {
	ctx, p := startPeer(t)
	res, err := p.Node.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{
		{Argv: []string{"/bin/sh", "-c", "echo ok > out.txt"}, SizeMFlop: 1000, Outputs: []string{"out.txt"}},
		{Argv: []string{"/bin/sh", "-c", "exit 3"}, SizeMFlop: 1000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range res.TaskIDs {
		for {
			d, err := p.Node.Task(ctx, id)
			if err != nil || ctx.Err() != nil {
				t.Fatalf("task %s: %v %v", id, err, ctx.Err())
			}
			if d.State == "done" || d.State == "failed" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	live, err := p.Node.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "verify", "--data", p.DataDir); code != 1 || !strings.Contains(errs, "in use") {
		t.Fatalf("verify of a running peer: exit %d, %s", code, errs)
	}
	if err := p.Node.Close(ctx); err != nil {
		t.Fatal(err)
	}
	upto := strconv.FormatUint(live.AppliedIndex, 10)

	for _, c := range []struct {
		name     string
		args     []string
		wantCode int
		want     string // in stdout, or in stderr for a failure
	}{
		{"whole log", []string{"verify", "--data", p.DataDir}, 0, "all invariants hold"},
		{"at the live index", []string{"verify", "--data", p.DataDir, "--upto", upto, "--expect-hash", live.StateHash}, 0, "state hash " + live.StateHash},
		{"wrong hash", []string{"verify", "--data", p.DataDir, "--upto", upto, "--expect-hash", strings.Repeat("0", 64)}, exitViolation, "expected " + strings.Repeat("0", 64)},
		{"past the end", []string{"verify", "--data", p.DataDir, "--upto", "999999"}, 1, "past what this peer holds"},
		{"no data", []string{"verify"}, 2, "--data is required"},
		{"check every -1", []string{"verify", "--data", p.DataDir, "--check-every", "-1"}, 2, "want 1 or more"},
		{"paced", []string{"verify", "--data", p.DataDir, "--check-every", "0"}, 0, "all invariants hold"},
		{"check every 5", []string{"verify", "--data", p.DataDir, "--check-every", "5"}, 0, "all invariants hold"},
		{"hash without index", []string{"verify", "--data", p.DataDir, "--expect-hash", live.StateHash}, 2, "needs --upto"},
		{"not a data directory", []string{"verify", "--data", t.TempDir()}, 1, "no Raft log"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCLI(t, c.args...)
			got := out
			if c.wantCode != 0 {
				got = errs
			}
			if code != c.wantCode || !strings.Contains(got, c.want) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant %q", code, c.wantCode, out, errs, c.want)
			}
		})
	}

	code, out, errs := runCLI(t, "verify", "--data", p.DataDir, "--upto", upto, "--json")
	var rep audit.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("--json: exit %d\n%s\n%s", code, out, errs)
	}
	if !rep.OK() || rep.Index != live.AppliedIndex || rep.Hash != live.StateHash || rep.Commands == 0 {
		t.Errorf("report %+v; live peer at %d, %s", rep, live.AppliedIndex, live.StateHash)
	}
}
