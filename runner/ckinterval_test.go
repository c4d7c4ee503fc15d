package runner

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestAdaptiveCheckpointInterval: on a real single-peer federation, a run
// without a fixed interval is checkpointed every √(2·C·MTBF) of its
// machine once the ledger records an interruption of it, not before; a
// fixed interval wins.
func TestAdaptiveCheckpointInterval(t *testing.T) {
	// An opportunistic machine makes the registration version 3: the
	// ledger tracks stability from it.
	l := startLedgerWith(t, []executor.MachineConfig{{Name: "m0", GFLOPS: 10, BusyWatts: 100}},
		func(r *ledger.RegisterOrg) { r.Machines[0].Opportunistic = true }, nil)
	cfg := l.config(nil)
	b := &bridge{cfg: cfg, ck: &checkpoints{}}
	r := &run{machine: "alpha/m0"}
	later := time.Now().Add(time.Hour)
	b.cfg.Now = func() time.Time { return later }
	if wait, take := b.nextCheckpoint(r); take || wait != adaptiveRecheck {
		t.Fatalf("no interruption recorded: %v %v, want no checkpoint, a look again after %v", wait, take, adaptiveRecheck)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, body := range []func(*ledger.Command){
		func(c *ledger.Command) { c.MachineLost = &ledger.MachineLostCmd{Machine: "alpha/m0"} },
		func(c *ledger.Command) { c.Heartbeat = &ledger.Heartbeat{Machine: "alpha/m0"} },
	} {
		if _, err := l.propose(ctx, body); err != nil {
			t.Fatal(err)
		}
	}
	var st ledger.Stability
	l.cons.View(func(lg *ledger.Ledger) { st, _ = lg.MTBF("alpha/m0", later.UnixMilli()) })
	if st.Failures != 1 || st.MTBFMs < time.Hour.Milliseconds()-time.Minute.Milliseconds() || st.MTBFMs > time.Hour.Milliseconds()+time.Minute.Milliseconds() {
		t.Fatalf("stability %+v: want one failure, an MTBF of about an hour", st)
	}
	b.ck.cost.measured(2 * time.Second)
	// √(2 · 2 s · MTBF): about 120 s for the hour.
	want := time.Duration(math.Sqrt(2*2*float64(st.MTBFMs)/1000) * float64(time.Second))
	wait, take := b.nextCheckpoint(r)
	if !take || wait < want-time.Millisecond || wait > want+time.Millisecond || wait < 119*time.Second || wait > 122*time.Second {
		t.Fatalf("interval %v %v, want %v (√(2·2 s·%d ms))", wait, take, want, st.MTBFMs)
	}
	b.cfg.Checkpoint.Interval = 7 * time.Second
	if wait, take := b.nextCheckpoint(r); !take || wait != 7*time.Second {
		t.Fatalf("fixed interval: %v %v", wait, take)
	}
}
