package consensus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

func TestClusterReplicatesAndSchedules(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d peers", size), func(t *testing.T) {
			c := newCluster(t, size, 4, nil)
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
			if st := leader.node.SchedulerStats(); st.Accepted != uint64(len(ids)) {
				t.Fatalf("leader accepted %d decisions, want %d (%+v)", st.Accepted, len(ids), st)
			}
		})
	}
}
