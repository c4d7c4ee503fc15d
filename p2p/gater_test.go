package p2p

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// gatedHost is a test host with a connection gater.
func gatedHost(t *testing.T, psk []byte) *Host {
	t.Helper()
	return newTestHost(t, t.TempDir(), psk, func(c *Config) { c.Gater = NewGater() })
}

// pingPeer makes one request from a to b over echoProto.
func pingPeer(ctx context.Context, a, b *Host) error {
	resp, err := a.Request(ctx, b.ID(), echoProto, []byte("ping"))
	if err != nil {
		return err
	}
	if string(resp) != "echo:ping" {
		return errors.New("unexpected answer " + string(resp))
	}
	return nil
}

// TestGaterBlocksBothDirectionsAndHeals: with the block set on one side
// only, on the other, or on both, neither host can reach the other,
// whichever dials, and an existing connection is closed; a third host is
// not affected; clearing the block heals.
func TestGaterBlocksBothDirectionsAndHeals(t *testing.T) {
	tests := []struct {
		name         string
		aBlocks      bool // a blocks b
		bBlocks      bool // b blocks a
		dialFromA    bool
		existingConn bool // a and b are connected before the block
	}{
		{name: "a blocks b, a dials", aBlocks: true, dialFromA: true},
		{name: "a blocks b, b dials", aBlocks: true, dialFromA: false},
		{name: "b blocks a, a dials", bBlocks: true, dialFromA: true},
		{name: "both block, b dials", aBlocks: true, bBlocks: true, dialFromA: false},
		{name: "both block, existing connection closed", aBlocks: true, bBlocks: true, dialFromA: true, existingConn: true},
		{name: "a blocks b, existing connection closed", aBlocks: true, dialFromA: false, existingConn: true},
	}
	psk := mustSecret(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b, c := gatedHost(t, psk), gatedHost(t, psk), gatedHost(t, psk)
			for _, h := range []*Host{a, b, c} {
				h.Handle(echoProto, echoHandler)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Everyone knows everyone's addresses (as the peerstore and
			// the known-peers file do in a federation).
			for _, x := range []*Host{a, b, c} {
				for _, y := range []*Host{a, b, c} {
					if x != y {
						x.Peerstore().AddAddrs(y.ID(), y.Addrs(), time.Hour)
					}
				}
			}
			if tc.existingConn {
				if err := pingPeer(ctx, a, b); err != nil {
					t.Fatalf("before the block: %v", err)
				}
			}
			if tc.aBlocks {
				if err := a.SetBlocked([]peer.ID{b.ID()}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.bBlocks {
				if err := b.SetBlocked([]peer.ID{a.ID()}); err != nil {
					t.Fatal(err)
				}
			}
			from, to := b, a
			if tc.dialFromA {
				from, to = a, b
			}
			// The request fails, and no connection survives on the
			// blocking side (the other side may briefly hold one the
			// blocker is closing).
			if err := pingPeer(ctx, from, to); err == nil {
				t.Fatalf("%s reached %s through the block", from.ID(), to.ID())
			}
			// A host that blocks never completes a dial to the blocked
			// peer (a dial towards a blocker may complete the handshake
			// before the blocker drops it).
			if dialerBlocks := (from == a && tc.aBlocks) || (from == b && tc.bBlocks); dialerBlocks {
				if _, err := from.ConnectAddr(ctx, addrOf(t, to)); err == nil {
					t.Fatal("a host dialled a peer it blocks")
				}
			}
			blocker := a
			if !tc.aBlocks {
				blocker = b
			}
			other := b
			if blocker == b {
				other = a
			}
			waitUntil(t, "the blocker holds no connection to the blocked peer", func() bool {
				return len(blocker.Network().ConnsToPeer(other.ID())) == 0
			})
			if got := blocker.Network().Connectedness(other.ID()); got == network.Connected {
				t.Fatalf("blocker still connected to the blocked peer")
			}
			// A third host reaches both.
			for _, h := range []*Host{a, b} {
				if err := pingPeer(ctx, c, h); err != nil {
					t.Fatalf("c → %s during the block: %v", h.ID(), err)
				}
				if err := pingPeer(ctx, h, c); err != nil {
					t.Fatalf("%s → c during the block: %v", h.ID(), err)
				}
			}
			if got := blocker.Blocked(); len(got) != 1 || got[0] != other.ID() {
				t.Fatalf("Blocked() = %v, want [%s]", got, other.ID())
			}

			// Heal: clear both sides, then both directions work again.
			for _, h := range []*Host{a, b} {
				if err := h.SetBlocked(nil); err != nil {
					t.Fatal(err)
				}
			}
			for _, pair := range [][2]*Host{{a, b}, {b, a}} {
				waitUntil(t, "a request after healing", func() bool {
					return pingPeer(ctx, pair[0], pair[1]) == nil
				})
			}
			if got := a.Blocked(); len(got) != 0 {
				t.Fatalf("Blocked() after healing = %v", got)
			}
		})
	}
}

// TestGaterStopsKnownPeersRedial: ConnectKnown (the redial of a restart)
// skips a blocked peer and reaches the others.
func TestGaterStopsKnownPeersRedial(t *testing.T) {
	psk := mustSecret(t)
	a, b, c := gatedHost(t, psk), gatedHost(t, psk), gatedHost(t, psk)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range []*Host{b, c} {
		if err := a.Remember(peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SetBlocked([]peer.ID{b.ID()}); err != nil {
		t.Fatal(err)
	}
	if n := a.ConnectKnown(ctx); n != 1 {
		t.Fatalf("ConnectKnown connected %d peers, want 1 (c only)", n)
	}
	if a.Network().Connectedness(b.ID()) == network.Connected {
		t.Fatal("a connected to the blocked b")
	}
	if a.Network().Connectedness(c.ID()) != network.Connected {
		t.Fatal("a not connected to c")
	}
}

// TestSetBlockedWithoutGater: a host built without a gater (production)
// refuses to block anyone.
func TestSetBlockedWithoutGater(t *testing.T) {
	psk := mustSecret(t)
	a := newTestHost(t, t.TempDir(), psk)
	b := newTestHost(t, t.TempDir(), psk)
	if err := a.SetBlocked([]peer.ID{b.ID()}); !errors.Is(err, ErrNoGater) {
		t.Fatalf("SetBlocked without a gater: %v, want ErrNoGater", err)
	}
	if got := a.Blocked(); got != nil {
		t.Fatalf("Blocked() without a gater = %v", got)
	}
}

// waitUntil polls cond; the deadline only bounds a hung test.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
