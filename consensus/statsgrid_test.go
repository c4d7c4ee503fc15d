package consensus

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestAutopilotReadsTheGridsStats: the leader's autopilot reads the stats
// that the last round on the maintenance grid fetched (refreshStats) and
// sends no request of its own, which would wake every member at the
// instant autopilot's ticker chose; each round on the grid asks every
// voter once. Three real voters; a maintenance interval of a minute keeps
// the grid's and autopilot's own rounds out of the test's way, and the test
// runs the grid's round itself.
func TestAutopilotReadsTheGridsStats(t *testing.T) {
	c := newCluster(t, 3, 0, func(cfg *Config) { cfg.MaintenanceInterval = time.Minute })
	leader := c.waitLeader()
	var asked atomic.Int64
	for _, p := range c.peers {
		if p == leader {
			continue
		}
		n := p.node
		n.host.Handle(ProtoStats, func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
			asked.Add(1)
			return n.handleStats(ctx, remote, req)
		})
	}
	pl := leader.node.pilot
	round := func() {
		t.Helper()
		pl.refreshStats()
		eventually(t, 10*time.Second, func() error {
			pl.mu.Lock()
			defer pl.mu.Unlock()
			if !pl.fed || pl.refreshing.Load() {
				return errorf(CodeTimeout, "the grid's round has not ended")
			}
			return nil
		})
	}
	round()
	if got := asked.Load(); got != 2 {
		t.Fatalf("the grid's round asked the two followers %d times, want 2", got)
	}
	servers := pl.KnownServers()
	stats := pl.FetchServerStats(context.Background(), servers)
	if got := asked.Load(); got != 2 {
		t.Fatalf("autopilot's own round sent %d requests, want none", got-2)
	}
	for sid := range servers {
		if stats[sid] == nil {
			t.Fatalf("no stats for %s: %v", sid, stats)
		}
	}
	round()
	if got := asked.Load(); got != 4 {
		t.Fatalf("after a second round on the grid: %d requests, want 4", got)
	}
}

// TestStatsRoundOfAnEarlierLeadershipFeedsNoLater: a grid round still
// waiting for answers when its leadership ends (here: a new one begins)
// does not mark the new leadership's stats as fetched, so autopilot's
// first round in it asks for itself. The followers' answers are held until
// the new leadership has begun.
func TestStatsRoundOfAnEarlierLeadershipFeedsNoLater(t *testing.T) {
	c := newCluster(t, 3, 0, func(cfg *Config) { cfg.MaintenanceInterval = time.Minute })
	leader := c.waitLeader()
	hold := make(chan struct{})
	for _, p := range c.peers {
		if p == leader {
			continue
		}
		n := p.node
		n.host.Handle(ProtoStats, func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
			<-hold
			return n.handleStats(ctx, remote, req)
		})
	}
	pl := leader.node.pilot
	pl.refreshStats()
	pl.mu.Lock()
	pl.leads++ // what run does when this peer leads again
	pl.fed = false
	pl.mu.Unlock()
	close(hold)
	eventually(t, 10*time.Second, func() error {
		if pl.refreshing.Load() {
			return errorf(CodeTimeout, "the round has not ended")
		}
		return nil
	})
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.fed {
		t.Fatal("a round of the earlier leadership fed the new one")
	}
}
