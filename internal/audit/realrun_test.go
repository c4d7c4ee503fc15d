package audit

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/node"
)

// A real single-peer federation (libp2p on loopback, Raft on bolt, the
// process executor running /bin/sh) runs tasks and stops: its stop's
// snapshot compacts the log (4 trailing entries). Started again (with the
// default trailing log, so that its own stop keeps what follows), it runs
// more and stops. Its data directory verifies clean: from the first stop's
// snapshot, to the applied index and state hash the live peer reported
// after the restart, and over the whole log (the entries its shutdown
// added included, and the second stop's snapshot matched by the replay).
func TestVerifyRealPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real peer and runs real processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	machines := filepath.Join(tmp, "machines.yaml")
	if err := os.WriteFile(machines, []byte("machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\n  - {name: m2, gflops: 5, busy_watts: 60}\npolicy:\n  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(tmp, "alpha")
	if _, err := config.Init(ctx, config.InitOptions{DataDir: data, Org: "alpha", MachinesFile: machines, NewFederation: true,
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, API: "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	start := func(trailing uint64) *node.Node {
		t.Helper()
		n, err := node.Start(ctx, node.Options{DataDir: data, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Consensus: func(c *consensus.Config) { c.TrailingLogs = trailing }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(context.Background()) })
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return n
	}
	runTasks := func(n *node.Node, k int) {
		t.Helper()
		req := api.SubmitRequest{}
		for i := 0; i < k; i++ {
			req.Tasks = append(req.Tasks, api.SubmitTask{Argv: []string{"/bin/sh", "-c", "sleep 0.1; echo ok > out.txt"}, SizeMFlop: 1000, Outputs: []string{"out.txt"}})
		}
		res, err := n.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range res.TaskIDs {
			for {
				d, err := n.Task(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if d.State == "done" {
					break
				}
				if d.State == "failed" || d.State == "cancelled" || ctx.Err() != nil {
					t.Fatalf("task %s: %+v (%v)", id, d, ctx.Err())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	n := start(4)
	runTasks(n, 4)
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n = start(0) // the default trailing log
	runTasks(n, 3)
	live, err := n.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A running peer holds the log's lock.
	if _, err := VerifyDataDir(ctx, data, Options{}); err == nil {
		t.Fatal("verified the log of a running peer")
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}

	r, err := VerifyDataDir(ctx, data, Options{UpTo: live.AppliedIndex})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("violation: %v", r.Violation)
	}
	if r.Index != live.AppliedIndex || r.AppliedIndex != live.AppliedIndex || r.Hash != live.StateHash {
		t.Errorf("replay reached index %d (applied %d, hash %s); the live peer reported %d, %s", r.Index, r.AppliedIndex, r.Hash, live.AppliedIndex, live.StateHash)
	}
	if r.FirstIndex <= 1 || r.BaseIndex == 0 || len(r.Snapshots) == 0 || !r.Snapshots[0].Base {
		t.Errorf("the log was compacted behind a snapshot, so the replay starts from it: first index %d, base %d, snapshots %+v", r.FirstIndex, r.BaseIndex, r.Snapshots)
	}
	if r.Commands == 0 {
		t.Errorf("no command replayed after the snapshot: %+v", r)
	}
	whole, err := VerifyDataDir(ctx, data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !whole.OK() || whole.Index != whole.LastIndex || whole.Index < r.Index {
		t.Errorf("whole log: %+v", whole)
	}
	if len(whole.Snapshots) != 2 || !whole.Snapshots[0].Base || !whole.Snapshots[1].Matched {
		t.Errorf("whole log: want the first stop's snapshot as the base and the second's matched by the replay: %+v", whole.Snapshots)
	}
	t.Logf("verified: log %d-%d from the snapshot at %d, %d commands, hash %.16s at %d", r.FirstIndex, r.LastIndex, r.BaseIndex, r.Commands, r.Hash, r.Index)
}
