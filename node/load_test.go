package node

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestLoadHold: the hysteresis, step by step: a load must stay above the
// threshold for reclaim_after to reclaim, under half of it for
// release_after to release; a dip resets the count; a machine reclaimed by
// hand is never released by the monitor.
func TestLoadHold(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type obs struct {
		s               int
		load            float64
		reclaimed, ours bool
		want            loadAction
	}
	for _, tc := range []struct {
		name  string
		steps []obs
	}{
		{"reclaimed after staying above for reclaim_after", []obs{
			{0, 0.9, false, false, loadKeep}, {5, 0.9, false, false, loadKeep}, {10, 0.9, false, false, loadReclaim},
		}},
		{"a dip under the threshold starts the count again", []obs{
			{0, 0.9, false, false, loadKeep}, {8, 0.5, false, false, loadKeep}, {9, 0.9, false, false, loadKeep},
			{18, 0.9, false, false, loadKeep}, {19, 0.9, false, false, loadReclaim},
		}},
		{"exactly the threshold is not above it", []obs{
			{0, 0.5, false, false, loadKeep}, {60, 0.5, false, false, loadKeep},
		}},
		{"released after staying under half for release_after", []obs{
			{0, 0.2, true, true, loadKeep}, {29, 0.2, true, true, loadKeep}, {30, 0.2, true, true, loadRelease},
		}},
		{"between half and the threshold: kept reclaimed", []obs{
			{0, 0.3, true, true, loadKeep}, {100, 0.3, true, true, loadKeep}, {200, 0.4, true, true, loadKeep},
		}},
		{"a rise while reclaimed starts the release count again", []obs{
			{0, 0.1, true, true, loadKeep}, {20, 0.3, true, true, loadKeep}, {21, 0.1, true, true, loadKeep},
			{50, 0.1, true, true, loadKeep}, {51, 0.1, true, true, loadRelease},
		}},
		{"reclaimed by hand: never released by the monitor", []obs{
			{0, 0, true, false, loadKeep}, {3600, 0, true, false, loadKeep},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newLoadHold(executor.MachineConfig{ReclaimLoad: 0.5, ReclaimAfter: 10 * time.Second, ReleaseAfter: 30 * time.Second})
			for i, o := range tc.steps {
				if got := h.step(at(o.s), o.load, o.reclaimed, o.ours); got != o.want {
					t.Fatalf("step %d (%+v): %v, want %v", i, o, got, o.want)
				}
			}
		})
	}
	if h := newLoadHold(executor.MachineConfig{ReclaimLoad: 1}); h.reclaimAfter != defaultReclaimAfter || h.releaseAfter != defaultReleaseAfter {
		t.Fatalf("defaults %v %v", h.reclaimAfter, h.releaseAfter)
	}
}

// TestSustained: one half of the hysteresis on its own: a condition
// counts from the first observation that holds, is sustained once it held
// for the whole hold time (not before), and a single observation that
// does not hold starts the count again.
func TestSustained(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	type obs struct {
		s     int // seconds after t0
		holds bool
		want  bool
		since int // seconds after t0 that since holds afterwards; -1: zero
	}
	for _, tc := range []struct {
		name  string
		after time.Duration
		steps []obs
	}{
		{"never holds", 10 * time.Second, []obs{{0, false, false, -1}, {60, false, false, -1}}},
		{"sustained at exactly the hold time", 10 * time.Second, []obs{
			{5, true, false, 5}, {14, true, false, 5}, {15, true, true, 5}, {100, true, true, 5},
		}},
		{"a break starts the count again", 10 * time.Second, []obs{
			{0, true, false, 0}, {9, false, false, -1}, {10, true, false, 10}, {19, true, false, 10}, {20, true, true, 10},
		}},
		{"a break after it was sustained ends it", 10 * time.Second, []obs{
			{0, true, false, 0}, {10, true, true, 0}, {11, false, false, -1}, {12, true, false, 12},
		}},
		{"no hold time: sustained at once", 0, []obs{{3, true, true, 3}, {4, false, false, -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var since time.Time
			for i, o := range tc.steps {
				got := sustained(&since, o.holds, t0.Add(time.Duration(o.s)*time.Second), tc.after)
				want := time.Time{}
				if o.since >= 0 {
					want = t0.Add(time.Duration(o.since) * time.Second)
				}
				if got != o.want || !since.Equal(want) {
					t.Fatalf("step %d (%+v): sustained %v since %v, want %v since %v", i, o, got, since, o.want, want)
				}
			}
		})
	}
}

// TestProcLoad reads a loadavg file: the grid's CPUs are taken off the
// one-minute load, the rest divided by the host's CPUs, never below 0.
func TestProcLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loadavg")
	for _, tc := range []struct {
		content string
		grid    float64
		want    float64
		bad     bool
	}{
		{"3.50 2.00 1.00 2/345 6789\n", 1, 0.625, false},
		{"0.50 0.40 0.30 1/100 42\n", 2, 0, false},
		{"", 0, 0, true},
		{"high 1 1 1/1 1\n", 0, 0, true},
		{"-1 1 1 1/1 1\n", 0, 0, true},
	} {
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ProcLoad{Path: path, CPUs: 4}.OwnerLoad(context.Background(), tc.grid)
		if tc.bad != (err != nil) || !tc.bad && got != tc.want {
			t.Fatalf("%q grid %v: %v, %v; want %v (error %v)", tc.content, tc.grid, got, err, tc.want, tc.bad)
		}
	}
	if _, err := (ProcLoad{Path: filepath.Join(t.TempDir(), "none")}).OwnerLoad(context.Background(), 0); err == nil {
		t.Fatal("a missing file gave a load")
	}
}

