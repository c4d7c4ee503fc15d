package consensus

import (
	"context"
	"fmt"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Error codes of admission (see also errors.go).
const (
	// CodeInvitationRequired: a peer that is not a member asked to join
	// without an invitation.
	CodeInvitationRequired = "invitation_required"
	// CodeInvitation: the invitation was refused (forged, expired, spent,
	// for another peer or organisation, from an inviter that is no longer
	// a member, or the organisation is bound to another peer).
	CodeInvitation = "invitation_refused"
)

// InviteRequest says whom an invitation admits.
type InviteRequest struct {
	// Org is the invited organisation (required).
	Org string
	// Peer, when set, is the only peer that may use the invitation.
	Peer peer.ID
	// TTL is the validity (DefaultInvitationTTL when zero; at most
	// MaxInvitationTTL).
	TTL time.Duration
}

// Invite issues an invitation signed with this peer's identity, for this
// peer's organisation, which must be registered and not removed, and this
// peer a member. Nothing is written to the log: the invitation is spent
// when the invited peer joins.
func (n *Node) Invite(req InviteRequest) (Invitation, error) {
	ttl := req.TTL
	if ttl == 0 {
		ttl = DefaultInvitationTTL
	}
	if ttl < 0 || ttl > MaxInvitationTTL {
		return Invitation{}, errorf(CodeInvitation, "invitation validity %s: want up to %s", ttl, MaxInvitationTTL)
	}
	if ok, err := n.isMember(n.self); err != nil {
		return Invitation{}, err
	} else if !ok {
		return Invitation{}, errorf(CodeNotMember, "this peer is not a member of the federation")
	}
	var inviter, bound string
	var removed bool
	n.fsm.view(func(l *ledger.Ledger) {
		inviter, _ = l.OrgOfPeer(n.self.String())
		removed = inviter != "" && l.IsRemoved(inviter)
		if o, ok := l.Org(req.Org); ok {
			bound = o.Peer
		}
	})
	switch {
	case inviter == "":
		return Invitation{}, errorf(CodeNotMember, "this peer's organisation is not registered yet")
	case removed:
		return Invitation{}, errorf(CodeNotMember, "this peer's organisation %q was removed from the federation", inviter)
	case bound != "" && (req.Peer == "" || bound != req.Peer.String()):
		return Invitation{}, errorf(CodeInvitation, "organisation %q is already bound to peer %s: invite that peer (to rejoin) or another organisation", req.Org, bound)
	}
	inv := Invitation{Org: req.Org, InviterOrg: inviter, ExpiresMs: time.Now().Add(ttl).UnixMilli()}
	if req.Peer != "" {
		inv.Peer = req.Peer.String()
	}
	key := n.host.Peerstore().PrivKey(n.self)
	if key == nil {
		return Invitation{}, fmt.Errorf("invite: this peer's private key is not available")
	}
	inv, err := SignInvitation(key, inv)
	if err != nil {
		return Invitation{}, err
	}
	if err := inv.admission(inv.Token()).validate(); err != nil {
		return Invitation{}, errorf(CodeInvitation, "%v", err)
	}
	n.log.Info("consensus: invitation issued", "org", req.Org, "peer", inv.Peer, "expires", time.UnixMilli(inv.ExpiresMs).UTC())
	return inv, nil
}

// admitPeer adds joiner to the configuration on the leader. A member keeps
// its place (and, if it presents an invitation the log has not recorded,
// the invitation is recorded now: an admission whose record was lost with
// a leader). Any other peer needs a good invitation: checked here (the
// signature, then the ledger's rules at this leader's time), the peer is
// added, and the spent invitation appended to the log; if the ledger
// refuses the record after all, the peer is taken out again. memberMu
// serialises the whole, so one invitation admits one peer.
func (n *Node) admitPeer(ctx context.Context, joiner peer.ID, token string) (voter bool, err error) {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return false, raftError(err, "configuration", CodeMembership)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == joiner.String() {
			// The latest configuration may not be committed yet (an
			// earlier attempt of this join lost its leader while
			// committing it): a new leader can still drop it, so the
			// joiner is told it is a member only once it is committed.
			if err := n.commitConfiguration(ctx, f.Index()); err != nil {
				return false, err
			}
			if token != "" {
				if _, err := n.recordAdmission(ctx, joiner, token); err != nil {
					n.log.Debug("consensus: member presented an invitation", "peer", joiner, "err", err)
				}
			}
			return s.Suffrage == raft.Voter, nil
		}
	}
	if token == "" {
		return false, errorf(CodeInvitationRequired, "peer %s is not a member: joining needs an invitation from a member organisation (peer invite ORG on a member, then peer run --invitation)", joiner)
	}
	// The invitation before the pace: a bad one is refused at once, never
	// told to wait for a turn (TestPacedLeaderRefusesBadInvitationsFirst).
	a, leaderOrg, spent, err := n.checkInvitation(joiner, token)
	if err != nil {
		return false, err
	}
	if err := n.admissionPaced(ctx); err != nil {
		return false, err
	}
	voter = n.safeToAddVoter(f.Configuration())
	sid, addr := raft.ServerID(joiner.String()), raft.ServerAddress(joiner.String())
	n.pilot.forget(sid)
	fut := n.raft.AddNonvoter(sid, addr, f.Index(), n.cfg.ApplyTimeout)
	if voter {
		fut = n.raft.AddVoter(sid, addr, f.Index(), n.cfg.ApplyTimeout)
	}
	if err := waitFuture(ctx, fut); err != nil {
		return false, raftError(err, "add "+joiner.String(), CodeMembership)
	}
	n.joins.add(joiner, fut.Index(), time.Now())
	if !spent {
		if err := n.appendAdmission(ctx, leaderOrg, a); err != nil {
			n.log.Warn("consensus: admission not recorded; taking the peer out again", "peer", joiner, "err", err)
			if rerr := waitFuture(ctx, n.raft.RemoveServer(sid, 0, n.cfg.ApplyTimeout)); rerr != nil {
				n.log.Error("consensus: take out a peer whose admission was not recorded", "peer", joiner, "err", rerr)
			}
			return false, err
		}
	}
	n.log.Info("consensus: peer admitted", "joiner", joiner, "org", a.Org, "invited_by", a.InviterOrg, "voter", voter)
	return voter, nil
}

