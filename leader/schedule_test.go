package leader

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestClusterSchedules: tasks submitted through every peer (followers
// forward) are all placed by the leader's scheduling pass, each on a
// distinct machine, and the leader's counters account for every decision.
// (Moved from consensus' TestClusterReplicatesAndSchedules, whose
// replication half stays there.)
//
// On a federation whose peers compute the passes (scheduling settings in
// its rules), the leader appends schedule triggers and never a decisions
// batch, and its counters count the decisions Apply made.
func TestClusterSchedules(t *testing.T) {
	peersCompute := &ledger.Rules{Executors: ledger.ExecutorsSimulated, Scheduling: ledger.DefaultScheduling()}
	for _, tc := range []struct {
		size  int
		rules *ledger.Rules
		// kind is what the leader appends.
		kind ledger.Kind
	}{
		{3, nil, ledger.KindDecisions},
		{5, nil, ledger.KindDecisions},
		{3, peersCompute, ledger.KindSchedule},
	} {
		t.Run(fmt.Sprintf("%d peers %s", tc.size, tc.kind), func(t *testing.T) {
			size := tc.size
			c := newClusterWithRules(t, size, 4, tc.rules, nil)
			leader := c.waitLeader()
			members, err := leader.node.Members()
			if err != nil {
				t.Fatal(err)
			}
			voters := 0
			for _, m := range members {
				if m.Voter {
					voters++
				}
			}
			if len(members) != size || voters != size {
				t.Fatalf("%d members, %d voters; want %d voters", len(members), voters, size)
			}
			// Every peer submits through its own node: followers forward.
			var ids []string
			for i, p := range c.peers {
				got := submit(t, p, 3)
				ids = append(ids, got...)
				// Linearizable read: once Propose returned on one peer, a
				// consistent read on any other peer sees the tasks, with
				// no waiting on the caller's side.
				reader := c.peers[(i+1)%len(c.peers)]
				err := reader.node.ReadConsistent(context.Background(), func(l *ledger.Ledger) {
					for _, id := range got {
						if _, ok := l.Task(id); !ok {
							t.Errorf("%s: consistent read misses %s submitted on %s", reader.name, id, p.name)
						}
					}
				})
				if err != nil {
					t.Fatalf("consistent read on %s: %v", reader.name, err)
				}
			}
			// The leader's loop places every task (there are more machines
			// than tasks); a consistent read on a follower sees it.
			follower := c.peers[0]
			if follower == leader {
				follower = c.peers[1]
			}
			eventually(t, 20*time.Second, func() error {
				var placed int
				err := follower.node.ReadConsistent(context.Background(), func(l *ledger.Ledger) {
					placed = len(l.Tasks(ledger.TaskFilter{States: []ledger.TaskState{ledger.TaskAssigned}}))
				})
				if err != nil {
					return err
				}
				if placed != len(ids) {
					return fmt.Errorf("%d of %d tasks placed", placed, len(ids))
				}
				return nil
			})
			c.converge()
			// Each task holds a distinct machine.
			seen := map[string]string{}
			for task, m := range placement(follower) {
				if other, dup := seen[m]; dup {
					t.Fatalf("machine %s holds %s and %s", m, other, task)
				}
				seen[m] = task
			}
			if st := leader.lead.SchedulerStats(); st.Accepted != uint64(len(ids)) || st.Proposed != st.Accepted+st.Rejected {
				t.Fatalf("leader accepted %d decisions, want %d (%+v)", st.Accepted, len(ids), st)
			}
			for _, p := range c.running() {
				applied, _ := p.appliedKinds()
				other := ledger.KindSchedule
				if tc.kind == ledger.KindSchedule {
					other = ledger.KindDecisions
				}
				if applied[tc.kind] == 0 || applied[other] != 0 {
					t.Fatalf("%s applied %d %s and %d %s entries", p.name, applied[tc.kind], tc.kind, applied[other], other)
				}
			}
		})
	}
}

// TestLeaderFailoverKeepsScheduling kills the leader in the middle of a
// scheduling pass: the pass has taken its view and is about to commit when
// the leader dies.
func TestLeaderFailoverKeepsScheduling(t *testing.T) {
	// The scheduling loop reads the clock once per pass, after deciding to
	// plan; the hook holds the pass there while the test kills the leader.
	var hook atomic.Pointer[func()]
	c := newCluster(t, 3, 10, func(_ *consensus.Config, cfg *Config) {
		cfg.Now = func() time.Time {
			if h := hook.Swap(nil); h != nil {
				(*h)()
			}
			return time.Now()
		}
	})
	old := c.waitLeader()
	var survivor *tpeer
	for _, p := range c.peers {
		if p != old {
			survivor = p
			break
		}
	}
	// Tasks of one organisation only, fewer than the machines: the policy
	// allocates and never preempts, so every task must end up on exactly
	// one machine, once.
	first := submit(t, survivor, 12)
	eventually(t, 20*time.Second, func() error {
		if n := len(placement(survivor)); n != len(first) {
			return fmt.Errorf("%d of %d placed", n, len(first))
		}
		return nil
	})
	before := placement(survivor)

	inPass := make(chan struct{})
	resume := make(chan struct{})
	h := func() {
		close(inPass)
		<-resume
	}
	hook.Store(&h)
	second := submit(t, survivor, 12)
	<-inPass // the leader's pass is running
	go func() {
		// Let the pass go on once the shutdown is under way.
		time.Sleep(5 * time.Millisecond)
		close(resume)
	}()
	old.stop()
	killed := time.Now()

	leader := c.waitLeader()
	if leader == old {
		t.Fatal("dead peer still leads")
	}
	// Proposals continue through the new leader.
	third := submit(t, survivor, 3)
	t.Logf("first submission committed %s after the leader was killed", time.Since(killed).Round(time.Millisecond))

	all := append(append(append([]string{}, first...), second...), third...)
	eventually(t, 20*time.Second, func() error {
		if n := len(placement(survivor)); n != len(all) {
			return fmt.Errorf("%d of %d placed", n, len(all))
		}
		return nil
	})
	c.converge()
	after := placement(survivor)
	// Nothing committed before the failover was lost or moved.
	for task, m := range before {
		if after[task] != m {
			t.Fatalf("task %s was on %s before the failover, now on %q", task, m, after[task])
		}
	}
	// No decision was applied twice: one machine per task, one task per
	// machine.
	byMachine := map[string]string{}
	for task, m := range after {
		if other, dup := byMachine[m]; dup {
			t.Fatalf("machine %s holds %s and %s", m, other, task)
		}
		byMachine[m] = task
	}
	survivor.node.View(func(l *ledger.Ledger) {
		for _, id := range all {
			task, ok := l.Task(id)
			if !ok {
				t.Fatalf("task %s lost", id)
			}
			if task.State != ledger.TaskAssigned {
				t.Fatalf("task %s is %s", id, task.State)
			}
		}
	})
	if st := leader.lead.SchedulerStats(); st.Accepted == 0 {
		t.Fatalf("the new leader scheduled nothing: %+v", st)
	}
}
