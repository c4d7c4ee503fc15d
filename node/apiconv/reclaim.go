package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// ReclaimCommand is the ledger body of a reclaim or release request by
// organisation org, the machine named as DrainCommand names it (another
// organisation's machine is refused by the ledger, not_owner).
func ReclaimCommand(org string, req api.ReclaimRequest) *ledger.ReclaimMachine {
	d := DrainCommand(org, api.DrainRequest{Machine: req.Machine})
	return &ledger.ReclaimMachine{Machine: d.Machine, Reclaimed: req.Reclaimed}
}
