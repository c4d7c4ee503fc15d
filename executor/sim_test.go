package executor

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newSim(t *testing.T, compression float64) *SimExecutor {
	t.Helper()
	e, err := NewSimExecutor(SimConfig{Machines: testMachines, Compression: compression, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

const hour = 3600 // seconds

func TestSimRunsForSizeOverSpeed(t *testing.T) {
	// One simulated hour on m1 (2 GFLOPS, 50 W), compressed 36000× into
	// 0.1 s.
	e := newSim(t, 36000)
	for _, c := range []struct {
		name       string
		size, done int64
		wantMilliJ int64
		wantReal   time.Duration
	}{
		{"whole", 2000 * hour, 0, 50_000 * hour, 100 * time.Millisecond},
		{"resumed half way", 2000 * hour, 1000 * hour, 50_000 * hour / 2, 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, e, TaskSpec{ID: "sim", SizeMFlop: c.size, DoneMFlop: c.done})
			if !r.OK() || r.ExitCode != 0 || r.DoneMFlop != c.size {
				t.Fatalf("got %+v", r)
			}
			if r.EnergySource != EnergySimulated || r.EnergyMilliJ != c.wantMilliJ {
				t.Errorf("energy %d mJ (%s), want %d simulated", r.EnergyMilliJ, r.EnergySource, c.wantMilliJ)
			}
			// A timer never fires early; the upper bound is only a sanity
			// check.
			if d := r.End.Sub(r.Start); d < c.wantReal || d > 30*time.Second {
				t.Errorf("ran %v in real time, want about %v", d, c.wantReal)
			}
		})
	}
}

func TestSimTimeout(t *testing.T) {
	e := newSim(t, 36000)
	// Two simulated hours of work on m1 (2 GFLOPS, 50 W) with a one-hour
	// limit.
	r := run(t, e, TaskSpec{ID: "long", SizeMFlop: 2 * 2000 * hour, WallClockLimit: time.Hour})
	if r.Reason != ReasonTimeout || r.DoneMFlop != 2000*hour || r.EnergyMilliJ != 50_000*hour {
		t.Fatalf("got %q done %d energy %d, want killed_timeout after one hour on m1", r.Reason, r.DoneMFlop, r.EnergyMilliJ)
	}
}

func TestSimStopKeepsProgressThroughCheckpoint(t *testing.T) {
	e := newSim(t, 1000)
	ck := t.TempDir()
	// 10^12 MFlop on m2 takes 2.5·10^8 simulated seconds: it runs until
	// stopped.
	spec := TaskSpec{ID: "big", SizeMFlop: 1e12, Checkpointable: true, CheckpointDir: ck}
	ctx := context.Background()
	if err := e.Start(ctx, "m2", spec); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := e.Stop(ctx, "big", time.Minute); err != nil {
		t.Fatal(err)
	}
	r := next(t, e)
	if r.Reason != ReasonStopped || r.CheckpointDir != ck {
		t.Fatalf("got %+v", r)
	}
	if r.DoneMFlop <= 0 || r.DoneMFlop >= spec.SizeMFlop {
		t.Fatalf("progress %d MFlop, want strictly between 0 and the size", r.DoneMFlop)
	}
	// Energy is m2's 120 W over the simulated time that did the work:
	// 30 mJ per MFlop, up to the truncation of the progress.
	if diff := r.EnergyMilliJ - 30*r.DoneMFlop; diff < 0 || diff > 31 {
		t.Errorf("energy %d mJ for %d MFlop at 30 mJ/MFlop", r.EnergyMilliJ, r.DoneMFlop)
	}
	done := r.DoneMFlop

	// Restarted with one simulated hour left after the checkpoint, it
	// resumes from the file, not from the spec's 0.
	spec.SizeMFlop = done + 4000*hour
	e2 := newSim(t, 36000)
	if err := e2.Start(ctx, "m2", spec); err != nil {
		t.Fatal(err)
	}
	r = next(t, e2)
	if !r.OK() || r.DoneMFlop != spec.SizeMFlop || r.EnergyMilliJ != 120_000*hour {
		t.Fatalf("resumed: %q done %d energy %d, want one hour at 120 W", r.Reason, r.DoneMFlop, r.EnergyMilliJ)
	}
}

func TestSimIgnoresBadCheckpoint(t *testing.T) {
	e := newSim(t, 36000)
	for name, content := range map[string]string{
		"garbage":     "{not json",
		"other task":  `{"task":"someone-else","done_mflop":5}`,
		"beyond size": `{"task":"t","done_mflop":99999999999}`,
	} {
		t.Run(name, func(t *testing.T) {
			ck := t.TempDir()
			if err := os.WriteFile(filepath.Join(ck, SimCheckpointFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			r := run(t, e, TaskSpec{ID: "t", SizeMFlop: 2000 * hour, DoneMFlop: 1000 * hour, Checkpointable: true, CheckpointDir: ck})
			// Started from the spec's progress: half an hour at 50 W.
			if !r.OK() || r.EnergyMilliJ != 50_000*hour/2 || !strings.Contains(r.Detail, "checkpoint ignored") {
				t.Errorf("got %q %q energy %d", r.Reason, r.Detail, r.EnergyMilliJ)
			}
		})
	}
}

func TestSimBadSpecsAndStartErrors(t *testing.T) {
	e := newSim(t, 36000)
	for _, c := range []struct {
		spec TaskSpec
		want string
	}{
		{TaskSpec{ID: "nosize"}, "positive size"},
		{TaskSpec{ID: "esc", SizeMFlop: 1, OutputPatterns: []string{"../x"}}, "escapes"},
		{TaskSpec{ID: "in", SizeMFlop: 1, Inputs: map[string][]byte{"/abs": nil}}, "absolute"},
	} {
		r := run(t, e, c.spec)
		if r.Reason != ReasonBadSpec || !strings.Contains(r.Detail, c.want) {
			t.Errorf("%s: got %q %q", c.spec.ID, r.Reason, r.Detail)
		}
	}
	ctx := context.Background()
	if err := e.Start(ctx, "m1", TaskSpec{ID: "forever", SizeMFlop: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, "m1", TaskSpec{ID: "x", SizeMFlop: 1}); !errors.Is(err, ErrMachineBusy) {
		t.Errorf("busy: %v", err)
	}
	if err := e.Start(ctx, "zz", TaskSpec{ID: "x", SizeMFlop: 1}); !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("unknown machine: %v", err)
	}
	if got := e.Running(); len(got) != 1 || got[0] != "forever" {
		t.Errorf("running %v", got)
	}
	if err := e.Stop(ctx, "nobody", 0); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("stop unknown: %v", err)
	}
}

func TestSimCloseStopsAndClosesResults(t *testing.T) {
	e, err := NewSimExecutor(SimConfig{Machines: testMachines, Compression: 600, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, m := range []string{"m1", "m2"} {
		if err := e.Start(ctx, m, TaskSpec{ID: "t-" + m, SizeMFlop: 1e15}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for r := range e.Results() {
		if r.Reason != ReasonStopped {
			t.Errorf("%s: %q", r.ID, r.Reason)
		}
		n++
	}
	if n != 2 {
		t.Errorf("%d results, want 2", n)
	}
	if err := e.Start(ctx, "m1", TaskSpec{ID: "late", SizeMFlop: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

func TestNewSimExecutorRejectsBadConfig(t *testing.T) {
	for _, c := range []SimConfig{
		{Machines: testMachines, Compression: -1},
		{Machines: testMachines, Compression: math.NaN()},
		{Machines: testMachines, Compression: math.Inf(1)},
		{Machines: nil, Compression: 600},
		{Machines: []MachineConfig{{Name: "bad name", GFLOPS: 1, BusyWatts: 1}}, Compression: 600},
	} {
		if _, err := NewSimExecutor(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
