package consensus

import (
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
)

// TestStarvationStretchesVoterTimeouts: a starved reading makes a voter's
// follower timeouts starveStretch times the preset's until starveCalm has
// passed without another; a host that keeps up changes nothing, and a
// non-voter's timeouts (long already) are never stretched.
func TestStarvationStretchesVoterTimeouts(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	hb, el := cfg.HeartbeatTimeout, cfg.ElectionTimeout
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name        string
		starved     bool          // the one reading, at t0
		at          time.Duration // when the timeouts are asked, after t0
		heartbeat   time.Duration // the unstretched follower timeout
		wantChanged bool
		wantHB      time.Duration
	}{
		{"keeping up", false, 0, hb, false, hb},
		{"starved", true, 0, hb, true, starveStretch * hb},
		{"starved, still within the calm", true, starveCalm - time.Second, hb, true, starveStretch * hb},
		{"starved, calm since", true, starveCalm + time.Second, hb, true, hb},
		{"starved, a non-voter", true, 0, 10 * hb, true, 10 * hb},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s starvation
			if changed := s.observe(tc.starved, t0); changed != tc.wantChanged {
				t.Fatalf("changed %t, want %t", changed, tc.wantChanged)
			}
			gotHB, gotEl := s.stretch(cfg, tc.heartbeat, el, t0.Add(tc.at))
			if gotHB != tc.wantHB {
				t.Fatalf("heartbeat timeout %s, want %s", gotHB, tc.wantHB)
			}
			if wantEl := el * (tc.wantHB / tc.heartbeat); gotEl != wantEl {
				t.Fatalf("election timeout %s, want %s", gotEl, wantEl)
			}
		})
	}
}

// TestPressureSome10 reads the "some avg10" share of /proc/pressure/cpu.
func TestPressureSome10(t *testing.T) {
	cases := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"some avg10=97.97 avg60=97.36 avg300=97.05 total=37058753811\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 97.97, true},
		{"full avg10=12.00 avg60=0.00 avg300=0.00 total=0\n", 0, false},
		{"some avg10=x avg60=1\n", 0, false},
		{"", 0, false},
	}
	for _, tc := range cases {
		got, ok := pressureSome10(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("pressureSome10(%q) = %v, %t; want %v, %t", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestStarvedVotersStretchTheirTimeouts: in a real federation of three on
// a host that reads as starved, the followers reload starveStretch times
// the preset's heartbeat timeout; the leader keeps the preset's.
func TestStarvedVotersStretchTheirTimeouts(t *testing.T) {
	c := newClusterWith(t, 3, 1, nil, WithPressure(fixedPressure(true)))
	leader := c.waitLeader()
	preset := DefaultConfig("").HeartbeatTimeout
	eventually(t, 20*time.Second, func() error {
		for _, p := range c.peers {
			want := starveStretch * preset
			if p == leader {
				want = preset
			}
			if got := p.node.Raft().ReloadableConfig().HeartbeatTimeout; got != want {
				return fmt.Errorf("%s: heartbeat timeout %v, want %v", p.name, got, want)
			}
		}
		return nil
	})
}

// TestStarvationReadOnTheGrid: the starvation watch reads on the points of
// the peer's shared 2 s grid (p2p.IdleGrid), where its other chores wake
// the process anyway, never between them, and at least every
// starveCalm/2 so that a starved host keeps the stretch between readings.
func TestStarvationReadOnTheGrid(t *testing.T) {
	if starveTick%p2p.IdleGrid != 0 || starveTick > starveCalm/2 {
		t.Fatalf("starveTick %v: want a multiple of the grid %v, at most half of starveCalm %v", starveTick, p2p.IdleGrid, starveCalm)
	}
	grid := time.Unix(1_700_000_000, 0)
	for after := time.Duration(0); after < 3*p2p.IdleGrid; after += 37 * time.Millisecond {
		now := grid.Add(after)
		d := starveWait(now)
		if off := now.Add(d).Sub(grid) % p2p.IdleGrid; off != 0 {
			t.Fatalf("now %v after a grid point: next reading %v off the grid", after, off)
		}
		if d <= 0 || d > starveTick+starveTick/2 {
			t.Fatalf("now %v after a grid point: next reading in %v", after, d)
		}
	}
}
