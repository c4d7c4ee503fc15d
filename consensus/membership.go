package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Membership operations carried on ProtoMembership.
const (
	opJoin   = "join"
	opLeave  = "leave"
	opRemove = "remove"
)

// maxAddrsInRequest bounds the addresses a membership message may carry.
const maxAddrsInRequest = 32

type memberRequest struct {
	Op string `json:"op"`
	// Peer names the peer the operation is about when it is not the
	// sender: a join or leave forwarded by a member, or a removal.
	Peer  string   `json:"peer,omitempty"`
	Addrs []string `json:"addrs,omitempty"`
}

type memberInfo struct {
	ID    string   `json:"id"`
	Voter bool     `json:"voter"`
	Addrs []string `json:"addrs,omitempty"`
}

type memberResponse struct {
	Leader  string       `json:"leader"`
	Voter   bool         `json:"voter"`
	Members []memberInfo `json:"members"`
}

// JoinResult says how this node was admitted.
type JoinResult struct {
	// Via is the member that was dialled; Leader the leader that admitted
	// this node.
	Via, Leader peer.ID
	// Voter says whether this node was added as a voter.
	Voter bool
	// Members is the configuration right after the admission.
	Members []peer.ID
}

// Join asks an existing member to admit this node. It dials the bootstrap
// addresses (multiaddrs ending in /p2p/<id>) in order until one answers;
// the member forwards the request to the leader if it does not lead. The
// leader adds this node as a voter while the cluster has fewer than
// MaxVoters voters, else as a non-voter. Joining again after a restart is
// harmless: the leader answers with the current membership.
//
// The returned membership's addresses are remembered, so that this node can
// reach every member (and restart) without a bootstrap address.
func (n *Node) Join(ctx context.Context, bootstrap ...string) (JoinResult, error) {
	if len(bootstrap) == 0 {
		return JoinResult{}, errors.New("join: no bootstrap address")
	}
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	req, _ := json.Marshal(memberRequest{Op: opJoin, Addrs: addrStrings(n.host.Addrs())})
	var errs []error
	for _, addr := range bootstrap {
		via, err := n.host.ConnectAddr(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if via == n.self {
			errs = append(errs, fmt.Errorf("join %s: that is this peer", addr))
			continue
		}
		resp, err := n.host.Request(ctx, via, ProtoMembership, req)
		if err != nil && certainlyNotApplied(err) {
			// The member knew no leader yet (an election is running).
			select {
			case <-time.After(n.cfg.ElectionTimeout):
			case <-ctx.Done():
			}
			resp, err = n.host.Request(ctx, via, ProtoMembership, req)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("join via %s: %w", addr, err))
			continue
		}
		var mr memberResponse
		if err := json.Unmarshal(resp, &mr); err != nil {
			errs = append(errs, fmt.Errorf("join via %s: bad response: %w", addr, err))
			continue
		}
		res := JoinResult{Via: via, Voter: mr.Voter}
		res.Leader, _ = peer.Decode(mr.Leader)
		for _, m := range mr.Members {
			id, err := peer.Decode(m.ID)
			if err != nil {
				continue
			}
			res.Members = append(res.Members, id)
			if id == n.self {
				continue
			}
			if err := n.host.Remember(peer.AddrInfo{ID: id, Addrs: parseAddrs(m.Addrs)}); err != nil {
				n.log.Warn("consensus: remember member", "peer", id, "err", err)
			}
		}
		n.kick() // connect to every member now, not at the next tick
		return res, nil
	}
	return JoinResult{}, errors.Join(errs...)
}

// Leave removes this node from the cluster and shuts it down. A leader first
// hands leadership to another voter. The last voter cannot leave
// (CodeLastMember): there would be no cluster to leave.
func (n *Node) Leave(ctx context.Context) error {
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	members, err := n.Members()
	if err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	if len(members) <= 1 {
		return errorf(CodeLastMember, "this peer is the cluster's only member")
	}
	if n.IsLeader() {
		if err := n.handOver(ctx, members); err != nil {
			return fmt.Errorf("leave: %w", err)
		}
	}
	req, _ := json.Marshal(memberRequest{Op: opLeave})
	// A request whose outcome is unknown (the new leader lost leadership
	// while committing it) or that met no leader is sent again, a few
	// times; "not a member" on a retry means an earlier attempt committed.
	attempt := 0
	var last error
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		_, last = n.onLeader(ctx, req)
		switch {
		case last == nil, attempt > 1 && p2p.Code(last) == CodeNotMember:
			return struct{}{}, nil
		case certainlyNotApplied(last) || p2p.Code(last) == CodeOutcomeUnknown:
			return struct{}{}, last
		}
		return struct{}{}, backoff.Permanent(last)
	},
		backoff.WithBackOff(backoff.NewConstantBackOff(200*time.Millisecond)),
		backoff.WithMaxTries(3),
		backoff.WithMaxElapsedTime(0),
	)
	if err != nil {
		// On ctx's end backoff reports ctx's error; the attempt's says more.
		return fmt.Errorf("leave: %w", last)
	}
	if err := n.Shutdown(); err != nil {
		return fmt.Errorf("leave: shutdown: %w", err)
	}
	return nil
}

