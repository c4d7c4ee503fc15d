package consensus

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A peer the leader took out of the configuration while it was down
// (Config.RemoveDeadAfter, or a vote) still holds the old configuration
// when it starts again: it finds no leader, and nobody answers its
// elections (the members' gates refuse a non-member). Once it has known no
// leader for LeaderWaitTimeout it asks a connected member, at most every
// takenOutCheckEvery, which configuration it knows: a member that knows a
// leader and does not list this peer means it was taken out. That is said
// once in the log and in every no_quorum error, with how to come back.

// takenOutCheckEvery paces the question.
const takenOutCheckEvery = 10 * time.Second

// takenOut is this node's finding, read by noQuorumError.
type takenOut struct {
	out       atomic.Bool
	checkedAt time.Time // maintain's goroutine only
}

// checkTakenOut runs on maintain's goroutine.
func (n *Node) checkTakenOut(ctx context.Context) {
	if !n.quorumLost() {
		n.outState.out.Store(false)
		return
	}
	if time.Since(n.outState.checkedAt) < takenOutCheckEvery {
		return
	}
	n.outState.checkedAt = time.Now()
	cfg, ok := n.configuration()
	if !ok || !inConfiguration(cfg, n.self) {
		return
	}
	req, _ := json.Marshal(memberRequest{Op: opMembers})
	for _, s := range cfg.Servers {
		id, err := peer.Decode(string(s.ID))
		if err != nil || id == n.self || n.host.Network().Connectedness(id) != network.Connected {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, n.cfg.TransportTimeout)
		b, err := n.host.Request(rctx, id, ProtoMembership, req)
		cancel()
		var mr memberResponse
		if err != nil || json.Unmarshal(b, &mr) != nil || mr.Leader == "" {
			continue
		}
		listed := slices.ContainsFunc(mr.Members, func(m memberInfo) bool { return m.ID == n.self.String() })
		if !listed && !n.outState.out.Swap(true) {
			n.log.Error("consensus: this peer is no longer a member of the federation: the leader took it out (silent for longer than remove_dead_after, or removed by a vote); to come back, delete its raft directory and start it with --bootstrap and an invitation naming it (peer invite ORG --peer ID on a member)",
				"asked", id, "leader", mr.Leader)
		}
		return
	}
}
