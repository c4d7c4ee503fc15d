package consensus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/internal/testcluster"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
)

// TestPacedWaitsWakeOnNewEntries: the wiring of the paced appends' wake-ups
// (pacing.go) in a running federation of three voters at the lan preset's
// pacing. After an idle pause each follower's replication loop is parked
// in a paced wait of the leader's transport; a new proposal must end those
// waits (the leader's log store announces the entries, newsLogStore; its
// FSM announces the commits, fsm.afterBatch) rather than wait for the
// followers' slots. (The commit's hook is checked on its own at the end.)
// The test moves the followers' slots an hour away
// before the pause, so that a proposal held back by a slot cannot commit
// within the test at all (its wait for the followers is bounded only by
// the test's timeout, not measured), and the pacer's count of waits ended
// by news shows that the parked waits were woken.
func TestPacedWaitsWakeOnNewEntries(t *testing.T) {
	c := newCluster(t, 3, 1, nil)
	leader := c.waitLeader()
	var followers []raft.ServerID
	eventually(t, 20*time.Second, func() error {
		followers = followers[:0]
		for _, s := range leader.node.gate.configuration().Servers {
			if s.Suffrage != raft.Voter {
				return fmt.Errorf("%s is not a voter yet", s.ID)
			}
			if s.ID != raft.ServerID(leader.node.ID().String()) {
				followers = append(followers, s.ID)
			}
		}
		if len(followers) != 2 {
			return fmt.Errorf("%d followers, want 2 voters besides the leader", len(followers))
		}
		return nil
	})
	c.converge()
	p := leader.node.paced

	// The pause: the followers' next slots an hour away, and their loops
	// parked on them (a no-news append took the slot, moving the next one
	// an interval further).
	const far = time.Hour
	p.mu.Lock()
	farAt := time.Now().Add(far)
	for _, id := range followers {
		p.next[id] = farAt
	}
	p.mu.Unlock()
	eventually(t, 20*time.Second, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, id := range followers {
			if !p.next[id].After(farAt) {
				return fmt.Errorf("follower %s's loop has not parked on its far slot yet", id)
			}
		}
		return nil
	})
	if !leader.node.IsLeader() {
		t.Skip("leadership moved during the pause (a loaded machine); the pacer under test is no longer the leader's")
	}
	woken := p.woken.Load()

	// The proposal commits, and every follower applies it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := leader.node.Propose(ctx, command(leader, ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: testcluster.Tasks(1)}}))
	if err != nil {
		t.Fatalf("the proposal after the pause did not commit (held back by the followers' paced slots?): %v", err)
	}
	if !res.Applied() {
		t.Fatalf("proposal refused: %v", res.Err)
	}
	idx := leader.node.AppliedIndex()
	for _, f := range c.peers {
		if f == leader {
			continue
		}
		if err := f.node.WaitApplied(ctx, idx); err != nil {
			t.Fatalf("follower %s did not apply %d (its news held back by its paced slot?): %v", f.name, idx, err)
		}
	}
	if n := p.woken.Load() - woken; n < uint64(len(followers)) {
		t.Fatalf("%d paced waits ended by news, want at least one per parked follower (%d)", n, len(followers))
	}
	c.converge()

	// The commit's announcement: on the leader a commit always follows a
	// store, which already woke everyone, so the FSM's hook is checked on
	// its own: a no-news append parked on a far slot is woken by the
	// leader's FSM's after-batch hook.
	p.mu.Lock()
	p.next[followers[0]] = time.Now().Add(far)
	p.mu.Unlock()
	wait, news := p.slot(followers[0], &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: idx}, time.Now())
	if wait <= 0 || news == nil {
		t.Fatalf("the probe append did not wait (%v)", wait)
	}
	leader.node.fsm.afterBatch()
	select {
	case <-news:
	default:
		t.Fatal("the leader's FSM's after-batch hook did not wake its paced waits")
	}
}
