package consensus

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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

// TestStandDelay: of the voters left when the leader goes, quorum-1 stand
// at once, only to forget the leader, and the next ones a step apart, in
// an order each computes alike (by ID); the dead leader and non-voters
// take no rank.
func TestStandDelay(t *testing.T) {
	const step = 200 * time.Millisecond
	five := configOf(5, 3) // voters v0..v4, non-voters n0..n2
	three := configOf(3, 0)
	for _, tc := range []struct {
		name          string
		cfg           raft.Configuration
		self          raft.ServerID
		lost          raft.ServerID
		wantDelay     time.Duration
		wantForgetter bool
	}{
		{"5 voters, first of 4", five, "v0", "v2", 0, true},
		{"5 voters, second of 4", five, "v1", "v2", 0, true},
		{"5 voters, third of 4: the one elected", five, "v3", "v2", step, false},
		{"5 voters, fourth of 4", five, "v4", "v2", 2 * step, false},
		{"5 voters, the leader was the first", five, "v1", "v0", 0, true},
		{"5 voters, the leader was the first, third of 4", five, "v3", "v0", step, false},
		{"3 voters, first of 2", three, "v0", "v1", 0, true},
		{"3 voters, second of 2: the one elected", three, "v2", "v1", step, false},
		{"a non-voter", five, "n0", "v2", 0, false},
	} {
		got, forgetter := standDelay(tc.cfg, tc.self, tc.lost, step)
		if got != tc.wantDelay || forgetter != tc.wantForgetter {
			t.Errorf("%s: %v, forgetter %t; want %v, %t", tc.name, got, forgetter, tc.wantDelay, tc.wantForgetter)
		}
	}
}

// TestLossTimeouts: a voter whose leader disconnected holds (longer
// timeouts than the preset's, so Raft's own timer does not make it stand
// before its turn), then stands with the lease as its heartbeat timeout;
// a forgetter retries no sooner than forgetterElection heartbeat
// timeouts; and once the hastening or the hold is over, nothing applies.
func TestLossTimeouts(t *testing.T) {
	cfg := DefaultConfig("")
	now := time.Now()
	later := now.Add(time.Second)
	for _, tc := range []struct {
		name           string
		until, held    time.Time
		forgetter      bool
		wantHB, wantEl time.Duration
		wantOK         bool
	}{
		{"nothing lost", time.Time{}, time.Time{}, false, 0, 0, false},
		{"held", time.Time{}, later, false, hastenFactor * cfg.HeartbeatTimeout, hastenFactor * cfg.HeartbeatTimeout, true},
		{"hastened", later, time.Time{}, false, cfg.LeaderLeaseTimeout, cfg.LeaderLeaseTimeout, true},
		{"hastened forgetter", later, time.Time{}, true, cfg.LeaderLeaseTimeout, forgetterElection * cfg.HeartbeatTimeout, true},
		{"hastening over", now.Add(-time.Millisecond), time.Time{}, false, 0, 0, false},
		{"hold over", time.Time{}, now, false, 0, 0, false},
	} {
		n := &Node{cfg: cfg, loss: newLeaderLoss()}
		n.loss.until, n.loss.held, n.loss.forgetter = tc.until, tc.held, tc.forgetter
		hb, el, ok := n.lossTimeouts(now)
		if hb != tc.wantHB || el != tc.wantEl || ok != tc.wantOK {
			t.Errorf("%s: %v, %v, %t; want %v, %v, %t", tc.name, hb, el, ok, tc.wantHB, tc.wantEl, tc.wantOK)
		}
		if ok && (hb < cfg.LeaderLeaseTimeout || el < hb) {
			t.Errorf("%s: %v, %v: Raft refuses a heartbeat timeout under the lease or an election timeout under it", tc.name, hb, el)
		}
	}
}