// fakeLoad is the owner's load as the test sets it; it records the grid
// CPUs the monitor takes off.
type fakeLoad struct {
	mu   sync.Mutex
	load float64
	grid float64 // the largest seen
}

func (f *fakeLoad) OwnerLoad(_ context.Context, grid float64) (float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grid = max(f.grid, grid)
	return f.load, nil
}

func (f *fakeLoad) set(load float64) {
	f.mu.Lock()
	f.load = load
	f.mu.Unlock()
}

func (f *fakeLoad) maxGrid() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grid
}

// TestReclaimOnLoad: real peers (libp2p, Raft, sim executors), only the
// owner's load faked. o-own's y1 is opportunistic with reclaim_load 0.5.
// A checkpointable task runs on y1 while the monitor is told the grid's
// CPU there; the owner's load goes to 0.9 and the peer reclaims y1 by
// itself: the task is checkpointed and resumes on o-far's z1. At 0.4
// (under the threshold, over half of it) y1 stays reclaimed; at 0.1 it is
// released. Each move of the load by 0.1 or more is recorded in the ledger
// (machine_load), on every peer; a smaller one appends nothing. A reclaim
// by hand is not released by the monitor, however idle.
func TestReclaimOnLoad(t *testing.T) {
	waitsMostly(t)
	load := &fakeLoad{}
	own := newTNode(t, "o-own", "", simMachine("y1", 100, 100)+"    opportunistic: true\n    reclaim_load: 0.5\n    reclaim_after: 1s\n    release_after: 1s\n",
		func(c *config.Config) { testConfig("sim")(c); ckConfig(c); c.Limit = "system" })
	own.opts = func(o *Options) { o.LoadSource, o.LoadInterval = load, 100*time.Millisecond }
	own.start()
	far := newTNode(t, "o-far", own.secret(), simMachine("z1", 50, 150), func(c *config.Config) { testConfig("sim")(c); ckConfig(c) })
	far.start(own.addr())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const y1 = "o-own/y1"
	waitFor(t, 20*time.Second, "o-far's machine registered", func() bool { return own.machine("o-far/z1").State == ledger.MachineUp })

	id := submitOne(t, ctx, own, api.SubmitTask{SizeMFlop: 40_000_000, Checkpointable: true})[0]
	waitFor(t, 20*time.Second, id+" running on y1", func() bool {
		tk := own.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == y1
	})
	waitFor(t, 5*time.Second, "the monitor counts the grid's CPU", func() bool { return load.maxGrid() >= 1 })
	time.Sleep(time.Second) // some progress to checkpoint
	if m := own.machine(y1); m.Reclaimed {
		t.Fatal("reclaimed while the owner was idle")
	}

	load.set(0.9)
	waitFor(t, 15*time.Second, "y1 reclaimed on load", func() bool { return own.machine(y1).Reclaimed })
	waitFor(t, 20*time.Second, id+" resumed on z1", func() bool {
		tk := own.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "o-far/z1"
	})
	if ck := own.task(id).Checkpoint; ck == nil || ck.ProgressMFlop <= 0 {
		t.Fatalf("evicted without a checkpoint: %+v", ck)
	}
	if segs := own.task(id).Segments; len(segs) < 2 || segs[0].Machine != y1 || segs[0].Outcome != ledger.OutcomePreempted {
		t.Fatalf("segments %+v", segs)
	}
	if m := far.machine(y1); !m.Reclaimed || m.Reclaims != 1 {
		t.Fatalf("o-far's ledger: y1 %+v", m)
	}
	// The load is recorded in the ledger for the predictor, on every peer.
	waitFor(t, 10*time.Second, "o-far's ledger records y1's load", func() bool { return far.machine(y1).OwnerLoadPermille == 900 })

	load.set(0.4) // under the threshold, over half of it: hysteresis
	time.Sleep(2 * time.Second)
	if !own.machine(y1).Reclaimed {
		t.Fatal("released at a load over half the threshold")
	}
	if got := own.machine(y1).OwnerLoadPermille; got != 400 {
		t.Fatalf("recorded load %d, want 400", got)
	}
	load.set(0.1)
	waitFor(t, 15*time.Second, "y1 released when idle", func() bool { return !own.machine(y1).Reclaimed })
	if got := far.machine(y1).OwnerLoadPermille; got != 100 {
		t.Fatalf("o-far's recorded load %d after the release, want 100", got)
	}
	load.set(0.15) // within the dead band: no new record
	at := own.machine(y1).OwnerLoadAtMs
	time.Sleep(time.Second)
	if m := own.machine(y1); m.OwnerLoadPermille != 100 || m.OwnerLoadAtMs != at {
		t.Fatalf("a change of 0.05 was recorded: %d at %d (was at %d)", m.OwnerLoadPermille, m.OwnerLoadAtMs, at)
	}

	// By hand: reclaimed, and the monitor leaves it so.
	if _, err := own.n.ReclaimMachine(ctx, api.ReclaimRequest{Machine: "y1", Reclaimed: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if m := own.machine(y1); !m.Reclaimed || m.Reclaims != 2 {
		t.Fatalf("a reclaim by hand was undone by the monitor: %+v", m)
	}
}
