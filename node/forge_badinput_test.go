package node

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestForgedCommandsRefused: a member of a real two-peer federation forges
// commands for the other organisation through the consensus layer, both
// from the follower (forwarded to the leader over the propose stream) and
// on the leader itself. Each is refused — by the consensus layer when the
// command claims another peer's identity, by the ledger when it claims
// another organisation — and the state hash does not move. Consensus
// TestProposeRules covers the same rules on bare consensus nodes; this
// checks them with the node's own wiring.
func TestForgedCommandsRefused(t *testing.T) {
	peers := federation(t, "sim", []string{"fg-a", "fg-b"}, map[string]string{
		"fg-a": "machines:\n  - name: m1\n    gflops: 10\n    busy_watts: 100\n",
		"fg-b": "machines:\n  - name: m1\n    gflops: 10\n    busy_watts: 100\n",
	}, nil)
	leader, follower := leaderAndFollower(t, peers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Both organisations registered with signed commands: every peer
	// refuses unsigned ones acting for them (ledger/sign.go).
	leader.n.cons.View(func(l *ledger.Ledger) {
		for _, o := range l.Orgs() {
			if !o.Signing {
				t.Errorf("organisation %q does not sign its commands", o.Name)
			}
		}
	})

	// forge builds a command as `from` would send it, signed by `from`,
	// with the envelope edited to claim victim's organisation and/or peer.
	forge := func(from, victim *tnode, claimOrg, claimPeer bool, body func(*ledger.Command)) []byte {
		c := ledger.Command{V: ledger.CommandVersion, Org: from.org, Peer: from.n.self.String(), AtMs: time.Now().UnixMilli()}
		if claimOrg {
			c.Org = victim.org
		}
		if claimPeer {
			c.Peer = victim.n.self.String()
		}
		body(&c)
		b, err := ledger.EncodeSigned(c, from.n.host.PrivateKey())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// unsigned is forge without the signature: what a peer that cannot
	// sign as victim sends.
	unsigned := func(from, victim *tnode, body func(*ledger.Command)) []byte {
		c := ledger.Command{V: ledger.CommandVersion, Org: victim.org, Peer: victim.n.self.String(), AtMs: time.Now().UnixMilli()}
		body(&c)
		b, err := ledger.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	setLimit := func(c *ledger.Command) { c.SetLimit = &ledger.SetLimit{LimitMilliW: 1} }
	submit := func(c *ledger.Command) {
		c.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"/bin/true"}}}}}
	}
	lost := func(c *ledger.Command) { c.MachineLost = &ledger.MachineLostCmd{Machine: leader.org + "/m1"} }
	tests := []struct {
		name string
		from *tnode
		data []byte
		// Either a consensus code (refused before the log) or a ledger
		// code (the entry is logged and changes nothing).
		consCode   string
		ledgerCode ledger.Code
		// asLeader: appended by the leader without admission, as a
		// leader running modified code would (issue 15).
		asLeader bool
	}{
		{"follower claims the leader's organisation", follower, forge(follower, leader, true, false, setLimit), "", ledger.CodeNotOwner, false},
		{"follower submits as the leader's organisation", follower, forge(follower, leader, true, false, submit), "", ledger.CodeNotOwner, false},
		{"follower claims the leader's peer and organisation", follower, forge(follower, leader, true, true, setLimit), consensus.CodeForbidden, "", false},
		{"follower claims the leader's peer only", follower, forge(follower, leader, false, true, submit), consensus.CodeForbidden, "", false},
		{"follower declares the leader's machine lost", follower, forge(follower, leader, false, false, lost), consensus.CodeForbidden, "", false},
		{"leader claims the follower's organisation", leader, forge(leader, follower, true, false, setLimit), "", ledger.CodeNotOwner, false},
		{"leader claims the follower's peer", leader, forge(leader, follower, true, true, submit), consensus.CodeForbidden, "", false},
		{"leader appends as the follower, signed by itself", leader, forge(leader, follower, true, true, setLimit), "", ledger.CodeBadSignature, true},
		{"leader appends as the follower, unsigned", leader, unsigned(leader, follower, submit), "", ledger.CodeBadSignature, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeIdx := leader.n.cons.Hash()
			propose := tc.from.n.cons.Propose
			if tc.asLeader {
				propose = tc.from.n.cons.AppendAsLeader
			}
			res, err := propose(ctx, tc.data)
			switch {
			case tc.consCode != "":
				if got := p2p.Code(err); got != tc.consCode {
					t.Fatalf("code %q (%v), want %q", got, err, tc.consCode)
				}
				if after, idx := leader.n.cons.Hash(); after != before || idx != beforeIdx {
					t.Fatal("a command refused by the consensus layer changed the leader's state")
				}
			default:
				if err != nil || res.Err == nil || res.Err.Code != tc.ledgerCode {
					t.Fatalf("result %+v, err %v; want ledger code %q", res, err, tc.ledgerCode)
				}
				if after, _ := leader.n.cons.Hash(); after != before {
					t.Fatal("a command refused by the ledger changed the state hash")
				}
			}
		})
	}
	// Both peers agree on the unchanged state once the log has spread.
	waitFor(t, 10*time.Second, "peers converge", func() bool {
		h1, i1 := leader.n.cons.Hash()
		h2, i2 := follower.n.cons.Hash()
		return h1 == h2 && i1 == i2
	})
	var limA, limB int64
	leader.n.cons.View(func(l *ledger.Ledger) {
		a, _ := l.Org(leader.org)
		b, _ := l.Org(follower.org)
		limA, limB = a.LimitMilliW, b.LimitMilliW
	})
	if limA == 1 || limB == 1 {
		t.Fatalf("a forged limit took effect: %d, %d", limA, limB)
	}
	var n int
	leader.n.cons.View(func(l *ledger.Ledger) { n = len(l.Tasks(ledger.TaskFilter{})) })
	if n != 0 {
		t.Fatalf("%d forged tasks queued", n)
	}
}
