package consensus

import (
	"fmt"
	"testing"
	"time"
)

// TestVotersHastenWhenTheLeaderDisconnects: four real peers, three voters.
// When the leader stops (its connections close), each surviving voter
// shortens its timeouts, a new leader is elected, and the timeouts come
// back to the preset's; the non-voter never shortens its own (it does not
// stand for election).
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
	hastened := func(p *tpeer) int {
		p.node.loss.mu.Lock()
		defer p.node.loss.mu.Unlock()
		return p.node.loss.times
	}
	eventually(t, 30*time.Second, func() error {
		for _, p := range survivors {
			if voter[p.node.ID().String()] && hastened(p) == 0 {
				return fmt.Errorf("voter %s did not shorten its timeouts", p.name)
			}
		}
		if l := c.waitLeader(); l == leader {
			return fmt.Errorf("the stopped peer still leads")
		}
		return nil
	})
	for _, p := range survivors {
		if !voter[p.node.ID().String()] && hastened(p) != 0 {
			t.Errorf("non-voter %s shortened its timeouts", p.name)
		}
	}
	// Once a leader is known again, the preset's timeouts are back.
	eventually(t, 30*time.Second, func() error {
		for _, p := range survivors {
			if got := p.node.Raft().ReloadableConfig().HeartbeatTimeout; voter[p.node.ID().String()] && got != hb {
				return fmt.Errorf("voter %s: heartbeat timeout %v, want the preset's %v back", p.name, got, hb)
			}
		}
		return nil
	})
}
