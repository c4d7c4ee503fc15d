package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Propose commits a ledger command (ledger.EncodeCommand bytes) and returns
// what Apply did with it. On the leader the command goes straight into the
// log; on a follower it is forwarded over a libp2p stream to the leader,
// which checks it and commits it. If the command certainly did not reach the
// log because the leader changed (CodeNotLeader, CodeNoLeader, the old
// leader unreachable), it is sent again to the new leader, until the
// context ends or this node finds no quorum (CodeNoQuorum, quorum.go).
//
// The command must act as this peer (Command.Peer == ID()): the leader
// refuses a forwarded command whose Peer differs from the authenticated
// peer that sent it. Config.Admit is asked here first and again on the
// leader; a command it refuses is never appended. The leader then asks its
// ledger whether Apply would reject the command (its dry run, dryrun.go):
// such a command is answered with the ledger's verdict and not appended
// either (Result.Index is then the applied index of the state that judged
// it).
//
// A command the ledger rejected is not an error: the Result carries it in
// Result.Err. Errors are *p2p.Error with the codes of this package.
func (n *Node) Propose(ctx context.Context, data []byte) (ledger.Result, error) {
	c, err := n.admit(n.self, data)
	if err != nil {
		return ledger.Result{}, err
	}
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	leader, res, err := n.proposeOnce(ctx, &c, data)
	// Sent again while it certainly did not reach a log, until the context
	// ends or no quorum is left: a follower may still name a dead leader
	// for a heartbeat timeout, and waitLeaderChange paces the attempts.
	for err != nil && certainlyNotApplied(err) {
		n.log.Debug("consensus: propose retry after leader change", "leader", leader, "err", err)
		if werr := n.waitLeaderChange(ctx, leader); werr != nil {
			if p2p.Code(werr) == CodeNoQuorum {
				return ledger.Result{}, werr
			}
			return ledger.Result{}, err
		}
		leader, res, err = n.proposeOnce(ctx, &c, data)
	}
	return res, err
}

// proposeOnce sends data (c, decoded) to the leader this node knows (itself
// or another) and returns which leader it tried.
func (n *Node) proposeOnce(ctx context.Context, c *ledger.Command, data []byte) (peer.ID, ledger.Result, error) {
	leader, err := n.WaitLeader(ctx)
	if err != nil {
		return "", ledger.Result{}, err
	}
	if leader == n.self {
		res, err := n.appendChecked(ctx, c, data)
		return leader, res, err
	}
	select {
	case n.forwardSlots <- struct{}{}:
	case <-ctx.Done():
		return leader, ledger.Result{}, errorf(CodeTimeout, "waiting to forward: %v", ctx.Err())
	}
	resp, err := n.host.Request(ctx, leader, ProtoPropose, data)
	<-n.forwardSlots
	if err != nil {
		var perr *p2p.Error
		if errors.As(err, &perr) || errors.Is(err, p2p.ErrUnreachable) {
			return leader, ledger.Result{}, err
		}
		// The stream broke after the command was sent: the leader may
		// have committed it.
		return leader, ledger.Result{}, errorf(CodeOutcomeUnknown, "forward to leader %s: %v", leader, err)
	}
	var res ledger.Result
	if err := json.Unmarshal(resp, &res); err != nil {
		return leader, ledger.Result{}, errorf(CodeOutcomeUnknown, "leader %s sent an undecodable result: %v", leader, err)
	}
	return leader, res, nil
}

