package consensus

import (
	"fmt"
	"testing"
	"time"
)

// TestVotersHastenWhenTheLeaderDisconnects: four real peers, three voters.
// When the leader stops (its connections close), each surviving voter
// shortens its heartbeat timeout to the lease, a new leader is elected,
// and the timeouts come back to the preset's; the non-voter never
// shortens its own (it does not stand for election).
func TestVotersHastenWhenTheLeaderDisconnects(t *testing.T) {
	const hb, lease = 2 * time.Second, 1500 * time.Millisecond
	c := newCluster(t, 4, 1, func(cfg *Config) {
		cfg.MaxVoters = 3
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = hb, hb, lease
	})
	leader := c.waitLeader()
	voter := map[string]bool{}
	eventually(t, 20*time.Second, func() error {
		members, err := leader.node.Members()
		if err != nil {
			return err
		}
		clear(voter)
		voters := 0
		for _, m := range members {
			voter[m.ID.String()] = m.Voter
			if m.Voter {
				voters++
			}
		}
		if len(members) != 4 || voters != 3 {
			return fmt.Errorf("%d members, %d voters", len(members), voters)
		}
		return nil
	})
	var survivors []*tpeer
	for _, p := range c.peers {
		if p != leader {
			survivors = append(survivors, p)
		}
	}
	leader.stop()
	least := map[*tpeer]time.Duration{}
	eventually(t, 30*time.Second, func() error {
		for _, p := range survivors {
			got := p.node.Raft().ReloadableConfig().HeartbeatTimeout
			if d, ok := least[p]; !ok || got < d {
				least[p] = got
			}
		}
		for _, p := range survivors {
			if voter[p.node.ID().String()] && least[p] != lease {
				return fmt.Errorf("voter %s: heartbeat timeout never shortened (least %v)", p.name, least[p])
			}
		}
		if l := c.waitLeader(); l == leader {
			return fmt.Errorf("the stopped peer still leads")
		}
		return nil
	})
	for _, p := range survivors {
		if !voter[p.node.ID().String()] && least[p] <= hb {
			t.Errorf("non-voter %s: heartbeat timeout %v, want its own (longer than %v)", p.name, least[p], hb)
		}
	}
	eventually(t, 30*time.Second, func() error {
		for _, p := range survivors {
			if got := p.node.Raft().ReloadableConfig().HeartbeatTimeout; voter[p.node.ID().String()] && got != hb {
				return fmt.Errorf("voter %s: heartbeat timeout %v, want the preset's %v back", p.name, got, hb)
			}
		}
		return nil
	})
}
