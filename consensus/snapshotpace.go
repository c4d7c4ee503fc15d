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

// The replay bound's defaults: about 0.5 s of CPU (some 0.45 ms an entry
// at 100,000 finished tasks, docs/BENCHMARKS.md), or a submission of a few
// tens of thousands of tasks. A snapshot costs little beside it: 0.1 s of
// CPU to write the 8 MB state of 20,000 queued tasks, whose restore costs
// about 0.35 s; at 2,048 entries the replay was the larger half of a
// restart after a crash.
const (
	defaultSnapshotAfterEntries = 1024
	defaultSnapshotAfterBytes   = 8 << 20
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
	release := time.NewTicker(logMapRelease)
	defer release.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-release.C:
			n.releaseLogMap()
			continue
		case <-n.pacer.kick:
		}
		if !n.fsm.replay.over(n.cfg.SnapshotAfterEntries, n.cfg.SnapshotAfterBytes) {
			continue
		}
		err := n.raft.Snapshot().Error()
		if err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot) {
			// The snapshot compacted the log: the pages of the entries
			// it dropped are mapped for nothing (raftmap.go).
			n.releaseLogMap()
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

// catchUp times a start's replay: the entries after the restored snapshot,
// up to the last one in the log at start, are applied once this peer
// learns the commit index (as leader again, or from the leader). It logs
// once, when the replay is done, how many entries it applied and the time
// from the start to the first and to the last of them (docs/BENCHMARKS.md:
// what a restart after a crash costs).
type catchUp struct {
	start   time.Time
	last    uint64 // the log's last index at start
	first   uint64 // the first index applied, 0 until one is
	firstAt time.Time
}

// startingReplay reads the log's last index at start: nil when the log is
// empty.
func (n *Node) startingReplay(start time.Time) *catchUp {
	last, err := n.logs.LastIndex()
	if err != nil || last == 0 {
		return nil
	}
	return &catchUp{start: start, last: last}
}

// note is called by the FSM after each batch with the last index it saw;
// it returns nil once the replay is done (and logged).
func (c *catchUp) note(from, seen uint64, log interface{ Info(string, ...any) }) *catchUp {
	if c == nil {
		return nil
	}
	now := time.Now()
	if c.first == 0 {
		c.first, c.firstAt = from, now
	}
	if seen < c.last {
		return c
	}
	entries := uint64(0)
	if c.first <= c.last {
		entries = c.last - c.first + 1
	}
	log.Info("consensus: replayed the log after the snapshot", "entries", entries,
		"first_after", c.firstAt.Sub(c.start).Round(time.Millisecond), "done_after", now.Sub(c.start).Round(time.Millisecond),
		"replay_took", now.Sub(c.firstAt).Round(time.Millisecond))
	return nil
}
