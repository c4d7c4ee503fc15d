package consensus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ReadConsistent runs fn on a ledger that has applied every entry committed
// before the call (linearizable read). The leader confirms it still leads
// and that its state machine has caught up (a Raft barrier); a follower asks
// the leader for that index (the "read index") and waits until its own
// ledger reaches it, then reads locally. The same rules as View apply to fn.
func (n *Node) ReadConsistent(ctx context.Context, fn func(l *ledger.Ledger)) error {
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	idx, err := n.readIndexOnce(ctx)
	if err != nil && certainlyNotApplied(err) {
		leader, _ := n.Leader()
		if werr := n.waitLeaderChange(ctx, leader); werr == nil {
			idx, err = n.readIndexOnce(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("consistent read: %w", err)
	}
	if err := n.fsm.waitApplied(ctx, idx); err != nil {
		return fmt.Errorf("consistent read: %w", err)
	}
	n.fsm.view(fn)
	return nil
}

func (n *Node) readIndexOnce(ctx context.Context) (uint64, error) {
	leader, err := n.WaitLeader(ctx)
	if err != nil {
		return 0, err
	}
	if leader == n.self {
		return n.leaderReadIndex(ctx)
	}
	resp, err := n.host.Request(ctx, leader, ProtoReadIndex, nil)
	if err != nil {
		return 0, err
	}
	if len(resp) != 8 {
		return 0, errorf(p2p.CodeBadRequest, "read index: %d-byte response", len(resp))
	}
	return binary.BigEndian.Uint64(resp), nil
}

// leaderReadIndex returns the ledger index every committed command has
// reached, after confirming leadership.
//
// Once this leadership's first barrier has passed (catchUp), it writes
// nothing: the commit index, read before a heartbeat round confirms that
// this peer still leads (Raft's "read index", §6.4 of Ongaro's thesis),
// covers every entry committed before the call, and the state machine
// is waited for until it has applied every command up to it. A barrier
// entry per read, as before, cost every member a synced log write: while
// a hundred peers formed on one host, the reads of joiners and of status
// polls were half of the log (docs/BENCHMARKS.md, "100 peers, session 9").
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	if !n.IsLeader() {
		return 0, errorf(CodeNotLeader, "not the leader")
	}
	gen := n.term.gen.Load()
	if n.term.isCaughtUp() {
		commit := n.raft.CommitIndex()
		n.paced.hurry(time.Now()) // the verifying heartbeats must not wait for their slots
		if err := waitFuture(ctx, n.raft.VerifyLeader()); err != nil {
			return 0, raftError(err, "verify leader", CodeNotLeader)
		}
		// Still the leadership whose barrier passed: the commit index
		// was not read early in a later one.
		if n.term.gen.Load() == gen && n.term.isCaughtUp() {
			done, err := n.waitCommandsApplied(ctx, commit)
			if err != nil {
				return 0, err
			}
			if done {
				return n.fsm.appliedIndex(), nil
			}
		}
	}
	return n.barrierReadIndex(ctx)
}

// maxMarkerScan bounds the log entries waitCommandsApplied reads at once
// to see that the state machine has nothing left to apply below an index.
const maxMarkerScan = 1024

// waitCommandsApplied waits until the state machine has applied every
// command and configuration entry up to index. Raft never hands it
// barriers and no-ops, so the last index it saw may stay below index for
// good: it is done once every entry between the two is one of those. It
// says false, having waited for nothing, when more than maxMarkerScan such
// entries follow the last it saw (barriers an older leader wrote one per
// read): the caller then passes a barrier.
func (n *Node) waitCommandsApplied(ctx context.Context, index uint64) (bool, error) {
	for {
		seen, ch := n.fsm.seenIndex()
		if seen >= index {
			return true, nil
		}
		switch n.markersUpTo(seen+1, index) {
		case markersAll:
			return true, nil
		case markersTooMany:
			return false, nil
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Millisecond): // the gap may hold entries not stored yet
		case <-ctx.Done():
			return false, errorf(CodeTimeout, "waiting for the state machine to reach index %d (at %d): %v", index, seen, ctx.Err())
		}
	}
}

// What the log holds between two indexes (markersUpTo).
const (
	markersAll     = iota // only barriers and no-ops
	markersNot            // an entry the state machine applies, or one not readable yet
	markersTooMany        // more than maxMarkerScan barriers and no-ops first
)

// markersUpTo reads the log entries from..to, from the first, and says
// whether they are all barriers or no-ops (entries the state machine never
// sees).
func (n *Node) markersUpTo(from, to uint64) int {
	for i := from; i <= to; i++ {
		if i-from >= maxMarkerScan {
			return markersTooMany
		}
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			return markersNot
		}
		if l.Type != raft.LogBarrier && l.Type != raft.LogNoop {
			return markersNot
		}
	}
	return markersAll
}

// barrierReadIndex is leaderReadIndex for a leadership whose first
// barrier has not passed yet.
func (n *Node) barrierReadIndex(ctx context.Context) (uint64, error) {
	// The barrier returns once every entry before it is applied here,
	// including those of earlier terms.
	if err := waitFuture(ctx, n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		return 0, raftError(err, "barrier", CodeNotLeader)
	}
	idx := n.fsm.appliedIndex()
	// A deposed leader could have passed the barrier on its own; verifying
	// leadership with a quorum after reading the index closes that gap.
	n.paced.hurry(time.Now()) // the verifying heartbeats must not wait for their slots
	if err := waitFuture(ctx, n.raft.VerifyLeader()); err != nil {
		return 0, raftError(err, "verify leader", CodeNotLeader)
	}
	return idx, nil
}

func (n *Node) handleReadIndex(ctx context.Context, remote peer.ID, _ []byte) ([]byte, error) {
	if ok, err := n.isMember(remote); err != nil {
		return nil, err
	} else if !ok {
		return nil, errorf(CodeNotMember, "peer %s is not a member", remote)
	}
	idx, err := n.leaderReadIndex(ctx)
	if err != nil {
		var perr *p2p.Error
		if !errors.As(err, &perr) {
			err = errorf(CodeNotLeader, "%v", err)
		}
		return nil, err
	}
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, idx)
	return b, nil
}
