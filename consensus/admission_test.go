package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// memberIDs is the configuration as p sees it.
func memberIDs(t *testing.T, p *tpeer) map[peer.ID]bool {
	t.Helper()
	ms, err := p.node.Members()
	if err != nil {
		t.Fatal(err)
	}
	out := map[peer.ID]bool{}
	for _, m := range ms {
		out[m.ID] = true
	}
	return out
}

// signAs signs inv with p's identity key, as p's peer would.
func signAs(t *testing.T, p *tpeer, inv Invitation) string {
	t.Helper()
	key := p.host.Peerstore().PrivKey(p.node.ID())
	inv, err := SignInvitation(key, inv)
	if err != nil {
		t.Fatal(err)
	}
	return inv.Token()
}

// TestJoinNeedsAGoodInvitation: a host holding the federation secret is
// refused without an invitation and with an expired, reused, forged,
// tampered, other peer's or other organisation's one; every refusal
// leaves the configuration and the log as they were. A good invitation
// admits it, and the log records it as spent.
func TestJoinNeedsAGoodInvitation(t *testing.T) {
	c := newCluster(t, 2, 1, nil)
	leader := c.waitLeader()
	a := c.peers[0]
	outsider, _, _ := crypto.GenerateEd25519Key(nil)
	joiner := c.add()
	joiner.org = "newcomer"
	other := c.add()
	other.org = "newcomer"

	good, err := a.node.Invite(InviteRequest{Org: "newcomer"})
	if err != nil {
		t.Fatal(err)
	}
	tampered := good
	tampered.Org = "someone-else"
	forged, err := SignInvitation(outsider, Invitation{Org: "newcomer", InviterOrg: a.org, ExpiresMs: time.Now().Add(time.Hour).UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	forged.Inviter = a.node.ID().String() // claims a's identity, signed by another key
	expired := signAs(t, a, Invitation{Org: "newcomer", InviterOrg: a.org, ExpiresMs: time.Now().Add(-time.Minute).UnixMilli()})
	forOther, _ := a.node.Invite(InviteRequest{Org: "newcomer", Peer: other.node.ID()})
	existingOrg := signAs(t, a, Invitation{Org: c.peers[1].org, InviterOrg: a.org, ExpiresMs: time.Now().Add(time.Hour).UnixMilli()})
	wrongInviterOrg := signAs(t, a, Invitation{Org: "newcomer", InviterOrg: c.peers[1].org, ExpiresMs: time.Now().Add(time.Hour).UnixMilli()})

	refused := []struct {
		name, token, code string
	}{
		{"none", "", CodeInvitationRequired},
		{"garbage", "not-an-invitation", CodeInvitation},
		{"tampered", tampered.Token(), CodeInvitation},
		{"forged", forged.Token(), CodeInvitation},
		{"expired", expired, CodeInvitation},
		{"for another peer", forOther.Token(), CodeInvitation},
		{"organisation bound to another peer", existingOrg, CodeInvitation},
		{"inviter not acting for the organisation it names", wrongInviterOrg, CodeInvitation},
	}
	_, before := leader.node.Hash()
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := joiner.node.Join(ctx, tc.token, a.addr())
			if p2p.Code(err) != tc.code {
				t.Fatalf("join: %v, want %s", err, tc.code)
			}
			if memberIDs(t, leader)[joiner.node.ID()] {
				t.Fatal("the joiner is in the configuration")
			}
		})
	}
	if _, after := leader.node.Hash(); after != before {
		t.Fatalf("refused joins moved the applied index from %d to %d", before, after)
	}

	// The good one admits, once.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := joiner.node.Join(ctx, good.Token(), a.addr()); err != nil {
		t.Fatalf("join with a good invitation: %v", err)
	}
	// Reused by another peer: refused.
	if _, err := other.node.Join(ctx, good.Token(), a.addr()); p2p.Code(err) != CodeInvitation {
		t.Fatalf("reused invitation: %v, want %s", err, CodeInvitation)
	}
	// A second peer claiming the organisation, with an invitation of its
	// own issued before the first registered: refused (one peer per
	// organisation), and the first peer registers it.
	if _, err := other.node.Join(ctx, forOther.Token(), a.addr()); p2p.Code(err) != CodeInvitation {
		t.Fatalf("second peer for the organisation: %v, want %s", err, CodeInvitation)
	}
	c.register(joiner, 1)
	if memberIDs(t, leader)[other.node.ID()] {
		t.Fatal("the second peer is in the configuration")
	}
	other.stop()
	c.converge()
	for _, p := range c.running() {
		var spent bool
		p.node.View(func(l *ledger.Ledger) {
			for _, r := range l.Admissions() {
				spent = spent || r.Invitation == good.ID && r.Peer == joiner.node.ID().String()
			}
		})
		if !spent {
			t.Fatalf("%s does not record the invitation as spent", p.name)
		}
	}
	// Once registered, an invitation for the organisation is refused at
	// issue unless it names the registered peer.
	if _, err := a.node.Invite(InviteRequest{Org: "newcomer"}); p2p.Code(err) != CodeInvitation {
		t.Fatalf("invite a bound organisation: %v", err)
	}
}

