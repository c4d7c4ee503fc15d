package consensus

import (
	"context"
	"fmt"
	"testing"

	"github.com/coopgrid/coopgrid/ledger"
)

// TestClusterReplicates: writes through any peer, linearizable reads on
// any other. (The scheduling half of this test, the leader's loop placing
// every task, is package leader's TestClusterSchedules.)
func TestClusterReplicates(t *testing.T) {
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
			// A decisions entry the leader appends is seen by a consistent
			// read on a follower.
			follower := c.peers[0]
			if follower == leader {
				follower = c.peers[1]
			}
			allocate(t, leader, ids)
			var placed int
			err = follower.node.ReadConsistent(context.Background(), func(l *ledger.Ledger) {
				placed = len(l.Tasks(ledger.TaskFilter{States: []ledger.TaskState{ledger.TaskAssigned}}))
			})
			if err != nil || placed != len(ids) {
				t.Fatalf("consistent read on %s: %d of %d tasks placed (%v)", follower.name, placed, len(ids), err)
			}
			c.converge()
		})
	}
}
