package node

import (
	"context"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

var _ api.Membership = (*Node)(nil)

// Invite issues an invitation for another organisation, signed with this
// peer's identity (api.Membership; consensus.Node.Invite).
func (n *Node) Invite(_ context.Context, req api.InviteRequest) (api.Invitation, error) {
	if err := n.requireReady(); err != nil {
		return api.Invitation{}, err
	}
	ir := consensus.InviteRequest{Org: req.Org, TTL: time.Duration(req.TTLSeconds) * time.Second}
	if req.Peer != "" {
		id, err := peer.Decode(req.Peer)
		if err != nil {
			return api.Invitation{}, api.Errorf(api.CodeBadRequest, "peer %q: %v", req.Peer, err)
		}
		ir.Peer = id
	}
	inv, err := n.cons.Invite(ir)
	if err != nil {
		return api.Invitation{}, membershipError(err)
	}
	return api.Invitation{ID: inv.ID, Org: inv.Org, Peer: inv.Peer, InviterOrg: inv.InviterOrg, Inviter: inv.Inviter,
		ExpiresMs: inv.ExpiresMs, Token: inv.Token()}, nil
}

// VoteRemoval casts this organisation's vote to remove another
// (api.Membership; consensus.Node.RemovePeer).
func (n *Node) VoteRemoval(ctx context.Context, req api.RemovalRequest) (api.RemovalView, error) {
	if err := n.requireReady(); err != nil {
		return api.RemovalView{}, err
	}
	id, err := n.peerOfOrg(req.Org)
	if err != nil {
		return api.RemovalView{}, api.Errorf(api.CodeNotFound, "organisation %q: %v", req.Org, err)
	}
	res, err := n.cons.RemovePeer(ctx, id)
	if err != nil {
		return api.RemovalView{}, membershipError(err)
	}
	return api.RemovalView{Org: req.Org, Removed: res.Removed, Note: res.Note}, nil
}

// membershipError maps the consensus layer's membership refusals to the
// API's codes.
func membershipError(err error) error {
	switch p2p.Code(err) {
	case consensus.CodeInvitation, consensus.CodeInvitationRequired:
		return api.ErrInvitationRefused("%v", err)
	case consensus.CodeNotMember:
		return api.ErrNotMember("%v", err)
	case consensus.CodeForbidden:
		return api.Errorf(api.CodeConflict, "%v", err)
	}
	return apiError(err)
}

// checkInvitation refuses, before anything starts, an invitation that
// cannot be this peer's: unreadable, or for another organisation. Its
// expiry is the leader's to judge, and only when this peer joins: a
// member restarting with the flag still set needs none.
func checkInvitation(token, org string) error {
	if token == "" {
		return nil
	}
	inv, err := consensus.ParseInvitation(token)
	if err != nil {
		return badInput("--invitation: %v", err)
	}
	if inv.Org != org {
		return badInput("--invitation is for organisation %q; this peer's organisation is %q (config.yaml org)", inv.Org, org)
	}
	return nil
}
