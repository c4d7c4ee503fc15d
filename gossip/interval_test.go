package gossip

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestPublishIntervalBoundsWhatEachPeerReceives: the leader receives every
// heartbeat (and, without a leader, every peer does), so with the interval
// grown by PublishInterval it receives at most 1/perPeer heartbeats a
// second until the cap; the interval is never below the configured one nor
// above the cap.
func TestPublishIntervalBoundsWhatEachPeerReceives(t *testing.T) {
	const base, limit = 2 * time.Second, 5 * time.Second
	maxRate := float64(time.Second / perPeer)
	for _, peers := range []int{1, 10, 40, 41, 50, 100, 101, 500} {
		t.Run(fmt.Sprint(peers), func(t *testing.T) {
			iv := PublishInterval(peers, base, limit)
			if iv < base || iv > limit {
				t.Fatalf("interval %v outside [%v, %v]", iv, base, limit)
			}
			rate := float64(peers) / iv.Seconds()
			if iv < limit && rate > maxRate {
				t.Fatalf("%d peers every %v: each receives %.1f a second, above %.0f", peers, iv, rate, maxRate)
			}
			if peers >= 100 && iv != limit {
				t.Fatalf("%d peers: %v, want the cap %v", peers, iv, limit)
			}
		})
	}
	if iv := PublishInterval(1000, base, time.Second); iv != base {
		t.Fatalf("a cap below the base: %v, want the base %v", iv, base)
	}
}

// TestAnnounceIntervalBoundsTheTopic: every peer receives every
// announcement, so with AnnounceInterval a peer receives at most one a
// second (1/perPeerAnnounce) whatever the size, and an announcement is
// never more frequent than the heartbeats themselves.
func TestAnnounceIntervalBoundsTheTopic(t *testing.T) {
	maxRate := float64(time.Second / perPeerAnnounce)
	for _, peers := range []int{1, 2, 10, 100, 1000} {
		for _, iv := range []time.Duration{time.Second, 5 * time.Second} {
			t.Run(fmt.Sprint(peers, iv), func(t *testing.T) {
				a := AnnounceInterval(peers, iv)
				if a < iv {
					t.Fatalf("announcements every %v, more often than the heartbeats (%v)", a, iv)
				}
				if rate := float64(peers) / a.Seconds(); rate > maxRate {
					t.Fatalf("%d peers every %v: each receives %.2f a second, above %.0f", peers, a, rate, maxRate)
				}
			})
		}
	}
}

