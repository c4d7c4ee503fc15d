package runner

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// Checkpoint interval adapted to the machine's failure rate (seed 004
// §4.1.2, after Viana et al.; issue 20 item 4; docs/JOBS.md,
// "Checkpoint interval").
//
// With no fixed checkpoint.interval, a checkpointable run is checkpointed
// every Young/Daly interval sqrt(2 · C · MTBF): C the measured cost of
// one checkpoint on this peer (packing and replicating the archive: the
// time the run's state is being saved), MTBF the machine's mean time
// between interruptions in the ledger (Ledger.MTBF: up time over losses
// plus reclaims). It is the first-order optimum of the time lost per unit
// of work, C/T for taking checkpoints every T plus T/(2 · MTBF) for the
// work redone after an interruption (on average half an interval): the
// derivative −C/T² + 1/(2 · MTBF) is zero at T = sqrt(2 · C · MTBF).
// Stable machines are checkpointed rarely, volatile ones often, as the
// seed asks. Until the ledger records an interruption of the machine its
// MTBF is only a lower bound that grows with its up time, so the run is
// checkpointed only when stopped, as before.
const (
	// defaultCheckpointCost is C until this peer has measured one.
	defaultCheckpointCost = time.Second
	// minAdaptiveInterval and maxAdaptiveInterval bound the interval:
	// below a few seconds the task does little but save its state, and a
	// day is as good as never.
	minAdaptiveInterval = 10 * time.Second
	maxAdaptiveInterval = 24 * time.Hour
	// adaptiveRecheck is how often a run without a usable MTBF looks again.
	adaptiveRecheck = time.Minute
)

// youngDaly is sqrt(2 · cost · mtbf), clamped to [lo, hi].
func youngDaly(cost, mtbf, lo, hi time.Duration) time.Duration {
	t := time.Duration(math.Sqrt(2*cost.Seconds()*mtbf.Seconds()) * float64(time.Second))
	return min(max(t, lo), hi)
}

// checkpointCost is the last measured cost of a checkpoint on this peer.
type checkpointCost struct{ ns atomic.Int64 }

func (c *checkpointCost) get() time.Duration {
	if v := c.ns.Load(); v > 0 {
		return time.Duration(v)
	}
	return defaultCheckpointCost
}

func (c *checkpointCost) measured(d time.Duration) {
	if d > 0 {
		c.ns.Store(int64(d))
	}
}

// nextCheckpoint is how long r waits for its next periodic checkpoint,
// and whether it takes one then: the fixed interval when configured,
// else the Young/Daly interval for r's machine, else (no interruption
// recorded) a look again after adaptiveRecheck without a checkpoint.
func (b *bridge) nextCheckpoint(r *run) (time.Duration, bool) {
	if iv := b.cfg.Checkpoint.Interval; iv > 0 {
		return iv, true
	}
	var st ledger.Stability
	b.cfg.Ledger.View(func(l *ledger.Ledger) {
		st, _ = l.MTBF(r.machine, b.cfg.Now().UnixMilli())
	})
	if !st.Tracked || st.Failures+st.Reclaims == 0 || st.MTBFMs <= 0 {
		return adaptiveRecheck, false
	}
	return youngDaly(b.ck.cost.get(), time.Duration(st.MTBFMs)*time.Millisecond, minAdaptiveInterval, maxAdaptiveInterval), true
}
