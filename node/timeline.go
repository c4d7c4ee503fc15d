package node

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// Timeline reconstructs the recent past from this replica's task segments
// (api.TimelineReader): what the dashboard's charts start with.
func (n *Node) Timeline(ctx context.Context, q api.TimelineQuery) (api.TimelineView, error) {
	if err := n.requireReady(); err != nil {
		return api.TimelineView{}, err
	}
	end := q.EndMs
	if end == 0 {
		end = n.now().UnixMilli()
	}
	times := ledger.TimelineTimes(end, q.WindowS*1000, q.Points)
	var (
		hist []ledger.OrgTimeline
		err  error
	)
	n.cons.View(func(l *ledger.Ledger) { hist, err = l.Timeline(times) })
	if err != nil {
		return api.TimelineView{}, apiError(err)
	}
	return apiconv.Timeline(times, hist), nil
}

// peerContact is what this peer knows of member id's reachability: heard
// (a heartbeat signed by it) recently enough (gossip.PeerReachable: within
// the heartbeat timeout on the leader, which receives every heartbeat;
// within three topic announcements elsewhere), and how long ago in
// milliseconds (-1 when never since this peer started). This peer itself
// is always reachable.
func (n *Node) peerContact(id peer.ID) (reachable bool, lastContactMs int64) {
	if id == n.self {
		return true, 0
	}
	at, ok := n.gossip.PeerLastHeard(id)
	if !ok {
		return false, -1
	}
	now := time.Now()
	return n.gossip.PeerReachable(id, now, n.cfg.Heartbeat.Timeout), now.Sub(at).Milliseconds()
}

var _ api.TimelineReader = (*Node)(nil)
