package leader

import (
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Admit is consensus' admission hook (consensus.Config.Admit): the rules a
// command must pass, on top of the ledger's own, before it is appended.
// consensus has already checked that the command acts as proposer (this
// peer for its own proposals, the authenticated sender of a forwarded one);
// state is the local ledger under its read lock.
//
//   - Decisions and schedule triggers come only from the leader's
//     scheduling pass, which appends them itself (Replica.AppendAsLeader)
//     without admission: a proposed one is refused, from any peer, this
//     one included.
//   - The ledger lets any registered peer declare a machine lost; only the
//     leader (which watches heartbeats) may do so for another
//     organisation's machine, so a forwarded declaration about another
//     organisation's machine is refused.
//
// Refusals are *p2p.Error with consensus.CodeForbidden.
func (l *Leader) Admit(proposer peer.ID, c ledger.Command, state *ledger.Ledger) error {
	if c.LeaderOnly() {
		return p2p.Errorf(consensus.CodeForbidden, "%s commands are proposed only by the leader's scheduling loop", c.Kind())
	}
	if c.MachineLost != nil && proposer != l.cfg.Self {
		if m, ok := state.Machine(c.MachineLost.Machine); ok && m.Org != "" && m.Org != c.Org {
			return p2p.Errorf(consensus.CodeForbidden, "only the leader may declare another organisation's machine %q lost", c.MachineLost.Machine)
		}
	}
	return nil
}
