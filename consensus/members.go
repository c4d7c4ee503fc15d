package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// opHealth asks the leader for its view of every member: whom it reaches
// and when it last heard from each. Only the leader knows (its autopilot
// asks every member for its stats); a follower asks it.
const opHealth = "health"

// MemberHealth is one member of the Raft configuration as the leader sees
// it (or, with no leader, as the node asked sees it: MembersReport.Observer).
type MemberHealth struct {
	ID peer.ID
	// Org is the organisation the peer is bound to in the local ledger; ""
	// for a peer that joined and never registered.
	Org    string
	Voter  bool
	Leader bool
	// Reachable: the observer is connected to it and, for the leader, it
	// answered the autopilot's stats requests lately (voters.go).
	Reachable bool
	// LastContact is how long ago the observer last heard from it (an
	// answer to a stats request, at MaintenanceInterval granularity); -1
	// when unknown (a leader that just took over, or no leader).
	LastContact time.Duration
}

// MembersReport is the membership with health, and whose view it is.
type MembersReport struct {
	// Leader is the leader ("" when none is known); Observer the peer whose
	// view Members is: the leader, or the node asked when no leader
	// answered (Note says why).
	Leader, Observer peer.ID
	Note             string
	Members          []MemberHealth
}

type healthInfo struct {
	ID        string `json:"id"`
	Voter     bool   `json:"voter"`
	Reachable bool   `json:"reachable"`
	// AgoMs is how long ago the leader last heard from the member; -1
	// unknown. Relative, so the asker's clock does not matter.
	AgoMs int64 `json:"ago_ms"`
}

type healthResponse struct {
	Leader  string       `json:"leader"`
	Members []healthInfo `json:"members"`
}

// MembersHealth reports every member with its organisation, suffrage,
// reachability and last contact, as the leader sees them. A follower asks
// the leader; with no leader answering it reports its own view (connected
// or not, no last contact) and says so in Note.
func (n *Node) MembersHealth(ctx context.Context) (MembersReport, error) {
	rep := MembersReport{Observer: n.self}
	var infos []healthInfo
	if n.IsLeader() {
		infos = n.leaderHealth()
		rep.Leader = n.self
	} else {
		rctx, cancel := context.WithTimeout(ctx, n.cfg.TransportTimeout)
		resp, err := n.askHealth(rctx)
		cancel()
		if err != nil {
			rep.Note = fmt.Sprintf("no answer from a leader (%v): this peer's own view", err)
			infos = n.localHealth()
			if id, ok := n.Leader(); ok {
				rep.Leader = id
			}
		} else {
			rep.Leader, _ = peer.Decode(resp.Leader)
			rep.Observer = rep.Leader
			infos = resp.Members
		}
	}
	n.fsm.view(func(l *ledger.Ledger) {
		for _, h := range infos {
			id, err := peer.Decode(h.ID)
			if err != nil {
				continue
			}
			m := MemberHealth{ID: id, Voter: h.Voter, Leader: id == rep.Leader, Reachable: h.Reachable, LastContact: -1}
			if h.AgoMs >= 0 {
				m.LastContact = time.Duration(h.AgoMs) * time.Millisecond
			}
			m.Org, _ = l.OrgOfPeer(h.ID)
			rep.Members = append(rep.Members, m)
		}
	})
	return rep, nil
}

// askHealth asks the leader for its view.
func (n *Node) askHealth(ctx context.Context) (healthResponse, error) {
	leader, err := n.WaitLeader(ctx)
	if err != nil {
		return healthResponse{}, err
	}
	req, _ := json.Marshal(memberRequest{Op: opHealth})
	b, err := n.host.Request(ctx, leader, ProtoMembership, req)
	if err != nil {
		return healthResponse{}, err
	}
	var resp healthResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		return healthResponse{}, fmt.Errorf("bad health response: %w", err)
	}
	return resp, nil
}

// handleHealth answers a member's opHealth; only the leader knows.
func (n *Node) handleHealth(remote peer.ID) ([]byte, error) {
	if ok, err := n.isMember(remote); err != nil {
		return nil, err
	} else if !ok {
		return nil, errorf(CodeNotMember, "peer %s is not a member", remote)
	}
	if !n.IsLeader() {
		leader, _ := n.Leader()
		return nil, errorf(CodeNotLeader, "this peer is not the leader (leader: %s)", leader)
	}
	return json.Marshal(healthResponse{Leader: n.self.String(), Members: n.leaderHealth()})
}

// leaderHealth is the leader's view: reachable as its autopilot judges,
// last contact from the last answered stats request.
func (n *Node) leaderHealth() []healthInfo {
	cfg, ok := n.configuration()
	if !ok {
		return nil
	}
	now := time.Now()
	out := make([]healthInfo, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		h := healthInfo{ID: string(s.ID), Voter: s.Suffrage == raft.Voter, AgoMs: -1}
		id, err := peer.Decode(string(s.ID))
		switch {
		case err != nil:
		case id == n.self:
			h.Reachable, h.AgoMs = true, 0
		default:
			h.Reachable = n.pilot.reachable(id)
			if t, ok := n.pilot.lastAnswer(s.ID); ok {
				h.AgoMs = now.Sub(t).Milliseconds()
			}
		}
		out = append(out, h)
	}
	return out
}

// localHealth is this node's own view without a leader: connected or not.
func (n *Node) localHealth() []healthInfo {
	cfg, ok := n.configuration()
	if !ok {
		return nil
	}
	out := make([]healthInfo, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		h := healthInfo{ID: string(s.ID), Voter: s.Suffrage == raft.Voter, AgoMs: -1}
		if id, err := peer.Decode(string(s.ID)); err == nil {
			h.Reachable = id == n.self || n.host.Network().Connectedness(id) == network.Connected
			if id == n.self {
				h.AgoMs = 0
			}
		}
		out = append(out, h)
	}
	return out
}

// configuration is the latest Raft configuration this node knows.
func (n *Node) configuration() (raft.Configuration, bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Configuration{}, false
	}
	return f.Configuration(), true
}
