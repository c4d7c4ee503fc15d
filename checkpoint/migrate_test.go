package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The simulated executor's progress file is the one ReadProgress reads.
func TestSimProgressFileMatchesExecutor(t *testing.T) {
	if SimProgressFile != executor.SimCheckpointFile {
		t.Fatalf("SimProgressFile %q, executor writes %q", SimProgressFile, executor.SimCheckpointFile)
	}
}

// counter counts to target, saving its counter (and its progress, 1000
// MFlop per step) every 20 steps and when it receives SIGTERM.
const counter = `
ck="$CHECKPOINT_DIR/count"
i=0
[ -f "$ck" ] && i=$(cat "$ck")
echo "resumed=$i"
save() {
	echo "$i" > "$ck.tmp" && mv "$ck.tmp" "$ck"
	echo "{\"done_mflop\":$((i*1000))}" > "$CHECKPOINT_DIR/coopgrid-progress.json"
}
trap 'save; exit 0' TERM
echo started > started
while [ "$i" -lt %d ]; do
	i=$((i+1))
	[ $((i%%20)) -eq 0 ] && save
	sleep 0.01
done
save
echo "count=$i"
`

func newExecutor(t *testing.T, tasksDir string) *executor.ProcessExecutor {
	t.Helper()
	e, err := executor.NewProcessExecutor(executor.ProcessConfig{
		TasksDir:    tasksDir,
		Machines:    []executor.MachineConfig{{Name: "m1", GFLOPS: 1, BusyWatts: 10}},
		Policy:      executor.Policy{Allow: []string{"sh"}, KillGrace: 200 * time.Millisecond, UnsafeRunAsPeerUser: true},
		DisableRAPL: true,
		Logger:      quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

func nextResult(t *testing.T, e *executor.ProcessExecutor) executor.Result {
	t.Helper()
	select {
	case r := <-e.Results():
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no result")
	}
	return executor.Result{}
}

// TestMigrateAcrossPeers is the whole path of issue 5 without the daemon:
// a counting task runs on peer A, is stopped (preempted) midway and writes
// a final checkpoint; A packs it and replicates it to B; A crashes; C
// restores it from the holders the log would record and runs the task to
// the end. The result is right and no step saved before the stop is lost.
func TestMigrateAcrossPeers(t *testing.T) {
	const (
		id     = "org1-1"
		target = 150
		size   = target * 1000
	)
	n := newNet(t)
	a, b, c := n.peer(allowAll), n.peer(allowAll), n.peer(allowAll)
	know(a, b, c)
	ctx := ctxT(t)
	exA := newExecutor(t, filepath.Join(a.dir, "tasks"))
	exC := newExecutor(t, filepath.Join(c.dir, "tasks"))
	spec := executor.TaskSpec{
		ID:             id,
		Argv:           []string{"sh", "-c", fmt.Sprintf(counter, target)},
		Checkpointable: true,
		SizeMFlop:      size,
	}

	// Run on A until the first periodic checkpoint, then preempt.
	if err := exA.Start(ctx, "m1", spec); err != nil {
		t.Fatal(err)
	}
	ckA := filepath.Join(a.dir, "tasks", id, "checkpoint")
	waitFor(t, filepath.Join(ckA, "count"))
	if err := exA.Stop(ctx, id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r := nextResult(t, exA)
	if r.Reason != executor.ReasonStopped || r.ExitCode != 0 || r.CheckpointDir != ckA {
		t.Fatalf("stop on A: %+v", r)
	}
	saved, err := ReadProgress(r.CheckpointDir, id, size)
	if err != nil || saved <= 0 || saved >= size {
		t.Fatalf("progress at the stop: %d %v, want strictly between 0 and %d", saved, err, size)
	}

	// A packs, replicates, and the log would record {hash, size, progress, holders}.
	ar, err := a.store.PackDir(ctx, id, r.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	holders, err := a.svc.Replicate(ctx, id, ar.Hash, peersOf(b, c), DefaultCopies)
	if err != nil {
		t.Fatal(err)
	}
	ref := Ref{Task: id, Hash: ar.Hash}
	for _, h := range holders {
		ref.Holders = append(ref.Holders, h.String())
	}

	// A crashes; C restores from the replica and resumes.
	must(t, a.h.Close())
	ckC := filepath.Join(c.dir, "tasks", id, "checkpoint")
	if err := Restore(ctx, c.store, c.svc, ref, ckC); err != nil {
		t.Fatalf("Restore on C: %v", err)
	}
	spec.DoneMFlop = saved
	if err := exC.Start(ctx, "m1", spec); err != nil {
		t.Fatal(err)
	}
	r = nextResult(t, exC)
	if !r.OK() {
		t.Fatalf("run on C: %+v", r)
	}
	out, err := os.ReadFile(r.StdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("resumed=%d\ncount=%d\n", saved/1000, target)
	if string(out) != want {
		t.Fatalf("C printed %q, want %q: the task must resume exactly where A's checkpoint left it", out, want)
	}
	if !strings.HasPrefix(r.CheckpointDir, c.dir) {
		t.Errorf("C ran with $CHECKPOINT_DIR %s", r.CheckpointDir)
	}
}

func peersOf(ps ...*testPeer) (out []peer.ID) {
	for _, p := range ps {
		out = append(out, p.h.ID())
	}
	return out
}

func waitFor(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", p)
}