// waitLeaderChange waits after a failed attempt on leader old until it is
// worth trying again: a different leader is known, or a leader (possibly
// old, re-elected) is known and a heartbeat timeout has passed, long enough
// for an election to have settled.
func (n *Node) waitLeaderChange(ctx context.Context, old peer.ID) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	deadline := start.Add(n.cfg.LeaderWaitTimeout)
	for {
		if id, ok := n.Leader(); ok && (id != old || id == n.self || time.Since(start) >= n.cfg.HeartbeatTimeout) {
			return nil
		}
		if n.quorumLost() {
			return n.noQuorumError()
		}
		if time.Now().After(deadline) {
			return errorf(CodeNoLeader, "no new leader after %s", n.cfg.LeaderWaitTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// admit decodes data and checks that the command acts as the peer that
// proposes it (the authenticated sender of a forwarded command, this node
// for its own), then asks Config.Admit. It returns the decoded command.
func (n *Node) admit(proposer peer.ID, data []byte) (ledger.Command, error) {
	c, err := ledger.DecodeCommand(data)
	if err != nil {
		return c, errorf(CodeBadCommand, "%v", err)
	}
	if c.Peer != proposer.String() {
		return c, errorf(CodeForbidden, "command acts as peer %q but was proposed by %s", c.Peer, proposer)
	}
	if n.cfg.Admit == nil {
		return c, nil
	}
	n.fsm.view(func(l *ledger.Ledger) { err = n.cfg.Admit(proposer, c, l) })
	if err == nil {
		return c, nil
	}
	var perr *p2p.Error
	if errors.As(err, &perr) {
		return c, err
	}
	return c, errorf(CodeForbidden, "%v", err)
}

// appendChecked appends an admitted proposal on this node, the leader,
// unless the ledger's dry run rejects it: then the verdict is the answer and
// the log is unchanged.
func (n *Node) appendChecked(ctx context.Context, c *ledger.Command, data []byte) (ledger.Result, error) {
	if res, refused := n.dryRun(ctx, c); refused {
		n.log.Debug("consensus: proposal refused before the log", "kind", res.Kind, "err", res.Err)
		return res, nil
	}
	return n.applyLocal(ctx, data)
}

// handlePropose serves a follower's forwarded command on the leader.
func (n *Node) handlePropose(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	if !n.IsLeader() {
		leader, _ := n.Leader()
		return nil, errorf(CodeNotLeader, "this peer is not the leader (leader: %s)", leader)
	}
	if ok, err := n.isMember(remote); err != nil {
		return nil, err
	} else if !ok {
		return nil, errorf(CodeNotMember, "peer %s is not a member of the cluster", remote)
	}
	c, err := n.admit(remote, data)
	if err != nil {
		return nil, err
	}
	res, err := n.appendChecked(ctx, &c, data)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return b, nil
}

// AppendAsLeader commits data on this node, which must be the leader, and
// returns what Apply did with it. It skips Config.Admit and never forwards:
// it is for the leader's own duties (its scheduling pass), which run only
// while this node leads. Errors are those of Propose (CodeNotLeader when
// this node does not lead).
func (n *Node) AppendAsLeader(ctx context.Context, data []byte) (ledger.Result, error) {
	return n.applyLocal(ctx, data)
}

// Barrier waits until every entry committed before the call is applied to
// the local ledger. Only the leader can pass a barrier (CodeNotLeader
// elsewhere); a new leader passes one before it trusts its view.
func (n *Node) Barrier(ctx context.Context) error {
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := waitFuture(ctx, n.raft.Barrier(timeout)); err != nil {
		return raftError(err, "barrier", CodeNotLeader)
	}
	return nil
}

// applyLocal appends data to the log on this node (which must lead) and
// waits until it is applied. raft futures ignore contexts; when ctx ends
// first the entry may still commit, hence CodeOutcomeUnknown.
func (n *Node) applyLocal(ctx context.Context, data []byte) (ledger.Result, error) {
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return ledger.Result{}, errorf(CodeTimeout, "apply: %v", context.DeadlineExceeded)
		}
	}
	f := n.raft.Apply(data, timeout)
	if err := waitFuture(ctx, f); err != nil {
		return ledger.Result{}, raftError(err, "apply", CodeOutcomeUnknown)
	}
	res, ok := f.Response().(ledger.Result)
	if !ok {
		return ledger.Result{}, errorf(CodeOutcomeUnknown, "apply: unexpected response %T", f.Response())
	}
	return res, nil
}

// waitFuture waits for a raft future or the context, whichever ends first.
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w (the entry may still commit)", ctx.Err())
	}
}

// isMember reports whether id is in the Raft configuration.
func (n *Node) isMember(id peer.ID) (bool, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return false, raftError(err, "configuration", CodeMembership)
	}
	// By binary ID (memberset.go): this runs on every forwarded
	// proposal, gossip message and direct heartbeat.
	return n.gate.inConfiguration(f.Configuration(), id), nil
}
