package leader

import (
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// TestLeaderPassFollowsTheJobPolicy: on a federation whose leader
// proposes decisions batches (no scheduling settings), one machine and two
// tasks submitted together, the larger first: EHOSEP (the default) places
// the smaller (its queue order is by size); once the federation votes
// fcfs, the leader's pass places the first submitted (submission order).
func TestLeaderPassFollowsTheJobPolicy(t *testing.T) {
	for _, job := range []string{ledger.DefaultJobPolicy, "fcfs"} {
		t.Run(job, func(t *testing.T) {
			c := newCluster(t, 1, 1, nil)
			p := c.waitLeader()
			if job != ledger.DefaultJobPolicy {
				if r := mustPropose(t, p, ledger.Command{JobPolicy: &ledger.JobPolicyVote{Policy: job}}); !r.Applied() {
					t.Fatalf("vote for %s: %v", job, r.Err)
				}
			}
			res := mustPropose(t, p, ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 90_000}, {SizeMFlop: 30_000}}}})
			if !res.Applied() || len(res.TaskIDs) != 2 {
				t.Fatalf("submit: %v", res.Err)
			}
			want := res.TaskIDs[1] // EHOSEP: the smaller
			if job == "fcfs" {
				want = res.TaskIDs[0]
			}
			eventually(t, 20*time.Second, func() error {
				pl := placement(p)
				if len(pl) != 1 {
					return fmt.Errorf("placed %v", pl)
				}
				if _, ok := pl[want]; !ok {
					t.Fatalf("under %s the leader placed %v, want %s", job, pl, want)
				}
				return nil
			})
			var kinds map[ledger.Kind]int
			kinds, _ = p.appliedKinds()
			if kinds[ledger.KindDecisions] == 0 || kinds[ledger.KindSchedule] != 0 {
				t.Fatalf("applied %v: want the leader's decisions batches", kinds)
			}
		})
	}
}
