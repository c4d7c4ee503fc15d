package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSnapshotSaveRestore: a real peer runs tasks with outputs;
// `peer snapshot save` on it while it runs takes an online backup (POST
// /v1/backup), which `peer snapshot restore` accepts and `peer verify`
// checks clean. The peer stops; `peer snapshot save` backs its data directory up; the directory is wiped and `peer snapshot restore` brings
// it back. The restored Raft log replays (peer verify) to the same state
// hash at the same index, and the peer starts with the same peer ID, the
// same tasks in the same states, its outputs, and runs new work.
func TestSnapshotSaveRestore(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 1, 10, 100), config: fastConfig})
	p := a.start(t)
	job := writeFile(t, root, "job.yaml", `name: job
template:
  count: 3
  argv: [/bin/sh, -c, 'echo ok > out.txt']
  size: 0.1
  wall_clock_limit: 1m
  outputs: [out.txt]
`)
	ids := a.submit(t, job)
	waitAllDone(t, a, ids)
	before := a.status(t)
	tasksBefore := a.tasks(t)
	backup := filepath.Join(root, "uni-a.backup.tar.gz")

	online := filepath.Join(root, "uni-a.online.tar.gz")
	if r := a.cli(t, "snapshot", "save", online); r.code != 0 || !strings.Contains(r.stdout, "running peer, online") || !strings.Contains(r.stdout, "peer "+before.Self) {
		t.Fatalf("an online backup of the running peer: %v", r)
	}
	onlineDir := filepath.Join(root, "online-restored")
	if r := cli(t, "snapshot", "restore", online, "--data", onlineDir); r.code != 0 {
		t.Fatalf("snapshot restore of the online backup: %v", r)
	}
	if r := cli(t, "verify", "--data", onlineDir); r.code != 0 {
		t.Fatalf("peer verify of the restored online backup: %v", r)
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	r := a.cli(t, "snapshot", "save", backup)
	if r.code != 0 || !strings.Contains(r.stdout, "peer "+before.Self) {
		t.Fatalf("snapshot save: %v", r)
	}
	if info, err := os.Stat(backup); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v, want mode 0600", info, err)
	}
	if err := os.RemoveAll(a.data); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, "snapshot", "restore", backup, "--data", a.data); r.code != 0 {
		t.Fatalf("snapshot restore: %v", r)
	}
	// The restored log replays to the state the peer had.
	idx := strconv.FormatUint(before.Raft.AppliedIndex, 10)
	if r := cli(t, "verify", "--data", a.data, "--upto", idx, "--expect-hash", before.Raft.StateHash); r.code != 0 {
		t.Fatalf("peer verify of the restored directory at %s: %v", idx, r)
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(a.data, "outputs", id, "out.txt")); err != nil {
			t.Errorf("output of %s not restored: %v", id, err)
		}
	}

	a.start(t)
	after := a.status(t)
	if after.Self != before.Self || after.Raft.AppliedIndex < before.Raft.AppliedIndex {
		t.Fatalf("restored peer %s at %d, want %s at %d or later", after.Self, after.Raft.AppliedIndex, before.Self, before.Raft.AppliedIndex)
	}
	if after.Raft.AppliedIndex == before.Raft.AppliedIndex && after.Raft.StateHash != before.Raft.StateHash {
		t.Fatalf("at index %d the restored state hash is %s, was %s", after.Raft.AppliedIndex, after.Raft.StateHash, before.Raft.StateHash)
	}
	key := func(ts []taskJSON) []string {
		var out []string
		for _, tk := range ts {
			out = append(out, tk.ID+" "+tk.State)
		}
		slices.Sort(out)
		return out
	}
	if got, want := key(a.tasks(t)), key(tasksBefore); !slices.Equal(got, want) {
		t.Fatalf("restored tasks %v, want %v", got, want)
	}
	waitAllDone(t, a, a.submit(t, job))
}