// commitConfiguration makes sure the configuration entry at index is
// committed: a barrier when the commit index is behind it.
func (n *Node) commitConfiguration(ctx context.Context, index uint64) error {
	if n.raft.CommitIndex() >= index {
		return nil
	}
	return raftError(waitFuture(ctx, n.raft.Barrier(n.cfg.ApplyTimeout)), "commit the configuration", CodeTimeout)
}

// recordAdmission records token's admission of joiner, a member already,
// if the log does not hold it yet.
func (n *Node) recordAdmission(ctx context.Context, joiner peer.ID, token string) (bool, error) {
	a, leaderOrg, spent, err := n.checkInvitation(joiner, token)
	if err != nil || spent {
		return false, err
	}
	return true, n.appendAdmission(ctx, leaderOrg, a)
}

// checkInvitation verifies token for joiner: its signature, its inviter a
// member of the configuration, and the ledger's admission rules at this
// leader's time. It returns the admission to record, the leader's
// organisation (which acts for the record) and whether the log already
// records this admission.
func (n *Node) checkInvitation(joiner peer.ID, token string) (ledger.Admission, string, bool, error) {
	inv, err := ParseInvitation(token)
	if err != nil {
		return ledger.Admission{}, "", false, errorf(CodeInvitation, "%v", err)
	}
	if err := inv.Verify(joiner); err != nil {
		return ledger.Admission{}, "", false, errorf(CodeInvitation, "%v", err)
	}
	inviter, _ := peer.Decode(inv.Inviter)
	if ok, err := n.isMember(inviter); err != nil {
		return ledger.Admission{}, "", false, err
	} else if !ok {
		return ledger.Admission{}, "", false, errorf(CodeInvitation, "invitation %s: its inviter %s is no longer a member", inv.ID, inviter)
	}
	a := inv.admissionFor(joiner, token)
	var (
		leaderOrg string
		spent     bool
		lerr      *ledger.Error
	)
	now := time.Now().UnixMilli()
	n.fsm.view(func(l *ledger.Ledger) {
		leaderOrg, _ = l.OrgOfPeer(n.self.String())
		spent, lerr = l.CheckAdmission(a, now)
	})
	if lerr != nil {
		return ledger.Admission{}, "", false, errorf(CodeInvitation, "invitation %s: %v", inv.ID, lerr)
	}
	if leaderOrg == "" {
		return ledger.Admission{}, "", false, errorf(CodeNoLeader, "the leader's organisation is not registered yet; try again")
	}
	return a, leaderOrg, spent, nil
}

// appendAdmission appends the admission record as this leader.
func (n *Node) appendAdmission(ctx context.Context, leaderOrg string, a ledger.Admission) error {
	data, err := n.encode(ledger.Command{Org: leaderOrg, Peer: n.self.String(), AtMs: time.Now().UnixMilli(),
		Membership: &ledger.Membership{Admit: &a}})
	if err != nil {
		return errorf(CodeInvitation, "record admission: %v", err)
	}
	res, err := n.applyLocal(ctx, data)
	if err != nil {
		return err
	}
	if res.Err != nil {
		return errorf(CodeInvitation, "invitation %s: %v", a.Invitation, res.Err)
	}
	return nil
}

// removalDecided refuses to take id out of the configuration unless the
// ledger removed its organisation by a vote, or id acts for none (it
// joined and never registered).
func (n *Node) removalDecided(id peer.ID) error {
	var org string
	var ok, removed bool
	n.fsm.view(func(l *ledger.Ledger) {
		org, ok = l.OrgOfPeer(id.String())
		removed = ok && l.IsRemoved(org)
	})
	if ok && !removed {
		return errorf(CodeForbidden, "peer %s acts for organisation %q: it is removed only by itself (peer leave) or by a vote of the organisations (peer remove)", id, org)
	}
	return nil
}

// expelRemoved, on the leader, takes out of the configuration the peers of
// organisations the ledger removed by a vote.
func (n *Node) expelRemoved(ctx context.Context) {
	var gone []string
	n.fsm.view(func(l *ledger.Ledger) {
		for _, r := range l.Removed() {
			gone = append(gone, r.Peer)
		}
	})
	for _, p := range gone {
		id, err := peer.Decode(p)
		if err != nil {
			continue
		}
		if ok, err := n.isMember(id); err != nil || !ok {
			continue
		}
		if err := n.removePeer(ctx, id); err != nil {
			n.log.Warn("consensus: take out a removed organisation's peer", "peer", id, "err", err)
			continue
		}
		n.log.Warn("consensus: peer removed by a vote of the organisations", "peer", id)
	}
}

// IsMember reports whether id is in the Raft configuration as this node
// knows it (gossip and the leader's duties ask it).
func (n *Node) IsMember(id peer.ID) bool {
	ok, err := n.isMember(id)
	return err == nil && ok
}

// encode encodes a command this node authors, signed by Config.Signer.
func (n *Node) encode(c ledger.Command) ([]byte, error) {
	if n.cfg.Signer == nil {
		return ledger.EncodeCommand(c)
	}
	return ledger.EncodeSigned(c, n.cfg.Signer)
}