// handOver transfers leadership before this leader leaves, promoting a
// non-voter first if no other voter exists.
func (n *Node) handOver(ctx context.Context, members []Member) error {
	hasVoter := false
	for _, m := range members {
		if m.Voter && m.ID != n.self {
			hasVoter = true
		}
	}
	if !hasVoter {
		for _, m := range members {
			if m.ID != n.self {
				f := n.raft.AddVoter(raft.ServerID(m.ID.String()), raft.ServerAddress(m.ID.String()), 0, n.cfg.ApplyTimeout)
				if err := waitFuture(ctx, f); err != nil {
					return raftError(err, "promote before leaving", CodeMembership)
				}
				break
			}
		}
	}
	if err := waitFuture(ctx, n.raft.LeadershipTransfer()); err != nil {
		return raftError(err, "leadership transfer", CodeMembership)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, ok := n.Leader(); ok && id != n.self {
			return nil
		}
		select {
		case <-ctx.Done():
			return errorf(CodeTimeout, "waiting for the new leader: %v", ctx.Err())
		case <-t.C:
		}
	}
}

// RemovePeer removes another member from the cluster (for a peer that is
// gone for good). A non-voter is promoted if a voter was removed. To remove
// this node, use Leave.
func (n *Node) RemovePeer(ctx context.Context, id peer.ID) error {
	if id == n.self {
		return errors.New("remove peer: use Leave to remove this peer")
	}
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	req, _ := json.Marshal(memberRequest{Op: opRemove, Peer: id.String()})
	if _, err := n.onLeader(ctx, req); err != nil {
		return fmt.Errorf("remove peer %s: %w", id, err)
	}
	return nil
}

// onLeader runs a membership request on the leader, locally or over a
// stream, retrying once after a leader change.
func (n *Node) onLeader(ctx context.Context, req []byte) (memberResponse, error) {
	var tried peer.ID
	for attempt := 0; ; attempt++ {
		leader, err := n.WaitLeader(ctx)
		var resp []byte
		if err == nil {
			tried = leader
			if leader == n.self {
				resp, err = n.handleMembership(ctx, n.self, req)
			} else {
				resp, err = n.host.Request(ctx, leader, ProtoMembership, req)
			}
		}
		if err != nil {
			if attempt == 0 && certainlyNotApplied(err) {
				if werr := n.waitLeaderChange(ctx, tried); werr == nil {
					continue
				}
			}
			return memberResponse{}, err
		}
		var mr memberResponse
		if err := json.Unmarshal(resp, &mr); err != nil {
			return memberResponse{}, fmt.Errorf("bad membership response: %w", err)
		}
		return mr, nil
	}
}

// handleMembership serves join, leave and remove requests. A non-leader
// forwards them to the leader, naming the peer they are about.
func (n *Node) handleMembership(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	var req memberRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, errorf(p2p.CodeBadRequest, "membership request: %v", err)
	}
	if len(req.Addrs) > maxAddrsInRequest {
		return nil, errorf(p2p.CodeBadRequest, "membership request: more than %d addresses", maxAddrsInRequest)
	}
	subject := remote
	if req.Peer != "" {
		id, err := peer.Decode(req.Peer)
		if err != nil {
			return nil, errorf(p2p.CodeBadRequest, "membership request: peer %q: %v", req.Peer, err)
		}
		subject = id
	}
	switch req.Op {
	case opJoin, opLeave, opRemove:
	default:
		return nil, errorf(p2p.CodeBadRequest, "membership request: unknown op %q", req.Op)
	}
	if req.Op == opRemove && req.Peer == "" {
		return nil, errorf(p2p.CodeBadRequest, "remove: no peer named")
	}
	// Acting for another peer is for members only; joining for oneself is
	// what the federation secret allows.
	if subject != remote && remote != n.self {
		if ok, err := n.isMember(remote); err != nil {
			return nil, err
		} else if !ok {
			return nil, errorf(CodeNotMember, "peer %s is not a member and cannot act for %s", remote, subject)
		}
	}
	if req.Op == opLeave || req.Op == opRemove {
		if ok, err := n.isMember(remote); err != nil {
			return nil, err
		} else if !ok && remote != n.self {
			return nil, errorf(CodeNotMember, "peer %s is not a member", remote)
		}
	}

	if !n.IsLeader() {
		leader, err := n.WaitLeader(ctx)
		if err != nil {
			return nil, err
		}
		if leader == n.self {
			return nil, errorf(CodeNotLeader, "leadership is changing")
		}
		fwd := memberRequest{Op: req.Op, Peer: subject.String(), Addrs: req.Addrs}
		if req.Op == opJoin {
			// The leader may not know how to reach the joiner: pass on
			// what it announced and what this member sees.
			fwd.Addrs = mergeAddrs(req.Addrs, addrStrings(n.host.Peerstore().Addrs(subject)))
		}
		b, _ := json.Marshal(fwd)
		return n.host.Request(ctx, leader, ProtoMembership, b)
	}

	var voter bool
	switch req.Op {
	case opJoin:
		addrs := parseAddrs(req.Addrs)
		if subject == remote {
			addrs = append(addrs, n.host.Peerstore().Addrs(subject)...)
		}
		if err := n.host.Remember(peer.AddrInfo{ID: subject, Addrs: addrs}); err != nil {
			n.log.Warn("consensus: remember joiner", "peer", subject, "err", err)
		}
		v, err := n.addPeer(ctx, subject)
		if err != nil {
			return nil, err
		}
		voter = v
	case opLeave, opRemove:
		if subject == n.self {
			return nil, errorf(CodeNotLeader, "the leader hands over leadership before it leaves")
		}
		if err := n.removePeer(ctx, subject); err != nil {
			return nil, err
		}
	}
	members, err := n.Members()
	if err != nil {
		return nil, err
	}
	resp := memberResponse{Leader: n.self.String(), Voter: voter}
	for _, m := range members {
		resp.Members = append(resp.Members, memberInfo{ID: m.ID.String(), Voter: m.Voter, Addrs: addrStrings(m.Addrs)})
	}
	return json.Marshal(resp)
}

