package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/node"
)

// defaultProcs is the runtime's default GOMAXPROCS for this process.
func defaultProcs() int {
	before := runtime.GOMAXPROCS(0)
	runtime.SetDefaultGOMAXPROCS()
	return runtime.GOMAXPROCS(before)
}

// TestFollowLeading: without GOMAXPROCS in the environment, the process
// keeps the runtime's default until the maintenance loop's first pass
// (OnVoting), then runs with one P unless its peer leads, whatever its
// vote; it gets the default back while it leads and one P again when it
// stops; the returned function puts back what was there before. With
// GOMAXPROCS set, nothing changes.
func TestFollowLeading(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	def := defaultProcs()

	t.Setenv("GOMAXPROCS", "") // empty counts as unset
	var o node.Options
	restore := followLeading(&o, slog.Default())
	if o.OnLeading == nil || o.OnVoting == nil {
		t.Fatal("GOMAXPROCS unset: OnLeading or OnVoting not set")
	}
	for _, step := range []struct {
		name string
		tell func()
		want int
	}{
		{"leads before the first pass (a founder)", func() { o.OnLeading(true) }, def},
		{"first pass, voting", func() { o.OnVoting(true) }, def},
		{"stops leading", func() { o.OnLeading(false) }, followerProcs},
		{"demoted", func() { o.OnVoting(false) }, followerProcs},
		{"promoted", func() { o.OnVoting(true) }, followerProcs},
		{"leads", func() { o.OnLeading(true) }, def},
		{"stops leading again", func() { o.OnLeading(false) }, followerProcs},
	} {
		step.tell()
		if got := runtime.GOMAXPROCS(0); got != step.want {
			t.Fatalf("%s: GOMAXPROCS %d, want %d", step.name, got, step.want)
		}
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("restored: GOMAXPROCS %d, want %d", got, before)
	}

	o = node.Options{}
	followLeading(&o, slog.Default())
	o.OnVoting(false) // a joiner's first pass
	if got := runtime.GOMAXPROCS(0); got != followerProcs {
		t.Fatalf("joiner's first pass: GOMAXPROCS %d, want %d", got, followerProcs)
	}
	runtime.GOMAXPROCS(before)

	t.Setenv("GOMAXPROCS", "3")
	o = node.Options{}
	followLeading(&o, slog.Default())()
	if o.OnLeading != nil || o.OnVoting != nil || runtime.GOMAXPROCS(0) != before {
		t.Fatalf("GOMAXPROCS set by the operator: options changed or GOMAXPROCS %d", runtime.GOMAXPROCS(0))
	}
}

// TestRunLeaderGetsDefaultProcs: a founder's `peer run` leads its
// federation of one, so its process runs with the runtime's default
// GOMAXPROCS (told by Raft through node and consensus), and has the
// GOMAXPROCS it found back once it stops.
func TestRunLeaderGetsDefaultProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS set in the environment: the rule is off")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: a leader's default is one P too")
	}
	before := runtime.GOMAXPROCS(1) // as a follower's process would be
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	tmp := t.TempDir()
	machines := filepath.Join(tmp, "machines.yaml")
	if err := os.WriteFile(machines, []byte("machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(tmp, "a")
	if code, _, errs := runCLI(t, "init", "--org", "uni-a", "--data", a, "--machines", machines, "--new-federation",
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0"); code != 0 {
		t.Fatal(errs)
	}
	d := startDaemon(t, "--data", a)
	d.wait(t, `ready: organisation uni-a registered`)
	// Raft tells the leadership on its own goroutine: wait for it.
	want := defaultProcs()
	for deadline := time.Now().Add(10 * time.Second); runtime.GOMAXPROCS(0) != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("leading: GOMAXPROCS %d, want the default %d", runtime.GOMAXPROCS(0), want)
		}
	}
	if code := d.shutdown(t); code != 0 {
		t.Fatalf("peer run stopped with %d:\n%s", code, d.errs.String())
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("stopped: GOMAXPROCS %d, want the 1 it found", got)
	}
}
