package node

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// History reconstructs the recent past from this replica's task segments
// (api.HistoryReader): what the dashboard's charts start with.
func (n *Node) History(ctx context.Context, q api.HistoryQuery) (api.HistoryView, error) {
	if err := n.requireReady(); err != nil {
		return api.HistoryView{}, err
	}
	times := ledger.HistoryTimes(n.now().UnixMilli(), q.WindowS*1000, q.Points)
	var (
		hist []ledger.OrgHistory
		err  error
	)
	n.cons.View(func(l *ledger.Ledger) { hist, err = l.History(times) })
	if err != nil {
		return api.HistoryView{}, apiError(err)
	}
	return apiconv.History(times, hist), nil
}

// peerContact is what this peer knows of member id's reachability: heard
// (a heartbeat signed by it) within the heartbeat timeout, and how long
// ago in milliseconds (-1 when never since this peer started). This peer
// itself is always reachable.
func (n *Node) peerContact(id peer.ID) (reachable bool, lastContactMs int64) {
	if id == n.self {
		return true, 0
	}
	at, ok := n.gossip.PeerLastHeard(id)
	if !ok {
		return false, -1
	}
	ago := time.Since(at)
	return ago <= n.cfg.Heartbeat.Timeout, ago.Milliseconds()
}

var _ api.HistoryReader = (*Node)(nil)
