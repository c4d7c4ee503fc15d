package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestGossipValidatorVerdicts runs the heartbeat topic validator on
// messages as gossipsub hands them over, and checks the verdict
// each gets: a non-member's message (signed by a key no organisation
// registered) claiming a member organisation is rejected, which makes
// gossipsub drop it and penalise the peer that forwarded it; one naming an
// organisation this peer does not know is ignored (dropped, not
// forwarded); a replay is ignored; malformed messages are rejected. Only
// an accepted message carries the decoded heartbeat on to the consumer.
// TestHeartbeatValidation checks the decoder's reasons one by one.
func TestGossipValidatorVerdicts(t *testing.T) {
	self := newPeerID(t)
	g := New(Config{Org: "gs", Boot: time.Now().UnixMilli(), Logger: testLogger()})
	defer g.Close()
	g.state = newLedgerView(t, map[string]peer.ID{"gs": self})
	enc := func(hb Heartbeat) []byte { return encode(t, hb) }
	now := time.Now().UnixMilli()
	// Far ahead of the peer's own sequence, so that its own heartbeats
	// (on a joined peer) would not make the first message a replay.
	hb := func(org string, seq uint64) Heartbeat {
		return Heartbeat{V: 1, Org: org, AtMs: now, Boot: g.cfg.Boot, Seq: 1<<40 + seq, Machines: []MachineTelemetry{{Name: "m1", PowerMilliW: 5}}}
	}
	tests := []struct {
		name   string
		author peer.ID
		data   []byte
		want   pubsub.ValidationResult
	}{
		{"member, fresh", self, enc(hb("gs", 1)), pubsub.ValidationAccept},
		{"member, replayed", self, enc(hb("gs", 1)), pubsub.ValidationIgnore},
		{"member, older sequence", self, enc(hb("gs", 0)), pubsub.ValidationIgnore},
		{"member, next sequence", self, enc(hb("gs", 2)), pubsub.ValidationAccept},
		{"non-member claiming a member organisation", stranger, enc(hb("gs", 3)), pubsub.ValidationReject},
		{"non-member naming an unknown organisation", stranger, enc(hb("outsiders", 1)), pubsub.ValidationIgnore},
		{"non-member, malformed", stranger, []byte(`{"v":1,"org":"gs"`), pubsub.ValidationReject},
		{"member, malformed", self, []byte(`not json`), pubsub.ValidationReject},
		{"member, oversized", self, make([]byte, MaxHeartbeatBytes+1), pubsub.ValidationReject},
		{"no author", "", enc(hb("gs", 4)), pubsub.ValidationReject},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := &pubsub.Message{Message: &pb.Message{From: []byte(tc.author), Data: tc.data}}
			got := g.validate(context.Background(), stranger, msg)
			if got != tc.want {
				t.Fatalf("verdict %v, want %v", got, tc.want)
			}
			if _, carried := msg.ValidatorData.(*Heartbeat); carried != (got == pubsub.ValidationAccept) {
				t.Fatalf("verdict %v, heartbeat carried on: %v", got, carried)
			}
		})
	}
}

// TestOwnHeartbeatNeedsNoLedger: this peer's own heartbeat is checked
// before it is sent, and must pass while its replica does not know its
// organisation yet (restarted, not caught up: the replica holds its last
// snapshot): ignoring it kept a restarted peer's new addresses from the
// leader that had to reach it (node.TestRestartedPeerFindsAMovedLeader).
// Another peer's heartbeat for an organisation the view lacks is still
// ignored, and a malformed own heartbeat is still rejected.
func TestOwnHeartbeatNeedsNoLedger(t *testing.T) {
	self, other := newPeerID(t), newPeerID(t)
	g := New(Config{Org: "gs", Boot: time.Now().UnixMilli(), Logger: testLogger(), IsMember: func(peer.ID) bool { return false }})
	defer g.Close()
	g.state = newLedgerView(t, map[string]peer.ID{})
	g.self = self
	hb := Heartbeat{V: 1, Org: "gs", AtMs: time.Now().UnixMilli(), Boot: g.cfg.Boot, Seq: 1, Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}}
	for _, tc := range []struct {
		name   string
		author peer.ID
		data   []byte
		want   pubsub.ValidationResult
	}{
		{"own, organisation not in the view", self, encode(t, hb), pubsub.ValidationAccept},
		{"another's, organisation not in the view", other, encode(t, Heartbeat{V: 1, Org: "go", AtMs: hb.AtMs, Boot: hb.Boot, Seq: 1}), pubsub.ValidationIgnore},
		{"own, malformed", self, []byte(`{"v":1`), pubsub.ValidationReject},
	} {
		msg := &pubsub.Message{Message: &pb.Message{From: []byte(tc.author), Data: tc.data}}
		if got := g.validate(context.Background(), self, msg); got != tc.want {
			t.Errorf("%s: verdict %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRemovedPeerHeartbeatsDropped: once the organisations voted a member
// out, or once its peer left the Raft configuration, its heartbeats are
// dropped (ignored: a peer whose view lags is not penalised for forwarding
// them), so they keep none of its machines up. Before, they were accepted.
func TestRemovedPeerHeartbeatsDropped(t *testing.T) {
	a, b, c := newPeerID(t), newPeerID(t), newPeerID(t)
	view := newLedgerView(t, map[string]peer.ID{"ga": a, "gb": b, "gc": c})
	members := map[peer.ID]bool{a: true, b: true, c: true}
	g := New(Config{Org: "ga", Boot: time.Now().UnixMilli(), Logger: testLogger(), IsMember: func(id peer.ID) bool { return members[id] }})
	defer g.Close()
	g.state = view
	seq := uint64(1 << 40)
	verdict := func(author peer.ID, org string) pubsub.ValidationResult {
		seq++
		data := encode(t, Heartbeat{V: 1, Org: org, AtMs: time.Now().UnixMilli(), Boot: g.cfg.Boot, Seq: seq, Machines: []MachineTelemetry{{Name: "m1", PowerMilliW: 5}}})
		return g.validate(context.Background(), a, &pubsub.Message{Message: &pb.Message{From: []byte(author), Data: data}})
	}
	if v := verdict(c, "gc"); v != pubsub.ValidationAccept {
		t.Fatalf("member's heartbeat: %v", v)
	}
	// Two of three organisations vote gc out.
	for _, voter := range []struct {
		org string
		id  peer.ID
	}{{"ga", a}, {"gb", b}} {
		data, err := ledger.EncodeCommand(ledger.Command{Org: voter.org, Peer: voter.id.String(), AtMs: time.Now().UnixMilli(),
			Membership: &ledger.Membership{Remove: &ledger.RemovalVote{Org: "gc"}}})
		if err != nil {
			t.Fatal(err)
		}
		view.mu.Lock()
		view.at++
		res := view.l.Apply(view.at, data)
		view.mu.Unlock()
		if !res.Applied() {
			t.Fatalf("vote of %s: %v", voter.org, res.Err)
		}
	}
	if v := verdict(c, "gc"); v != pubsub.ValidationIgnore {
		t.Fatalf("removed organisation's heartbeat: %v, want ignore", v)
	}
	// A peer out of the configuration (it left; or the leader took it out
	// before this peer applied the vote).
	members[b] = false
	if v := verdict(b, "gb"); v != pubsub.ValidationIgnore {
		t.Fatalf("non-member's heartbeat: %v, want ignore", v)
	}
	if v := verdict(a, "ga"); v != pubsub.ValidationAccept {
		t.Fatalf("member's heartbeat after the removal: %v", v)
	}
}
