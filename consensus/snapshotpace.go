package consensus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Restart cost (issue 17: restart to serving in 5 s). A starting peer
// restores its newest snapshot and then replays every entry after it, so
// what a restart costs is what was applied since the last snapshot. Two
// things bound it:
//
//   - SnapshotAtStop, called by a clean stop (SIGTERM), snapshots the
//     applied state just before Raft shuts down: the next start replays
//     almost nothing.
//   - The snapshot pacer bounds the replay after a stop that was not
//     clean (a crash, SIGKILL, power loss): a snapshot is taken as soon as
//     SnapshotAfterEntries command entries or SnapshotAfterBytes of them
//     were applied since the last one, whichever comes first. hashicorp/raft's
//     own trigger (SnapshotThreshold entries, looked at every
//     SnapshotInterval, 2-4 minutes) let a young peer replay its whole log:
//     a peer that had finished 20,000 tasks had no snapshot yet, and a
//     large submission costs as much to replay as hundreds of small
//     entries.

// The replay bound's defaults: about 1 s of replay on a quiet 2-core
// machine (some 0.5 ms of CPU an entry, docs/BENCHMARKS.md), or a few
// submissions of 10,000 tasks.
const (
	defaultSnapshotAfterEntries = 2048
	defaultSnapshotAfterBytes   = 16 << 20
)

// replayCost counts what a restart would replay now: the command entries
// applied since the state the newest snapshot holds, and their bytes. The
// FSM adds to it and resets it (on its goroutine); the pacer reads it.
type replayCost struct {
	entries, bytes atomic.Uint64
}

func (c *replayCost) add(size int) {
	c.entries.Add(1)
	c.bytes.Add(uint64(size))
}

// reset is called when a snapshot captures the state (or one replaces it).
func (c *replayCost) reset() {
	c.entries.Store(0)
	c.bytes.Store(0)
}

// over reports whether either bound is reached.
func (c *replayCost) over(maxEntries, maxBytes uint64) bool {
	return c.entries.Load() >= maxEntries || c.bytes.Load() >= maxBytes
}

// snapshotPacer takes the snapshots the replay bound asks for, one at a
// time, off the state machine's goroutine (a snapshot is served by it).
type snapshotPacer struct {
	kick chan struct{}
}

// pacerRetry is how long the pacer waits after a failed snapshot before it
// tries again (a halted FSM refuses every one).
const pacerRetry = 30 * time.Second

func (n *Node) startSnapshotPacer() {
	n.pacer = &snapshotPacer{kick: make(chan struct{}, 1)}
	n.wg.Add(1)
	go n.paceSnapshots()
}

// noteApplied is called after each applied command entry: it wakes the
// pacer when the replay bound is reached. It never blocks.
func (n *Node) noteApplied() {
	if n.pacer == nil || !n.fsm.replay.over(n.cfg.SnapshotAfterEntries, n.cfg.SnapshotAfterBytes) {
		return
	}
	select {
	case n.pacer.kick <- struct{}{}:
	default:
	}
}

func (n *Node) paceSnapshots() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.pacer.kick:
		}
		if !n.fsm.replay.over(n.cfg.SnapshotAfterEntries, n.cfg.SnapshotAfterBytes) {
			continue
		}
		err := n.raft.Snapshot().Error()
		if err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot) {
			continue
		}
		if n.ctx.Err() != nil {
			return
		}
		n.log.Warn("consensus: snapshot to bound the replay failed; trying again later", "entries", n.fsm.replay.entries.Load(), "bytes", n.fsm.replay.bytes.Load(), "retry_in", pacerRetry, "err", err)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(pacerRetry):
		}
	}
}

// SnapshotAtStop snapshots the applied state before a clean stop, so that
// the next start restores it and replays almost nothing (only entries
// committed but not applied yet). It does nothing when the newest snapshot
// already holds the applied state. ctx bounds the wait: on timeout the
// stop goes on, and the snapshot, which hashicorp/raft cannot abandon
// half-way, either completes during Shutdown or is not there; the next
// start then replays from the previous snapshot, as after a crash (the
// pacer bounds that).
func (n *Node) SnapshotAtStop(ctx context.Context) error {
	if n.fsm.replay.entries.Load() == 0 {
		return nil
	}
	f := n.raft.Snapshot()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return nil
		}
		return fmt.Errorf("snapshot at stop: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("snapshot at stop: %w", ctx.Err())
	}
}
