package consensus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestProposeWithoutQuorum: with two of three voters stopped, a proposal
// through the survivor (a follower, or the leader that then steps down)
// fails with CodeNoQuorum naming the voters it reaches, under a context
// far longer than the leader wait, and applies nothing; a second one is
// refused the same way; once one voter is back, proposals commit again.
// (The leader's first proposal may instead end CodeOutcomeUnknown: it was
// appended before the leader noticed it had lost its quorum.)
func TestProposeWithoutQuorum(t *testing.T) {
	for _, survivorLeads := range []bool{false, true} {
		name := "survivor follows"
		if survivorLeads {
			name = "survivor leads"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3, 1, nil)
			leader := c.waitLeader()
			c.converge()
			var survivor *tpeer
			var stopped []*tpeer
			for _, p := range c.peers {
				if (p == leader) == survivorLeads && survivor == nil {
					survivor = p
				} else {
					stopped = append(stopped, p)
				}
			}
			for _, p := range stopped {
				p.stop()
			}
			_, before := survivor.node.Hash()
			for i := 0; i < 2; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := survivor.node.Propose(ctx, command(survivor, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 500_000_000}}))
				cancel()
				if survivorLeads && i == 0 && p2p.Code(err) == CodeOutcomeUnknown {
					// The leader appended it and stepped down before a
					// quorum took it: its fate is unknown, rightly.
					continue
				}
				if p2p.Code(err) != CodeNoQuorum || !strings.Contains(err.Error(), "reaches 1 of the 3 voters and a leader needs 2") {
					t.Fatalf("proposal %d without a quorum: %v, want %s", i+1, err, CodeNoQuorum)
				}
				if !Retryable(err) {
					t.Fatalf("%v: no quorum passes when the voters are back: want Retryable", err)
				}
			}
			if _, after := survivor.node.Hash(); after != before {
				t.Fatalf("applied index moved from %d to %d without a quorum", before, after)
			}
			stopped[0].start()
			c.waitLeader()
			res := mustPropose(t, survivor, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 400_000_000}})
			if !res.Applied() {
				t.Fatalf("with the quorum back: %v", res.Err)
			}
		})
	}
}
