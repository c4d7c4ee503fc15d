package gossip

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// fixedSource publishes one idle machine m1 and counts its heartbeats.
type fixedSource struct{ published atomic.Int64 }

func (s *fixedSource) Telemetry() ([]MachineTelemetry, int64, bool) {
	return []MachineTelemetry{{Name: "m1", PowerMilliW: 5}}, 0, true
}

func (s *fixedSource) Published(context.Context) { s.published.Add(1) }

// TestHeartbeatsTravel: two peers on the topic hear each other's machines
// (Liveness, with the sender's stamp) and learn each other's addresses
// from the heartbeats; Close stops publishing.
func TestHeartbeatsTravel(t *testing.T) {
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	hosts := make([]*p2p.Host, 2)
	for i := range hosts {
		h, err := p2p.New(p2p.Config{DataDir: filepath.Join(t.TempDir(), "p2p"), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		hosts[i] = h
	}
	view := newLedgerView(t, map[string]peer.ID{"a": hosts[0].ID(), "b": hosts[1].ID()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := hosts[1].ConnectAddr(ctx, hosts[0].FullAddrs()[0].String()); err != nil {
		t.Fatal(err)
	}
	var (
		gs   [2]*Gossip
		srcs [2]fixedSource
	)
	for i, org := range []string{"a", "b"} {
		gs[i] = New(Config{Org: org, Boot: time.Now().UnixMilli(), Interval: 100 * time.Millisecond, Logger: testLogger()})
		defer gs[i].Close()
		if err := gs[i].Join(hosts[i], view); err != nil {
			t.Fatal(err)
		}
		gs[i].StartPublishing(&srcs[i])
	}
	for i, other := range []string{"b/m1", "a/m1"} {
		for {
			if _, ok := gs[i].LastSeen(other); ok {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("peer %d never heard of %s", i, other)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ms := gs[i].LastHeartbeatMs(other); ms <= 0 {
			t.Fatalf("peer %d: %s's stamp %d", i, other, ms)
		}
		if ms, ok := gs[i].OwnerClockMs(other, time.Now()); !ok || ms <= 0 {
			t.Fatalf("peer %d: %s's owner clock %d %v", i, other, ms, ok)
		}
	}
	if len(hosts[0].Peerstore().Addrs(hosts[1].ID())) == 0 {
		t.Fatal("no address remembered for the other peer")
	}
	gs[0].Close()
	n := srcs[0].published.Load()
	if n == 0 {
		t.Fatal("Published never ran")
	}
	time.Sleep(300 * time.Millisecond)
	if srcs[0].published.Load() != n {
		t.Fatal("published after Close")
	}
}