// TestPublishIntervalFollowsTheTopic: three real peers on the topic; each
// one's interval is derived from the peers it sees there, and stays the
// configured one without MaxInterval.
func TestPublishIntervalFollowsTheTopic(t *testing.T) {
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	hosts := make([]*p2p.Host, n)
	orgs := map[string]peer.ID{}
	for i := range hosts {
		h, err := p2p.New(p2p.Config{DataDir: filepath.Join(t.TempDir(), "p2p"), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		hosts[i] = h
		orgs[fmt.Sprintf("o%d", i)] = h.ID()
	}
	view := newLedgerView(t, orgs)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, h := range hosts[1:] {
		if _, err := h.ConnectAddr(ctx, hosts[0].FullAddrs()[0].String()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hosts[2].ConnectAddr(ctx, hosts[1].FullAddrs()[0].String()); err != nil {
		t.Fatal(err)
	}
	const base = 10 * time.Millisecond
	gs := make([]*Gossip, n)
	for i := range gs {
		maxIv := time.Second
		if i == 0 {
			maxIv = 0 // no growth
		}
		gs[i] = New(Config{Org: fmt.Sprintf("o%d", i), Boot: time.Now().UnixMilli(), Interval: base, MaxInterval: maxIv, Logger: testLogger()})
		defer gs[i].Close()
		if err := gs[i].Join(hosts[i], view); err != nil {
			t.Fatal(err)
		}
	}
	want := PublishInterval(n, base, time.Second)
	for i, g := range gs {
		w := want
		if i == 0 {
			w = base
		}
		for g.publishInterval() != w {
			if ctx.Err() != nil {
				t.Fatalf("peer %d: interval %v, want %v (%d peers on the topic)", i, g.publishInterval(), w, len(g.topic.ListPeers()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestNextSendEndsOnTheGrid: every heartbeat goes on a point of the grid,
// peers that start at different moments within a step send together, a
// timer late by less than a quarter step keeps its point, and the interval
// stays within iv - step/4 and iv + 3 step/4.
func TestNextSendEndsOnTheGrid(t *testing.T) {
	const step = 250 * time.Millisecond
	grid := time.Unix(1_700_000_000, 0) // a point of the grid
	for _, tc := range []struct {
		name     string
		after    time.Duration // now, after a grid point
		iv, want time.Duration
	}{
		{"on time", 0, time.Second, time.Second},
		{"a timer 3 ms late keeps its point", 3 * time.Millisecond, time.Second, time.Second - 3*time.Millisecond},
		{"a peer 60 ms into the step joins the same point", 60 * time.Millisecond, time.Second, time.Second - 60*time.Millisecond},
		{"an interval between two points is rounded up", 0, 2450 * time.Millisecond, 2500 * time.Millisecond},
		{"or down by less than a quarter step", 0, 2300 * time.Millisecond, 2250 * time.Millisecond},
		{"a short interval waits half a step at least", 0, 10 * time.Millisecond, step / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextSend(grid.Add(tc.after), tc.iv, step); got != tc.want {
				t.Fatalf("next heartbeat in %v, want %v", got, tc.want)
			}
		})
	}
	for after := time.Duration(0); after < 3*step; after += 7 * time.Millisecond {
		for _, iv := range []time.Duration{time.Second, 1700 * time.Millisecond, 5 * time.Second} {
			now := grid.Add(after)
			d := nextSend(now, iv, step)
			if off := now.Add(d).Sub(grid) % step; off != 0 {
				t.Fatalf("now %v, iv %v: sends %v off the grid", after, iv, off)
			}
			if d < iv-step/4 || d > iv+3*step/4 {
				t.Fatalf("now %v, iv %v: next in %v, outside [iv - step/4, iv + 3 step/4]", after, iv, d)
			}
		}
	}
}

// TestIntervalsSizedByMembers: with Config.Members set, the intervals are
// sized by the federation's members, not by the peers this one sees on
// the topic (a non-voter is connected to a few only: consensus/mesh.go);
// without it, or while it knows none, by the topic (here this peer alone,
// on a real host).
func TestIntervalsSizedByMembers(t *testing.T) {
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.New(p2p.Config{DataDir: filepath.Join(t.TempDir(), "p2p"), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	view := newLedgerView(t, map[string]peer.ID{"o": h.ID()})
	leader := func() (peer.ID, bool) { return "", false }
	cases := []struct {
		name                   string
		members                func() int
		wantPublish, wantTopic time.Duration
	}{
		{"100 members", func() int { return 100 }, 5 * time.Second, 100 * time.Second},
		{"none known yet", func() int { return 0 }, time.Second, time.Second},
		{"unset", nil, time.Second, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Config{Org: "o", Interval: time.Second, MaxInterval: 10 * time.Second, Leader: leader, Members: tc.members, Logger: testLogger()})
			defer g.Close()
			if err := g.Join(h, view); err != nil {
				t.Fatal(err)
			}
			if got := g.publishInterval(); got != tc.wantPublish {
				t.Errorf("publish interval %v, want %v", got, tc.wantPublish)
			}
			if got := g.announceInterval(); got != tc.wantTopic {
				t.Errorf("announce interval %v, want %v", got, tc.wantTopic)
			}
		})
	}
}

// TestHeartbeatsOnTheChoreGrid: a heartbeat leaves on the peer's shared
// 2 s chore grid (p2p.IdleGrid) when the publication interval is a
// multiple of it (the default 2 s, up to 40 members), on its 1 s halving
// when the interval is a multiple of that (5 s at 100 members: every other
// heartbeat on the chore grid), and the interval stays exact; an interval
// that no halving down to a quarter of the configured one divides keeps
// that quarter.
func TestHeartbeatsOnTheChoreGrid(t *testing.T) {
	const interval = 2 * time.Second // heartbeat.interval's default
	for _, tc := range []struct {
		iv, want time.Duration
	}{
		{2 * time.Second, p2p.IdleGrid},
		{4 * time.Second, p2p.IdleGrid},
		{5 * time.Second, p2p.IdleGrid / 2},
		{2500 * time.Millisecond, p2p.IdleGrid / 4},
		{2300 * time.Millisecond, interval / 4},
	} {
		if got := sendStep(tc.iv, interval); got != tc.want {
			t.Fatalf("interval %v: step %v, want %v", tc.iv, got, tc.want)
		}
	}
	if got := sendStep(100*time.Millisecond, 100*time.Millisecond); got != 25*time.Millisecond {
		t.Fatalf("a 100 ms interval: step %v, want its quarter", got)
	}
	grid := time.Unix(1_700_000_000, 0) // a point of the 2 s grid
	for after := time.Duration(0); after < 2*p2p.IdleGrid; after += 13 * time.Millisecond {
		now := grid.Add(after)
		at := now.Add(nextSend(now, 2*time.Second, sendStep(2*time.Second, interval)))
		if off := at.Sub(grid) % p2p.IdleGrid; off != 0 {
			t.Fatalf("now %v after a grid point: heartbeat %v off the chore grid", after, off)
		}
		if next := nextSend(at.Add(3*time.Millisecond), 2*time.Second, p2p.IdleGrid); next != 2*time.Second-3*time.Millisecond {
			t.Fatalf("a timer 3 ms late: next heartbeat in %v, want the interval kept", next)
		}
	}
}
