package consensus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestRestartRecoversFromSnapshotAndLog restarts peers from their data
// directories: a follower of a running cluster, and a whole one-peer
// federation.
func TestRestartRecoversFromSnapshotAndLog(t *testing.T) {
	t.Run("follower", func(t *testing.T) {
		c := newCluster(t, 3, 4, nil)
		leader := c.waitLeader()
		var f *tpeer
		for _, p := range c.peers {
			if p != leader {
				f = p
				break
			}
		}
		submit(t, leader, 2)
		c.converge()
		if err := f.node.Snapshot(); err != nil {
			t.Fatal(err)
		}
		submit(t, leader, 2) // in the log after the snapshot
		c.converge()
		snapIndex := f.node.AppliedIndex()
		id := f.node.ID()

		f.stop()
		submit(t, leader, 2) // missed while down
		f.start()            // a new port: the others learn it when it dials them
		if f.node.ID() != id {
			t.Fatalf("peer ID changed across restart")
		}
		// The local snapshot is restored before anything arrives.
		if at := f.node.AppliedIndex(); at == 0 {
			t.Fatalf("restarted follower starts empty (snapshot was at %d)", snapIndex)
		}
		hash := c.converge()
		if lh, _ := leader.node.Hash(); lh != hash {
			t.Fatalf("leader hash %s, cluster %s", lh, hash)
		}
		// And it takes part again: a proposal through it commits.
		submit(t, f, 1)
		c.converge()
	})
	t.Run("whole federation", func(t *testing.T) {
		c := newCluster(t, 1, 2, nil)
		p := c.peers[0]
		submit(t, p, 3)
		if err := p.node.Snapshot(); err != nil {
			t.Fatal(err)
		}
		submit(t, p, 4)
		want, wantIdx := p.node.Hash()
		p.restart()
		c.waitLeader()
		// The log after the snapshot is replayed once the restarted
		// leader commits in its new term.
		eventually(t, 10*time.Second, func() error {
			if h, at := p.node.Hash(); h != want || at != wantIdx {
				return fmt.Errorf("at %d %.12s, want %d %.12s", at, h, wantIdx, want)
			}
			return nil
		})
		var queued int
		p.node.View(func(l *ledger.Ledger) {
			queued = len(l.Tasks(ledger.TaskFilter{States: []ledger.TaskState{ledger.TaskQueued}}))
		})
		if queued != 7 {
			t.Fatalf("%d tasks queued after restart, want 7", queued)
		}
	})
}

// TestLaggingPeerCatchesUpBySnapshot compacts the log while a peer is away
// so that it can only catch up through a snapshot installed by the leader;
// a peer joining after compaction gets one too.
func TestLaggingPeerCatchesUpBySnapshot(t *testing.T) {
	small := func(cfg *Config) {
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 4
	}
	c := newCluster(t, 3, 2, small)
	leader := c.waitLeader()
	var lag *tpeer
	for _, p := range c.peers {
		if p != leader {
			lag = p
			break
		}
	}
	c.converge()
	lag.stop()
	for i := 0; i < 40; i++ {
		mustPropose(t, leader, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: leader.org + "/m0"}})
	}
	submit(t, leader, 5)
	if err := leader.node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	leaderIdx := leader.node.AppliedIndex()

	lag.start()
	sub := lag.node.Subscribe("")
	events := collect(sub)
	c.converge()
	// The Restored event proves the catch-up came through a snapshot.
	eventually(t, 10*time.Second, func() error {
		for _, ev := range events.list() {
			if ev.Restored && ev.Index >= leaderIdx-4 {
				return nil
			}
		}
		return fmt.Errorf("no snapshot installed on the lagging peer (events %v)", events.list())
	})
	sub.Close()

	// A newcomer after compaction: the log no longer starts at 1.
	p := c.add()
	newSub := p.node.Subscribe("")
	newEvents := collect(newSub)
	c.join(p, leader)
	c.converge()
	restored := false
	for _, ev := range newEvents.list() {
		restored = restored || ev.Restored
	}
	if !restored {
		t.Fatal("the newcomer caught up without a snapshot, but the log was compacted")
	}
}

