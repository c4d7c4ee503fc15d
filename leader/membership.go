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
		for _, id := range l.orphanedMachines(r) {
			if ctx.Err() != nil {
				return
			}
			l.declareLost(ctx, r, id, 0)
		}
	}
}

// orphanedMachines lists the up machines of organisations that are removed
// or whose peer is not a member.
func (l *Leader) orphanedMachines(r Replica) []string {
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
		id, err := peer.Decode(o.peer)
		if o.removed || err != nil || !r.IsMember(id) {
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
