package consensus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
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
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	if !n.IsLeader() {
		return 0, errorf(CodeNotLeader, "not the leader")
	}
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
