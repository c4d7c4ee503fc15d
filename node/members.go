package node

import (
	"context"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

var _ api.Members = (*Node)(nil)

// Members lists every Raft member with its organisation, suffrage,
// reachability and last contact, as the leader sees them (api.Members;
// consensus.Node.MembersHealth).
func (n *Node) Members(ctx context.Context) (api.MembersView, error) {
	if err := n.requireReady(); err != nil {
		return api.MembersView{}, err
	}
	rep, err := n.cons.MembersHealth(ctx)
	if err != nil {
		return api.MembersView{}, apiError(err)
	}
	v := api.MembersView{Leader: idString(rep.Leader), Observer: idString(rep.Observer), Note: rep.Note, Members: []api.MemberView{}}
	for _, m := range rep.Members {
		mv := api.MemberView{ID: m.ID.String(), Org: m.Org, Suffrage: api.SuffrageNonvoter, Leader: m.Leader,
			Reachable: m.Reachable, LastContactMs: -1}
		if m.LastContact >= 0 {
			mv.LastContactMs = m.LastContact.Milliseconds()
		}
		if m.Voter {
			mv.Suffrage = api.SuffrageVoter
			v.Voters++
			if m.Reachable {
				v.VotersReachable++
			}
		}
		v.Members = append(v.Members, mv)
	}
	return v, nil
}

// RemoveMember asks for the removal of member id (api.Members). A peer
// removes itself only by leaving (peer leave: its tasks stop and its
// machines are released first), so naming this peer is refused; another
// organisation's peer is removed only by the federation's vote: this
// casts this organisation's vote (consensus.Node.RemovePeer), and the
// answer says whether the votes so far remove it.
func (n *Node) RemoveMember(ctx context.Context, id string) (api.MemberRemoval, error) {
	if err := n.requireReady(); err != nil {
		return api.MemberRemoval{}, err
	}
	pid, err := peer.Decode(id)
	if err != nil {
		return api.MemberRemoval{}, api.Errorf(api.CodeBadRequest, "member %q: %v", id, err)
	}
	if pid == n.self {
		return api.MemberRemoval{}, api.Errorf(api.CodeConflict, "%s is this peer: to take it out of the federation, use peer leave (POST /v1/leave), which stops its tasks and releases its machines first", id)
	}
	var org string
	n.cons.View(func(l *ledger.Ledger) { org, _ = l.OrgOfPeer(id) })
	res, err := n.cons.RemovePeer(ctx, pid)
	if err != nil {
		return api.MemberRemoval{}, membershipError(err)
	}
	return api.MemberRemoval{ID: id, Org: org, Removed: res.Removed, Note: res.Note}, nil
}

func idString(id peer.ID) string {
	if id == "" {
		return ""
	}
	return id.String()
}