// TestRemovalNeedsAVote: no single member removes another, through any
// door: a direct remove request, a leave naming another peer, or one
// organisation's vote among three. The second vote (two of three) removes
// it: its peer leaves the configuration and its commands are refused.
func TestRemovalNeedsAVote(t *testing.T) {
	c := newCluster(t, 3, 1, nil)
	c.waitLeader()
	a, b, victim := c.peers[0], c.peers[1], c.peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, op := range []string{opRemove, opLeave} {
		req, _ := json.Marshal(memberRequest{Op: op, Peer: victim.node.ID().String()})
		leader := c.waitLeader()
		sender := a
		if sender == leader {
			sender = b
		}
		_, err := sender.host.Request(ctx, leader.node.ID(), ProtoMembership, req)
		if code := p2p.Code(err); code != CodeForbidden {
			t.Fatalf("%s of another member sent to the leader: %v, want %s", op, err, CodeForbidden)
		}
	}
	res, err := a.node.RemovePeer(ctx, victim.node.ID())
	if err != nil || res.Removed {
		t.Fatalf("one vote of three: %+v, %v", res, err)
	}
	if _, err := a.node.RemovePeer(ctx, victim.node.ID()); p2p.Code(err) != CodeForbidden {
		t.Fatalf("voting twice: %v", err)
	}
	time.Sleep(2 * c.peers[0].node.cfg.MaintenanceInterval)
	if !memberIDs(t, c.waitLeader())[victim.node.ID()] {
		t.Fatal("one organisation's vote removed a member")
	}
	submit(t, victim, 1) // still a member, still acting

	res, err = b.node.RemovePeer(ctx, victim.node.ID())
	if err != nil || !res.Removed {
		t.Fatalf("two votes of three: %+v, %v", res, err)
	}
	eventually(t, 10*time.Second, func() error {
		if memberIDs(t, c.waitLeader())[victim.node.ID()] {
			return fmt.Errorf("the removed peer is still in the configuration")
		}
		return nil
	})
	if _, err := victim.node.Propose(ctx, command(victim, ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1}}}})); err == nil {
		t.Fatal("the removed peer still proposes")
	}
}

// TestDeadVotersDemotedKeepQuorum: five voters, two die. The leader's
// autopilot demotes them (two at most: (5−1)/2, and never below three
// voters), so when a third voter pauses the two left still hold a quorum
// of three and the federation commits. Before, the five-voter
// configuration needed three of five and halted.
func TestDeadVotersDemotedKeepQuorum(t *testing.T) {
	c := newCluster(t, 5, 1, func(cfg *Config) { cfg.DeadServerTimeout = 1500 * time.Millisecond })
	leader := c.waitLeader()
	var others []*tpeer
	for _, p := range c.peers {
		if p != leader {
			others = append(others, p)
		}
	}
	voters := func() int {
		ms, err := c.waitLeader().node.Members()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range ms {
			if m.Voter {
				n++
			}
		}
		return n
	}
	if v := voters(); v != 5 {
		t.Fatalf("%d voters, want 5", v)
	}
	others[0].stop()
	others[1].stop()
	eventually(t, 20*time.Second, func() error {
		if v := voters(); v != 3 {
			return fmt.Errorf("%d voters, want 3", v)
		}
		return nil
	})
	// Never below three: the third silent voter stays a voter, and the
	// two left keep committing.
	others[2].stop()
	submit(t, leader, 1)
	time.Sleep(3 * time.Second)
	if v := voters(); v != 3 {
		t.Fatalf("%d voters after a third went silent, want 3 (never below three)", v)
	}
	submit(t, leader, 1)

	// The dead come back as members (no invitation) and are promoted.
	others[0].start()
	others[2].start()
	eventually(t, 20*time.Second, func() error {
		if v := voters(); v < 4 {
			return fmt.Errorf("%d voters, want the returning peers promoted", v)
		}
		return nil
	})
	c.converge()
}
