package node

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// The watch API (GET /v1/events) is served from this peer's own applied
// log: every applied entry's task transitions go to a bounded ring
// (api.EventLog), from the state machine's goroutine, without waiting for
// any reader. A restored snapshot empties the ring: the transitions up to
// its index were never applied here one by one.

var _ api.TaskEventSource = (*Node)(nil)

// TaskEvents is this peer's log of recent task transitions.
func (n *Node) TaskEvents() *api.EventLog { return n.events }

// recordApplied is the consensus OnApply hook's share for the watch API.
func (n *Node) recordApplied(res *ledger.Result) {
	n.events.Append(res.Index, apiconv.TaskEvents(res))
}
