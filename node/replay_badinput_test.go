package node

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestReplayedProposeMessages: in a real two-peer federation the follower
// sends one keyed submit command to the leader several times — proposed
// again through the consensus layer (as a retry after an unknown outcome
// does), and as the very same propose stream message written again — and,
// for contrast, an unkeyed one. A keyed command is queued once: every copy
// answers the original task IDs, marked replayed, and the state hash does
// not move; an unkeyed copy queues again, which is why the node gives every
// submission a request ID. Another member proposing the captured bytes
// acts as itself and is refused (consensus forbidden).
func TestReplayedProposeMessages(t *testing.T) {
	peers := federation(t, "sim", []string{"rp-a", "rp-b"}, map[string]string{
		"rp-a": "machines:\n  - name: m1\n    gflops: 10\n    busy_watts: 100\n",
		"rp-b": "machines:\n  - name: m1\n    gflops: 10\n    busy_watts: 100\n",
	}, nil)
	leader, follower := leaderAndFollower(t, peers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Limits of 0 W keep the tasks queued, so that only the commands below
	// can move the state hash.
	for _, p := range peers {
		if _, err := p.n.propose(ctx, func(c *ledger.Command) { c.SetLimit = &ledger.SetLimit{LimitMilliW: 0} }); err != nil {
			t.Fatal(err)
		}
	}
	command := func(key string) []byte {
		c := ledger.Command{Org: follower.org, Peer: follower.n.self.String(), AtMs: time.Now().UnixMilli(),
			SubmitTasks: &ledger.SubmitTasks{RequestID: key, Tasks: []ledger.TaskSpec{
				{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"/bin/true"}}},
				{SizeMFlop: 2000, Spec: ledger.Spec{Argv: []string{"/bin/true"}}},
			}}}
		b, err := ledger.EncodeSigned(c, follower.n.host.PrivateKey())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	viaConsensus := func(data []byte) (ledger.Result, error) { return follower.n.cons.Propose(ctx, data) }
	// The leader (the other member here) proposing the captured bytes.
	byLeader := func(data []byte) (ledger.Result, error) { return leader.n.cons.Propose(ctx, data) }
	// The raw stream message: the exact bytes a forwarded proposal puts in
	// its request frame, sent again on a new stream.
	viaStream := func(data []byte) (ledger.Result, error) {
		resp, err := follower.n.cons.Host().Request(ctx, leader.n.self, consensus.ProtoPropose, data)
		if err != nil {
			return ledger.Result{}, err
		}
		var r ledger.Result
		if err := json.Unmarshal(resp, &r); err != nil {
			t.Fatalf("propose answer %q: %v", resp, err)
		}
		return r, nil
	}
	keyed, keyed2, unkeyed := command("replay-1"), command("replay-2"), command("")
	var firstIDs []string
	tests := []struct {
		name     string
		send     func([]byte) (ledger.Result, error)
		data     []byte
		consCode string // refused before the log
		replayed bool   // answered with firstIDs, hash unchanged
		newTasks int
	}{
		{"original", viaConsensus, keyed, "", false, 2},
		{"proposed again", viaConsensus, keyed, "", true, 0},
		{"the stream message replayed", viaStream, keyed, "", true, 0},
		{"the stream message replayed again", viaStream, keyed, "", true, 0},
		{"replayed by another member", byLeader, keyed, consensus.CodeForbidden, false, 0},
		{"another request ID", viaStream, keyed2, "", false, 2},
		{"unkeyed", viaConsensus, unkeyed, "", false, 2},
		{"unkeyed, replayed: queued again", viaStream, unkeyed, "", false, 2},
	}
	count := func() int {
		n := 0
		leader.n.cons.View(func(l *ledger.Ledger) { n = len(l.Tasks(ledger.TaskFilter{})) })
		return n
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := leader.n.cons.Hash()
			n0 := count()
			res, err := tc.send(tc.data)
			after, _ := leader.n.cons.Hash()
			if tc.consCode != "" {
				if p2p.Code(err) != tc.consCode || after != before {
					t.Fatalf("err %v (hash moved: %v), want %s and no change", err, after != before, tc.consCode)
				}
				return
			}
			if err != nil || !res.Applied() {
				t.Fatalf("result %+v, err %v", res, err)
			}
			if res.Replayed != tc.replayed || count()-n0 != tc.newTasks {
				t.Fatalf("replayed %v and %d new tasks, want %v and %d", res.Replayed, count()-n0, tc.replayed, tc.newTasks)
			}
			if tc.replayed {
				if !slices.Equal(res.TaskIDs, firstIDs) || after != before {
					t.Fatalf("replay answered %v (hash moved: %v), want the original %v", res.TaskIDs, after != before, firstIDs)
				}
			} else if firstIDs == nil {
				firstIDs = res.TaskIDs
			}
		})
	}
	waitFor(t, 10*time.Second, "peers converge", func() bool {
		h1, i1 := leader.n.cons.Hash()
		h2, i2 := follower.n.cons.Hash()
		return h1 == h2 && i1 == i2
	})
}
