package leader

import (
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestLeadershipLossStopsDuties: when leadership moves, every duty of the
// old leader stops and Establish returns: from then on the old leader's
// duties make no call at all to the replica (so its scheduling pass
// proposes nothing and its lost-machine detection declares nothing,
// although there is work for both), and the new leader's duties take over.
func TestLeadershipLossStopsDuties(t *testing.T) {
	const lostTimeout = 300 * time.Millisecond
	c := newCluster(t, 3, 2, func(_ *consensus.Config, l *Config) { l.LostTimeout = lostTimeout })
	old := c.waitLeader()
	eventually(t, 10*time.Second, func() error {
		for _, p := range c.peers {
			if want := map[bool]int32{true: 1}[p == old]; p.terms.Load() != want {
				return fmt.Errorf("%s runs %d terms of duties, want %d", p.name, p.terms.Load(), want)
			}
		}
		return nil
	})
	follower := c.other(old)

	// While it leads, both duties act: the pass places a task, and a
	// machine silent to the leader is declared lost.
	first := submit(t, follower, 1)
	eventually(t, 10*time.Second, func() error {
		if len(placement(follower)) != len(first) {
			return fmt.Errorf("task not placed")
		}
		return nil
	})
	victim := follower.org + "/m1"
	old.live.setSilent(victim, true)
	eventually(t, 10*time.Second, func() error {
		if st := machineStates(old)[victim]; st != ledger.MachineLost {
			return fmt.Errorf("%s is %s", victim, st)
		}
		return nil
	})
	old.live.setSilent(victim, false)
	mustPropose(t, follower, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: victim}}) // back up
	c.converge()

	// Hand leadership over.
	if err := old.node.Raft().LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	var next *tpeer
	eventually(t, 20*time.Second, func() error {
		next = c.waitLeader()
		if next == old {
			return fmt.Errorf("%s still leads", old.name)
		}
		return nil
	})
	eventually(t, 10*time.Second, func() error {
		if n := old.terms.Load(); n != 0 {
			return fmt.Errorf("the old leader's duties still run (%d)", n)
		}
		return nil
	})
	calls, appends, proposals, stats := old.calls.Load(), old.appends.Load(), old.proposals.Load(), old.lead.SchedulerStats()
	nextStats := next.lead.SchedulerStats()

	// Work for both duties, on the old leader's side: a queued task woken
	// by its own apply hook, and every machine silent to it.
	old.live.setSilent("*", true)
	second := submit(t, old, 2)
	eventually(t, 10*time.Second, func() error {
		if got := len(placement(old)); got != len(first)+len(second) {
			return fmt.Errorf("%d of %d tasks placed", got, len(first)+len(second))
		}
		return nil
	})
	// Several of the old leader's timeouts and ticks.
	time.Sleep(6 * lostTimeout)
	c.converge()

	if got := old.calls.Load(); got != calls {
		t.Errorf("the old leader's duties made %d calls to the replica after losing leadership", got-calls)
	}
	if got := old.appends.Load(); got != appends {
		t.Errorf("the old leader's scheduling pass appended %d entries after losing leadership", got-appends)
	}
	if got := old.proposals.Load(); got != proposals {
		t.Errorf("the old leader's lost detection proposed %d commands after losing leadership", got-proposals)
	}
	if got := old.lead.SchedulerStats(); got != stats {
		t.Errorf("the old leader's counters moved: %+v, then %+v", stats, got)
	}
	for id, st := range machineStates(next) {
		if st != ledger.MachineUp {
			t.Errorf("machine %s is %s: the old leader declared it lost", id, st)
		}
	}
	if got := next.lead.SchedulerStats(); got.Accepted-nextStats.Accepted != uint64(len(second)) {
		t.Errorf("the new leader accepted %d decisions, want %d", got.Accepted-nextStats.Accepted, len(second))
	}
}
