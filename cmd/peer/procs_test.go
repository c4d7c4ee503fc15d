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

// TestProcsFollowRole: the process keeps the runtime's default until the
// maintenance loop's first pass, then runs with one P unless its peer
// leads or votes with a busy process; it gets the default back while it
// leads or is a busy voter, and one P again after.
func TestProcsFollowRole(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	def := defaultProcs()
	r := &procsByRole{log: slog.Default()}
	for _, step := range []struct {
		name   string
		change func()
		want   int
	}{
		{"a founder leads before the first pass", func() { r.leading = true }, def},
		{"first pass, voting", func() { r.started, r.voting = true, true }, def},
		{"stops leading, idle", func() { r.leading = false }, followerProcs},
		{"busy voter", func() { r.busy = true }, def},
		{"demoted while busy", func() { r.voting = false }, followerProcs},
		{"promoted while busy", func() { r.voting = true }, def},
		{"idle again", func() { r.busy = false }, followerProcs},
		{"leads", func() { r.leading = true }, def},
		{"stops leading", func() { r.leading = false }, followerProcs},
	} {
		r.set(step.change)
		if got := runtime.GOMAXPROCS(0); got != step.want {
			t.Fatalf("%s: GOMAXPROCS %d, want %d", step.name, got, step.want)
		}
	}
}

// TestFollowRole: without GOMAXPROCS in the environment, the options'
// hooks set the process's GOMAXPROCS (a joiner's first pass: one P; its
// leadership: the default) and stop puts back what was there before; with
// GOMAXPROCS set, nothing changes.
func TestFollowRole(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	def := defaultProcs()

	t.Setenv("GOMAXPROCS", "") // empty counts as unset
	var o node.Options
	stop := followRole(&o, slog.Default())
	if o.OnLeading == nil || o.OnVoting == nil {
		t.Fatal("GOMAXPROCS unset: OnLeading or OnVoting not set")
	}
	o.OnVoting(false)
	if got := runtime.GOMAXPROCS(0); got != followerProcs {
		t.Fatalf("a joiner's first pass: GOMAXPROCS %d, want %d", got, followerProcs)
	}
	o.OnLeading(true)
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Fatalf("leading: GOMAXPROCS %d, want %d", got, def)
	}
	o.OnLeading(false)
	stop()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("stopped: GOMAXPROCS %d, want %d", got, before)
	}

	t.Setenv("GOMAXPROCS", "3")
	o = node.Options{}
	followRole(&o, slog.Default())()
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

// TestProcessCPU: the CPU time the busy watch reads grows with the work
// this process does.
func TestProcessCPU(t *testing.T) {
	start := processCPU()
	if start <= 0 {
		t.Fatalf("processCPU %v: not read", start)
	}
	x := 0
	for deadline := time.Now().Add(10 * time.Second); processCPU()-start < 20*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("processCPU stayed at %v after 10 s of work", processCPU())
		}
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
	}
	_ = x
}

// TestNextBusy: busy above 5 % of a core, and once busy, idle only below
// 2.5 %: a load that hovers about 5 % does not flip the role's GOMAXPROCS
// at every reading.
func TestNextBusy(t *testing.T) {
	const d = 2 * time.Second
	for _, tc := range []struct {
		name    string
		wasBusy bool
		cpu     time.Duration
		want    bool
	}{
		{"idle stays idle", false, 20 * time.Millisecond, false}, // 1 %
		{"idle at 5 % is not busy yet", false, 100 * time.Millisecond, false},
		{"idle above 5 % turns busy", false, 101 * time.Millisecond, true},
		{"busy at 4 % stays busy", true, 80 * time.Millisecond, true},
		{"busy at 2.6 % stays busy", true, 52 * time.Millisecond, true},
		{"busy at 2.5 % turns idle", true, 50 * time.Millisecond, false},
		{"busy at 1 % turns idle", true, 20 * time.Millisecond, false},
		{"busy at 50 % stays busy", true, time.Second, true},
	} {
		if got := nextBusy(tc.wasBusy, tc.cpu, d); got != tc.want {
			t.Errorf("%s: nextBusy(%v, %v, %v) = %v, want %v", tc.name, tc.wasBusy, tc.cpu, d, got, tc.want)
		}
	}
}
