package leader

import (
	"context"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/peer"
)

// expelInterval paces the check that no machine stays up for a peer that
// is not a member; removals also wake it (Applied).
const expelInterval = time.Second

// expelMachines declares lost, while this peer leads, every up machine of
// an organisation that can no longer run work: removed by a vote of the
// organisations (ledger.Membership), or whose peer is not in the Raft
// configuration (it left, or the leader took it out). Their tasks go back
// to the queue at once instead of waiting for the heartbeat timeout; the
// gossip validator already drops such a peer's heartbeats, and the ledger
// refuses its commands, so nothing brings the machines back up.
func (l *Leader) expelMachines(ctx context.Context, r Replica) {
	t := time.NewTicker(expelInterval)
	defer t.Stop()
	ids := peerIDs{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.expel:
		}
		if !l.cfg.Serving() || !r.IsLeader() {
			continue
		}
		for _, id := range l.orphanedMachines(r, ids) {
			if ctx.Err() != nil {
				return
			}
			l.declareLost(ctx, r, id, 0)
		}
	}
}

// peerIDs caches the organisations' peer IDs decoded from the ledger's
// text form: this runs every second for every organisation, and the
// decoding (base58) was 1-2 % of an idle leader's samples at 100 peers.
type peerIDs map[string]peer.ID

// decode returns the peer ID of s (false: s is none).
func (c peerIDs) decode(s string) (peer.ID, bool) {
	if id, ok := c[s]; ok {
		return id, id != ""
	}
	id, err := peer.Decode(s)
	if err != nil {
		id = ""
	}
	if len(c) >= maxCachedPeerIDs {
		clear(c)
	}
	c[s] = id
	return id, id != ""
}

// maxCachedPeerIDs bounds peerIDs (organisations come and go over years).
const maxCachedPeerIDs = 4096

// orphanedMachines lists the up machines of organisations that are removed
// or whose peer is not a member.
func (l *Leader) orphanedMachines(r Replica, ids peerIDs) []string {
	type org struct {
		name, peer string
		removed    bool
	}
	var orgs []org
	var ups []ledger.Machine
	r.View(func(lg *ledger.Ledger) {
		for _, o := range lg.Orgs() {
			orgs = append(orgs, org{o.Name, o.Peer, lg.IsRemoved(o.Name)})
		}
		for _, m := range lg.Machines() {
			if m.State == ledger.MachineUp {
				ups = append(ups, m)
			}
		}
	})
	gone := map[string]bool{}
	for _, o := range orgs {
		id, ok := ids.decode(o.peer)
		if o.removed || !ok || !r.IsMember(id) {
			gone[o.name] = true
		}
	}
	var out []string
	for _, m := range ups {
		if gone[m.Org] {
			out = append(out, m.ID)
		}
	}
	return out
}
