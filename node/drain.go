package node

import (
	"context"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// DrainMachine drains or undrains one of this organisation's machines
// (api.MachineDrainer): the ledger's drain_machine, which only the
// machine's organisation may propose.
func (n *Node) DrainMachine(ctx context.Context, req api.DrainRequest) (api.MachineView, error) {
	if err := n.requireReady(); err != nil {
		return api.MachineView{}, err
	}
	if err := api.ValidateDrain(req); err != nil {
		return api.MachineView{}, err
	}
	body := apiconv.DrainCommand(n.org, req)
	if _, err := n.propose(ctx, func(c *ledger.Command) { c.DrainMachine = body }); err != nil {
		return api.MachineView{}, apiError(err)
	}
	var m ledger.Machine
	n.cons.View(func(l *ledger.Ledger) { m, _ = l.Machine(body.Machine) })
	return apiconv.Machine(m), nil
}

var _ api.MachineDrainer = (*Node)(nil)
