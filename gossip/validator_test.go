package gossip

import (
	"context"
	"testing"
	"time"

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
