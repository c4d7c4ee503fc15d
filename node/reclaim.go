package node

import (
	"context"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// ReclaimMachine reclaims or releases one of this organisation's
// opportunistic machines (api.MachineReclaimer): the ledger's
// reclaim_machine, which only the machine's organisation may propose
// (another's is refused not_owner, api forbidden). The tasks a reclaim
// evicts are stopped by this peer's runner as preempted ones are, from
// the committed entry.
func (n *Node) ReclaimMachine(ctx context.Context, req api.ReclaimRequest) (api.MachineView, error) {
	if err := n.requireReady(); err != nil {
		return api.MachineView{}, err
	}
	if err := api.ValidateReclaim(req); err != nil {
		return api.MachineView{}, err
	}
	body := apiconv.ReclaimCommand(n.org, req)
	if _, err := n.propose(ctx, func(c *ledger.Command) { c.ReclaimMachine = body }); err != nil {
		return api.MachineView{}, apiError(err)
	}
	var v api.MachineView
	now := n.now().UnixMilli()
	n.cons.View(func(l *ledger.Ledger) {
		m, _ := l.Machine(body.Machine)
		v = apiconv.MachineAt(l, m, now)
	})
	return v, nil
}

var _ api.MachineReclaimer = (*Node)(nil)