func TestJoinThroughFollower(t *testing.T) {
	c := newCluster(t, 3, 1, nil)
	leader := c.waitLeader()
	var via *tpeer
	for _, p := range c.peers {
		if p != leader {
			via = p
			break
		}
	}
	p := c.add()
	res := c.join(p, via)
	if res.Via != via.node.ID() || res.Leader != leader.node.ID() || !res.Voter {
		t.Fatalf("join result %+v; want via %s, leader %s, voter", res, via.node.ID(), leader.node.ID())
	}
	if len(res.Members) != 4 {
		t.Fatalf("%d members after the join, want 4", len(res.Members))
	}
	c.register(p, 2)
	submit(t, p, 2)
	c.converge()
	// Joining again (after a restart, say) is harmless.
	again := c.join(p, via)
	if !again.Voter || len(again.Members) != 4 {
		t.Fatalf("second join changed the membership: %+v", again)
	}
}

func TestNonVotersAndPromotion(t *testing.T) {
	c := newCluster(t, 5, 1, nil)
	leader := c.waitLeader()
	for i := 0; i < 2; i++ {
		p := c.add()
		if res := c.join(p, c.peers[i+1]); res.Voter {
			t.Fatalf("peer %d joined as a voter with 5 voters present", len(c.peers))
		}
		c.register(p, 1) // a non-voter writes through the leader too
	}
	countVoters := func(p *tpeer) (voters, nonvoters int) {
		ms, err := p.node.Members()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Voter {
				voters++
			} else {
				nonvoters++
			}
		}
		return voters, nonvoters
	}
	if v, nv := countVoters(leader); v != 5 || nv != 2 {
		t.Fatalf("%d voters, %d non-voters; want 5 and 2", v, nv)
	}
	// Non-voters replicate.
	submit(t, c.peers[5], 1)
	c.converge()

	// Removing a voter (a dead one), by a vote of more than half of the
	// seven organisations, promotes a non-voter. The votes go through a
	// non-voter too.
	var victim *tpeer
	for _, p := range c.peers[:5] {
		if p != leader {
			victim = p
			break
		}
	}
	victim.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var voters []*tpeer
	for _, p := range c.peers[1:] {
		if p != victim && len(voters) < 4 {
			voters = append(voters, p)
		}
	}
	for i, p := range voters {
		res, err := p.node.RemovePeer(ctx, victim.node.ID())
		if err != nil {
			t.Fatalf("vote %d by %s: %v", i+1, p.name, err)
		}
		if res.Removed != (i == 3) {
			t.Fatalf("after vote %d: removed %v (%s)", i+1, res.Removed, res.Note)
		}
	}
	eventually(t, 10*time.Second, func() error {
		if v, nv := countVoters(c.waitLeader()); v != 5 || nv != 1 {
			return fmt.Errorf("%d voters, %d non-voters; want 5 and 1", v, nv)
		}
		return nil
	})

	// The leader leaves gracefully: it hands leadership over first, and
	// the last non-voter is promoted.
	leader = c.waitLeader()
	if err := leader.node.Leave(ctx); err != nil {
		t.Fatalf("leader leaves: %v", err)
	}
	leader.stop()
	next := c.waitLeader()
	if next == leader {
		t.Fatal("the leaver still leads")
	}
	eventually(t, 10*time.Second, func() error {
		if v, nv := countVoters(c.waitLeader()); v != 5 || nv != 0 {
			return fmt.Errorf("%d voters, %d non-voters; want 5 and 0", v, nv)
		}
		return nil
	})
	submit(t, next, 1)
	c.converge()

	// Removing the unknown or oneself is refused.
	if _, err := next.node.RemovePeer(ctx, victim.node.ID()); p2p.Code(err) != CodeNotMember {
		t.Fatalf("removing a removed peer: %v, want %s", err, CodeNotMember)
	}
	if _, err := next.node.RemovePeer(ctx, next.node.ID()); err == nil {
		t.Fatal("RemovePeer of oneself must point to Leave")
	}
}

func TestLastMemberCannotLeave(t *testing.T) {
	c := newCluster(t, 1, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.peers[0].node.Leave(ctx); p2p.Code(err) != CodeLastMember {
		t.Fatalf("leave of the only member: %v, want %s", err, CodeLastMember)
	}
	// Still serving.
	submit(t, c.peers[0], 1)
}
