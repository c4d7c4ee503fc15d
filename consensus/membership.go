package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/ledger"
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
	// opMembers asks a member for the configuration it knows and the
	// leader, without changing anything: a joiner learns from whom Raft's
	// first RPCs will come, a lagging member whom it does not know yet
	// (gate.go).
	opMembers = "members"
)

// maxAddrsInRequest bounds the addresses a membership message may carry.
const maxAddrsInRequest = 32

type memberRequest struct {
	Op string `json:"op"`
	// Peer names the peer the operation is about when it is not the
	// sender: a join or leave forwarded by a member, or a removal.
	Peer  string   `json:"peer,omitempty"`
	Addrs []string `json:"addrs,omitempty"`
	// Invitation is the joiner's invitation token (join only): required
	// unless the joiner is a member already.
	Invitation string `json:"invitation,omitempty"`
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
// the member forwards the request to the leader if it does not lead.
// invitation is the token a member organisation issued (Invite); the
// leader refuses a peer that is not a member yet without a good one
// (CodeInvitationRequired, CodeInvitation). The leader adds this node as a
// voter while that keeps the configuration safe (voters.go), else as a
// non-voter, promoted later. Joining again while a member is harmless and
// needs no invitation: the leader answers with the current membership.
// While peers it admitted before are catching up, the leader answers
// CodeAdmissionPaced (joinpace.go) and Join returns that at once: ask
// again after a backoff.
//
// The returned membership's addresses are remembered, so that this node can
// reach every member (and restart) without a bootstrap address.
func (n *Node) Join(ctx context.Context, invitation string, bootstrap ...string) (JoinResult, error) {
	return n.join(ctx, invitation, bootstrap)
}

// requestJoin sends the join request to via, again every election timeout
// while the answer says it certainly was not applied (the member knew no
// leader yet, or leadership was changing hands: an election is running),
// until ctx ends. A paced answer is returned at once.
func (n *Node) requestJoin(ctx context.Context, via peer.ID, req []byte) ([]byte, error) {
	var last error
	resp, err := backoff.Retry(ctx, func() ([]byte, error) {
		resp, err := n.host.Request(ctx, via, ProtoMembership, req)
		// A join may be sent again even when its outcome is unknown
		// (leadership lost while committing it): the leader answers a
		// peer already in the configuration with its suffrage and
		// records a spent invitation at most once (admitPeer).
		// A paced admission is the caller's to wait for (it may wait
		// longer than this attempt: node.joinPatiently).
		if err != nil && (!Retryable(err) || paced(err)) {
			return nil, backoff.Permanent(err)
		}
		last = err
		return resp, err
	},
		backoff.WithBackOff(backoff.NewConstantBackOff(n.cfg.ElectionTimeout)),
		backoff.WithMaxElapsedTime(0),
	)
	if err != nil && ctx.Err() != nil && last != nil {
		// Out of time while the federation elected: say why it refused.
		return nil, last
	}
	return resp, err
}

// join is Join.
func (n *Node) join(ctx context.Context, invitation string, bootstrap []string) (JoinResult, error) {
	if len(bootstrap) == 0 {
		return JoinResult{}, errors.New("join: no bootstrap address")
	}
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	req, _ := json.Marshal(memberRequest{Op: opJoin, Addrs: addrStrings(n.host.Addrs()), Invitation: strings.TrimSpace(invitation)})
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
		// Raft's first AppendEntries arrives while the leader commits the
		// join, before the answer: learn now whom to accept them from.
		if _, err := n.askMembers(ctx, via, true); err != nil {
			n.log.Debug("consensus: members before join", "via", via, "err", err)
			n.gate.tell([]peer.ID{via})
		}
		resp, err := n.requestJoin(ctx, via, req)
		if paced(err) {
			// The leader answered: asking it through another member
			// would get the same answer.
			return JoinResult{}, fmt.Errorf("join via %s: %w", addr, err)
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
		n.gate.tell(append(mr.ids(), res.Leader, via))
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

// RemovalResult is the outcome of a vote to remove a member.
type RemovalResult struct {
	// Org is the organisation whose peer the vote is about.
	Org string
	// Removed: the vote completed a majority; the organisation is removed
	// and its peer taken out of the configuration.
	Removed bool
	// Note says how many organisations voted and how many must.
	Note string
}

// RemovePeer casts this peer's organisation's vote to remove the member id
// (for a peer gone for good or misbehaving). No member removes another on
// its own: the ledger removes an organisation once more than half of the
// organisations not removed voted for it (ledger.Membership); the leader
// then takes its peer out of the configuration and declares its machines
// lost. A peer not bound to any organisation (it joined but never
// registered) is removed at once. To remove this node, use Leave.
func (n *Node) RemovePeer(ctx context.Context, id peer.ID) (RemovalResult, error) {
	if id == n.self {
		return RemovalResult{}, errors.New("remove peer: use Leave to remove this peer")
	}
	ctx, cancel := n.withTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	var self, target string
	var okSelf, okTarget, removed bool
	n.fsm.view(func(l *ledger.Ledger) {
		self, okSelf = l.OrgOfPeer(n.self.String())
		target, okTarget = l.OrgOfPeer(id.String())
		removed = okTarget && l.IsRemoved(target)
	})
	member, err := n.isMember(id)
	if err != nil {
		return RemovalResult{}, err
	}
	switch {
	case !okSelf:
		return RemovalResult{}, errorf(CodeNotMember, "remove peer %s: this peer's organisation is not registered", id)
	case !okTarget && !member, removed && !member:
		return RemovalResult{}, errorf(CodeNotMember, "remove peer %s: not a member", id)
	}
	res := RemovalResult{Org: target, Removed: removed}
	if okTarget && !removed {
		data, err := n.encode(ledger.Command{Org: self, Peer: n.self.String(), AtMs: time.Now().UnixMilli(),
			Membership: &ledger.Membership{Remove: &ledger.RemovalVote{Org: target}}})
		if err != nil {
			return RemovalResult{}, fmt.Errorf("remove peer %s: %w", id, err)
		}
		lres, err := n.Propose(ctx, data)
		if err != nil {
			return RemovalResult{}, fmt.Errorf("remove peer %s: %w", id, err)
		}
		if lres.Err != nil {
			return RemovalResult{}, errorf(CodeForbidden, "remove peer %s: %v", id, lres.Err)
		}
		if len(lres.Notes) > 0 {
			res.Note = lres.Notes[0]
		}
		if err := n.WaitApplied(ctx, lres.Index); err != nil {
			return res, fmt.Errorf("remove peer %s: %w", id, err)
		}
		n.fsm.view(func(l *ledger.Ledger) { res.Removed = l.IsRemoved(target) })
	}
	if !res.Removed && okTarget {
		return res, nil
	}
	// Decided (or a peer bound to no organisation): have the leader act
	// now rather than at its next maintenance tick.
	req, _ := json.Marshal(memberRequest{Op: opRemove, Peer: id.String()})
	if _, err := n.onLeader(ctx, req); err != nil && p2p.Code(err) != CodeNotMember {
		return res, fmt.Errorf("remove peer %s: %w", id, err)
	}
	res.Removed = true
	return res, nil
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
	case opMembers:
		// What any secret holder learns by joining anyway; answered
		// locally (a follower's view may lag its leader's by a heartbeat).
		return n.membersResponse(false)
	case opHealth:
		return n.handleHealth(remote)
	case opJoin, opLeave, opRemove:
	default:
		return nil, errorf(p2p.CodeBadRequest, "membership request: unknown op %q", req.Op)
	}
	if req.Op == opRemove && req.Peer == "" {
		return nil, errorf(p2p.CodeBadRequest, "remove: no peer named")
	}
	// Acting for another peer is for members only (a member forwarding a
	// join); a peer leaves only for itself; joining for oneself needs an
	// invitation, checked by the leader.
	if subject != remote && remote != n.self {
		if ok, err := n.isMember(remote); err != nil {
			return nil, err
		} else if !ok {
			return nil, errorf(CodeNotMember, "peer %s is not a member and cannot act for %s", remote, subject)
		}
		if req.Op == opLeave {
			return nil, errorf(CodeForbidden, "peer %s cannot make %s leave: a member leaves by itself, or is removed by a vote of the organisations", remote, subject)
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
		if req.Op == opLeave {
			// Forwarded, a leave would name its subject for another peer;
			// the leaver asks the leader itself.
			leader, _ := n.Leader()
			return nil, errorf(CodeNotLeader, "this peer is not the leader (leader: %s)", leader)
		}
		leader, err := n.WaitLeader(ctx)
		if err != nil {
			return nil, err
		}
		if leader == n.self {
			return nil, errorf(CodeNotLeader, "leadership is changing")
		}
		fwd := memberRequest{Op: req.Op, Peer: subject.String(), Addrs: req.Addrs, Invitation: req.Invitation}
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
		v, err := n.admitPeer(ctx, subject, req.Invitation)
		if err != nil {
			return nil, err
		}
		voter = v
	case opLeave, opRemove:
		if subject == n.self {
			return nil, errorf(CodeNotLeader, "the leader hands over leadership before it leaves")
		}
		if req.Op == opRemove {
			if err := n.removalDecided(subject); err != nil {
				return nil, err
			}
		}
		if err := n.removePeer(ctx, subject); err != nil {
			return nil, err
		}
	}
	return n.membersResponse(voter)
}

// membersResponse describes the configuration this node knows and its
// leader (empty when none is known).
func (n *Node) membersResponse(voter bool) ([]byte, error) {
	members, err := n.Members()
	if err != nil {
		return nil, err
	}
	resp := memberResponse{Voter: voter}
	if leader, ok := n.Leader(); ok {
		resp.Leader = leader.String()
	}
	for _, m := range members {
		resp.Members = append(resp.Members, memberInfo{ID: m.ID.String(), Voter: m.Voter, Addrs: addrStrings(m.Addrs)})
	}
	return json.Marshal(resp)
}

// ids are the peers a membership response names: its leader and members.
func (mr memberResponse) ids() []peer.ID {
	var out []peer.ID
	if id, err := peer.Decode(mr.Leader); err == nil {
		out = append(out, id)
	}
	for _, m := range mr.Members {
		if id, err := peer.Decode(m.ID); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// askMembers asks member via for the configuration it knows. With tell,
// the gate is told to accept Raft RPCs from via and the peers it names
// until this node's own configuration names it (a joiner).
func (n *Node) askMembers(ctx context.Context, via peer.ID, tell bool) ([]peer.ID, error) {
	req, _ := json.Marshal(memberRequest{Op: opMembers})
	resp, err := n.host.Request(ctx, via, ProtoMembership, req)
	if err != nil {
		return nil, err
	}
	var mr memberResponse
	if err := json.Unmarshal(resp, &mr); err != nil {
		return nil, fmt.Errorf("bad members response: %w", err)
	}
	ids := append(mr.ids(), via)
	if tell {
		n.gate.tell(ids)
	}
	return ids, nil
}

// vouchRound asks up to maxVouchers members this node knows about the
// senders its gate refused since the last round: a member that joined
// after this node's log was last updated (and may lead now) is admitted on
// an authenticated member's word (gate.go). Only a member asks: a joiner
// has been told whom to accept.
func (n *Node) vouchRound(ctx context.Context) {
	refused := n.gate.takeRefused()
	if len(refused) == 0 {
		return
	}
	cfg := n.gate.configuration()
	if !inConfiguration(cfg, n.self) {
		return
	}
	const maxVouchers = 3
	asked := 0
	for _, s := range cfg.Servers {
		id, err := peer.Decode(string(s.ID))
		if err != nil || id == n.self || n.host.Network().Connectedness(id) != network.Connected {
			continue
		}
		if asked++; asked > maxVouchers {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, n.cfg.TransportTimeout)
		named, err := n.askMembers(rctx, id, false)
		cancel()
		if err != nil {
			continue
		}
		var vouched []peer.ID
		for _, r := range refused {
			for _, m := range named {
				if m == r {
					vouched = append(vouched, r)
				}
			}
		}
		n.gate.vouch(vouched)
	}
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

// promote takes out the peers the ledger removed (expelRemoved) and the
// non-voters dead for RemoveDeadAfter (expelDead), then
// makes non-voters voters while fewer than MaxVoters voters exist and the
// configuration stays safe (safeToAddVoter), choosing non-voters this
// leader reaches, in configuration order (the longest-standing first).
func (n *Node) promote(ctx context.Context) error {
	if !n.IsLeader() {
		return nil
	}
	n.expelRemoved(ctx)
	n.expelDead(ctx)
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
			if err == nil && n.pilot.reachable(id) {
				candidate = s.ID
			}
		}
		if voters >= n.cfg.MaxVoters || candidate == "" || !n.safeToAddVoter(f.Configuration()) {
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