// addPeer adds id to the configuration on the leader: a voter while fewer
// than MaxVoters voters exist, a non-voter after. A peer already in the
// configuration keeps its place.
func (n *Node) addPeer(ctx context.Context, id peer.ID) (voter bool, err error) {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return false, raftError(err, "configuration", CodeMembership)
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id.String() {
			return s.Suffrage == raft.Voter, nil
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	sid, addr := raft.ServerID(id.String()), raft.ServerAddress(id.String())
	var fut raft.IndexFuture
	if voters < n.cfg.MaxVoters {
		fut = n.raft.AddVoter(sid, addr, f.Index(), n.cfg.ApplyTimeout)
		voter = true
	} else {
		fut = n.raft.AddNonvoter(sid, addr, f.Index(), n.cfg.ApplyTimeout)
	}
	if err := waitFuture(ctx, fut); err != nil {
		return false, raftError(err, "add "+id.String(), CodeMembership)
	}
	n.log.Info("consensus: peer admitted", "joiner", id, "voter", voter)
	return voter, nil
}

// removePeer removes id on the leader, then promotes a non-voter if a voter
// went.
func (n *Node) removePeer(ctx context.Context, id peer.ID) error {
	n.memberMu.Lock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		n.memberMu.Unlock()
		return raftError(err, "configuration", CodeMembership)
	}
	found := false
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id.String() {
			found = true
		}
	}
	if !found {
		n.memberMu.Unlock()
		return errorf(CodeNotMember, "peer %s is not a member", id)
	}
	err := waitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id.String()), f.Index(), n.cfg.ApplyTimeout))
	n.memberMu.Unlock()
	if err != nil {
		return raftError(err, "remove "+id.String(), CodeMembership)
	}
	n.log.Info("consensus: peer removed", "removed", id)
	return n.promote(ctx)
}

// promote makes non-voters voters while fewer than MaxVoters voters exist,
// preferring non-voters this leader is connected to, in configuration
// order (the longest-standing first).
func (n *Node) promote(ctx context.Context) error {
	if !n.IsLeader() {
		return nil
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	for {
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return raftError(err, "configuration", CodeMembership)
		}
		voters := 0
		var candidate raft.ServerID
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
				continue
			}
			if candidate != "" || s.Suffrage != raft.Nonvoter {
				continue
			}
			id, err := peer.Decode(string(s.ID))
			if err == nil && n.host.Network().Connectedness(id) == network.Connected {
				candidate = s.ID
			}
		}
		if voters >= n.cfg.MaxVoters || candidate == "" {
			return nil
		}
		err := waitFuture(ctx, n.raft.AddVoter(candidate, raft.ServerAddress(candidate), f.Index(), n.cfg.ApplyTimeout))
		if err != nil {
			return raftError(err, "promote "+string(candidate), CodeMembership)
		}
		n.log.Info("consensus: non-voter promoted", "promoted", string(candidate))
	}
}

func addrStrings(as []ma.Multiaddr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

func parseAddrs(ss []string) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, s := range ss {
		if a, err := ma.NewMultiaddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func mergeAddrs(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string{}, a...), b...) {
		if !seen[s] && len(out) < maxAddrsInRequest {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
