package node

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/gossip"
)

// TestRestartWithClockBehindKeepsBootOrder: a peer restarted with its
// clock an hour behind still stamps a later boot than its previous run,
// so the other peers' replay guard accepts its heartbeats.
func TestRestartWithClockBehindKeepsBootOrder(t *testing.T) {
	tn := newTNode(t, "f-boot", "", simMachine("m1", 10, 100), testConfig("sim"))
	startFaulty(t, tn, 0)
	first := tn.n.boot
	tn.close()
	startFaulty(t, tn, -time.Hour)
	if tn.n.boot <= first {
		t.Fatalf("boot %d after a restart an hour behind, previous %d: heartbeats would be dropped as replays", tn.n.boot, first)
	}
	var guard gossip.ReplayGuard
	if !guard.Accept(tn.n.self, first, 7) || !guard.Accept(tn.n.self, tn.n.boot, 1) {
		t.Fatal("the replay guard refused the restarted peer's first heartbeat")
	}
}

// snapshotAndLast reads a stopped peer's newest Raft snapshot index (0:
// none) and its log's last index.
func snapshotAndLast(t *testing.T, dir string) (snap, last uint64) {
	t.Helper()
	raftDir := filepath.Join(dir, config.RaftDir)
	snaps, err := raft.NewFileSnapshotStore(raftDir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) > 0 {
		snap = list[0].Index
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, consensus.RaftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if last, err = store.LastIndex(); err != nil {
		t.Fatal(err)
	}
	return snap, last
}

// TestCleanStopSnapshots: a clean stop (Close, as on SIGTERM) snapshots
// the state at the log's last entry, so that the next start restores it
// and replays nothing; a crash does not, and its next start replays the
// entries after the older snapshot.
func TestCleanStopSnapshots(t *testing.T) {
	tn := newTNode(t, "f-snap", "", simMachine("m1", 10, 100), testConfig("sim"))
	tn.start()
	tn.close()
	snap, last := snapshotAndLast(t, tn.dir)
	if snap == 0 || snap != last {
		t.Fatalf("after a clean stop: newest snapshot at %d, log at %d; want a snapshot of the last entry", snap, last)
	}
	tn.start()
	tn.crash()
	crashSnap, crashLast := snapshotAndLast(t, tn.dir)
	if crashSnap != snap || crashLast <= last {
		t.Fatalf("after a crash: newest snapshot at %d (clean stop's %d), log at %d (was %d); want no new snapshot and newer entries", crashSnap, snap, crashLast, last)
	}
}
