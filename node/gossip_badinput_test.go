package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestGossipValidatorVerdicts runs the heartbeat topic validator of a real
// peer on messages as gossipsub hands them over, and checks the verdict
// each gets: a non-member's message (signed by a key no organisation
// registered) claiming a member organisation is rejected, which makes
// gossipsub drop it and penalise the peer that forwarded it; one naming an
// organisation this peer does not know is ignored (dropped, not
// forwarded); a replay is ignored; malformed messages are rejected. Only
// an accepted message carries the decoded heartbeat on to the consumer.
// TestHeartbeatValidation checks the decoder's reasons one by one.
func TestGossipValidatorVerdicts(t *testing.T) {
	tn := newTNode(t, "gs", "", "machines:\n  - name: m1\n    gflops: 10\n    busy_watts: 100\n", testConfig("sim"))
	tn.start()
	n := tn.n
	stranger, err := peer.Decode("12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo")
	if err != nil {
		t.Fatal(err)
	}
	enc := func(hb Heartbeat) []byte {
		b, err := json.Marshal(hb)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	now := time.Now().UnixMilli()
	// Far ahead of the peer's own sequence, so that its own heartbeats do
	// not make the first message a replay.
	hb := func(org string, seq uint64) Heartbeat {
		return Heartbeat{V: 1, Org: org, AtMs: now, Boot: n.boot, Seq: 1<<40 + seq, Machines: []MachineTelemetry{{Name: "m1", PowerMilliW: 5}}}
	}
	tests := []struct {
		name   string
		author peer.ID
		data   []byte
		want   pubsub.ValidationResult
	}{
		{"member, fresh", n.self, enc(hb("gs", 1)), pubsub.ValidationAccept},
		{"member, replayed", n.self, enc(hb("gs", 1)), pubsub.ValidationIgnore},
		{"member, older sequence", n.self, enc(hb("gs", 0)), pubsub.ValidationIgnore},
		{"member, next sequence", n.self, enc(hb("gs", 2)), pubsub.ValidationAccept},
		{"non-member claiming a member organisation", stranger, enc(hb("gs", 3)), pubsub.ValidationReject},
		{"non-member naming an unknown organisation", stranger, enc(hb("outsiders", 1)), pubsub.ValidationIgnore},
		{"non-member, malformed", stranger, []byte(`{"v":1,"org":"gs"`), pubsub.ValidationReject},
		{"member, malformed", n.self, []byte(`not json`), pubsub.ValidationReject},
		{"member, oversized", n.self, make([]byte, MaxHeartbeatBytes+1), pubsub.ValidationReject},
		{"no author", "", enc(hb("gs", 4)), pubsub.ValidationReject},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := &pubsub.Message{Message: &pb.Message{From: []byte(tc.author), Data: tc.data}}
			got := n.validateHeartbeat(context.Background(), stranger, msg)
			if got != tc.want {
				t.Fatalf("verdict %v, want %v", got, tc.want)
			}
			if _, carried := msg.ValidatorData.(*Heartbeat); carried != (got == pubsub.ValidationAccept) {
				t.Fatalf("verdict %v, heartbeat carried on: %v", got, carried)
			}
		})
	}
}
