package apiconv

import (
	"strings"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// DrainCommand is the ledger body of a drain request by organisation org:
// a bare machine name is one of org's machines; an "<org>/<name>" ID is
// taken as given (the ledger refuses another organisation's, not_owner).
func DrainCommand(org string, req api.DrainRequest) *ledger.DrainMachine {
	id := req.Machine
	if !strings.Contains(id, "/") {
		id = org + "/" + id
	}
	return &ledger.DrainMachine{Machine: id, Drained: req.Drained}
}
