package consensus

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// replayed restarts p abruptly (no snapshot at stop unless atStop) and
// counts the command entries its state machine applies up to index last:
// what the restart replayed.
func replayed(t *testing.T, p *tpeer, last uint64, atStop bool) int64 {
	t.Helper()
	if atStop {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.node.SnapshotAtStop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var n atomic.Int64
	mut := p.mut
	p.mut = func(cfg *Config) {
		if mut != nil {
			mut(cfg)
		}
		cfg.OnApply = func(res *ledger.Result) {
			if res.Index <= last {
				n.Add(1)
			}
		}
	}
	p.restart()
	eventually(t, 20*time.Second, func() error {
		if got := p.node.AppliedIndex(); got < last {
			return fmt.Errorf("applied %d of %d", got, last)
		}
		return nil
	})
	return n.Load()
}

// TestSnapshotAtStopLeavesNothingToReplay: a clean stop's snapshot holds
// the applied state, so the next start applies none of the entries again;
// without it, every entry since the last snapshot is replayed.
func TestSnapshotAtStopLeavesNothingToReplay(t *testing.T) {
	for _, atStop := range []bool{false, true} {
		t.Run(fmt.Sprintf("at_stop=%v", atStop), func(t *testing.T) {
			c := newCluster(t, 1, 1, nil)
			p := c.waitLeader()
			for range 10 {
				mustPropose(t, p, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: p.org + "/m0"}})
			}
			last := p.node.AppliedIndex()
			got := replayed(t, p, last, atStop)
			switch {
			case atStop && got != 0:
				t.Fatalf("replayed %d entries after a snapshot at stop, want 0", got)
			case !atStop && got < 11:
				t.Fatalf("replayed %d entries without a snapshot, want the registration and the 10 heartbeats", got)
			}
			if h := p.node.AppliedIndex(); h < last {
				t.Fatalf("applied index %d after the restart, was %d", h, last)
			}
		})
	}
}

// TestSnapshotPacerBoundsTheReplay: with no clean stop, a restart replays
// at most what was applied since the last snapshot, and the pacer takes
// one whenever SnapshotAfterEntries (or SnapshotAfterBytes) were applied:
// long before hashicorp/raft's own threshold (8,192 entries, looked at
// every 2-4 minutes). Both bounds are tried.
func TestSnapshotPacerBoundsTheReplay(t *testing.T) {
	for _, tc := range []struct {
		name           string
		entries, bytes uint64
	}{
		{"entries", 8, 1 << 30},
		// A signed heartbeat is a few hundred bytes.
		{"bytes", 1 << 20, 2 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, 1, func(cfg *Config) {
				cfg.SnapshotAfterEntries, cfg.SnapshotAfterBytes = tc.entries, tc.bytes
			})
			p := c.waitLeader()
			for range 40 {
				mustPropose(t, p, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: p.org + "/m0"}})
			}
			last := p.node.AppliedIndex()
			// The pacer snapshots in the background: wait until what was
			// applied since the last snapshot is within the bound, and
			// until that snapshot is on disk (the count is reset when the
			// state is captured, before the snapshot is persisted).
			replay := &p.node.fsm.replay
			var since int64
			eventually(t, 20*time.Second, func() error {
				if replay.over(tc.entries, tc.bytes) {
					return fmt.Errorf("%d entries, %d bytes since the last snapshot", replay.entries.Load(), replay.bytes.Load())
				}
				since = int64(replay.entries.Load())
				snaps, err := p.node.snaps.List()
				if err != nil || len(snaps) == 0 {
					return fmt.Errorf("no snapshot after 40 entries (bound %d entries, %d bytes): %v", tc.entries, tc.bytes, err)
				}
				if snaps[0].Index+uint64(since) < last {
					return fmt.Errorf("newest snapshot on disk at %d, %d entries since; applied %d", snaps[0].Index, since, last)
				}
				return nil
			})
			if got := replayed(t, p, last, false); got != since {
				t.Fatalf("replayed %d entries after a crash, want the %d applied since the last snapshot", got, since)
			}
		})
	}
}
