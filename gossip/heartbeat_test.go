package gossip

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestHeartbeatValidation checks the decoder's reasons one by one, against
// a view where hb-a and hb-b are registered (node's TestHeartbeatsTravel
// checks that valid heartbeats reach the other peers).
func TestHeartbeatValidation(t *testing.T) {
	a, b := newPeerID(t), newPeerID(t)
	view := newLedgerView(t, map[string]peer.ID{"hb-a": a, "hb-b": b})
	enc := func(hb any) []byte { return encode(t, hb) }
	good := Heartbeat{V: 1, Org: "hb-b", AtMs: time.Now().UnixMilli(), Boot: 7, Seq: 3, Machines: []MachineTelemetry{{Name: "m1", PowerMilliW: 1}}}
	cases := []struct {
		name   string
		author peer.ID
		data   []byte
		want   error
	}{
		{"valid", b, enc(good), nil},
		{"signed by another organisation's peer", a, enc(good), ErrUnauthorised},
		{"signed by a stranger", stranger, enc(good), ErrUnauthorised},
		{"unknown organisation", b, enc(Heartbeat{V: 1, Org: "nobody", AtMs: 1, Boot: 1, Seq: 1}), ErrUnknownOrg},
		{"oversized", b, append(enc(good), bytes.Repeat([]byte(" "), MaxHeartbeatBytes)...), ErrMalformed},
		{"unknown field", b, []byte(`{"v":1,"org":"hb-b","at_ms":5,"machines":[],"x":1}`), ErrMalformed},
		{"future version", b, enc(Heartbeat{V: 2, Org: "hb-b", AtMs: 5}), ErrMalformed},
		{"not JSON", b, []byte("{"), ErrMalformed},
		{"trailing data", b, append(enc(good), []byte(" {}")...), ErrMalformed},
		{"negative power", b, enc(Heartbeat{V: 1, Org: "hb-b", AtMs: 5, Boot: 1, Seq: 1, Machines: []MachineTelemetry{{Name: "m1", PowerMilliW: -1}}}), ErrMalformed},
		{"negative host power", b, enc(Heartbeat{V: 1, Org: "hb-b", AtMs: 5, Boot: 1, Seq: 1, HostPowerMilliW: -1}), ErrMalformed},
		{"bad machine name", b, enc(Heartbeat{V: 1, Org: "hb-b", AtMs: 5, Boot: 1, Seq: 1, Machines: []MachineTelemetry{{Name: "../m"}}}), ErrMalformed},
		{"bad address", b, enc(Heartbeat{V: 1, Org: "hb-b", AtMs: 5, Boot: 1, Seq: 1, Addrs: []string{"not an address"}}), ErrMalformed},
		{"too many addresses", b, enc(Heartbeat{V: 1, Org: "hb-b", AtMs: 5, Boot: 1, Seq: 1, Addrs: strings.Split(strings.Repeat("/ip4/1.2.3.4/tcp/1,", 17)[:19*17-1], ",")}), ErrMalformed},
		{"duplicate machine", b, enc(Heartbeat{V: 1, Org: "hb-b", AtMs: 5, Boot: 1, Seq: 1, Machines: []MachineTelemetry{{Name: "m1"}, {Name: "m1"}}}), ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(view, tc.author, tc.data)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// Replays (not after the author's last message) are dropped; a new boot
	// starts a new sequence.
	var guard ReplayGuard
	for i, step := range []struct {
		boot int64
		seq  uint64
		ok   bool
	}{{100, 1, true}, {100, 1, false}, {100, 2, true}, {100, 1, false}, {99, 50, false}, {101, 1, true}, {100, 3, false}} {
		if got := guard.Accept(b, step.boot, step.seq); got != step.ok {
			t.Fatalf("step %d (%d, %d): accepted %v", i, step.boot, step.seq, got)
		}
	}
	if _, err := Check(view, b, enc(Heartbeat{V: 1, Org: "hb-b", AtMs: 5, Boot: 1})); !errors.Is(err, ErrMalformed) {
		t.Fatalf("sequence 0: %v", err)
	}
}

// TestOwnerClockEstimate: the owner's clock is its last heartbeat's stamp
// plus the local time since it arrived, whatever this peer's clock says.
func TestOwnerClockEstimate(t *testing.T) {
	tr := newTracker()
	local := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	owner := local.Add(-time.Hour).UnixMilli() // the owner's clock is an hour behind
	tr.observe(&Heartbeat{Org: "o", AtMs: owner, Machines: []MachineTelemetry{{Name: "m"}}}, local)
	// A later heartbeat with an older stamp (its clock stepped back) is
	// the reference from then on, not the largest stamp.
	tr.observe(&Heartbeat{Org: "o", AtMs: owner - 500, Machines: []MachineTelemetry{{Name: "m"}}}, local.Add(time.Second))
	got, ok := tr.OwnerClockMs("o/m", local.Add(6*time.Second))
	_, unknown := tr.OwnerClockMs("o/other", local)
	if !ok || got != owner-500+5000 {
		t.Fatalf("owner clock %d (%v), want %d", got, ok, owner+4500)
	}
	if unknown {
		t.Fatal("an estimate for a machine never heard of")
	}
}

// TestPeerLastHeard: a peer is heard of by its own signature, machines
// or not, and the latest arrival on either channel is kept; a peer never
// heard is unknown.
func TestPeerLastHeard(t *testing.T) {
	tr := newTracker()
	local := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	a, b := peer.ID("peer-a"), peer.ID("peer-b")
	tr.heardFrom(a, local, true)
	tr.heardFrom(a, local.Add(2*time.Second), false)
	tr.heardFrom(a, local.Add(time.Second), true)
	if c, ok := tr.peerContact(a); !ok || !c.last().Equal(local.Add(2*time.Second)) || !c.direct.Equal(local.Add(time.Second)) {
		t.Fatalf("peer a last heard %+v (%v), want %v on the topic and %v directly", c, ok, local.Add(2*time.Second), local.Add(time.Second))
	}
	if _, ok := tr.peerContact(b); ok {
		t.Fatal("peer b was never heard, yet it has a last contact")
	}
}
