package consensus

import (
	"testing"
	"time"
)

// TestStarvationStretchesVoterTimeouts: a tick later than the threshold
// makes a voter's follower timeouts starveStretch times the preset's until
// starveCalm has passed without another; a tick on time changes nothing,
// and a non-voter's timeouts (long already) are never stretched.
func TestStarvationStretchesVoterTimeouts(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	hb, el := cfg.HeartbeatTimeout, cfg.ElectionTimeout
	t0 := time.Unix(1000, 0)
	threshold := hb / 4
	cases := []struct {
		name        string
		late        time.Duration // of the one tick observed at t0
		at          time.Duration // when the timeouts are asked, after t0
		heartbeat   time.Duration // the unstretched follower timeout
		wantChanged bool
		wantHB      time.Duration
	}{
		{"on time", threshold / 2, 0, hb, false, hb},
		{"late", 2 * threshold, 0, hb, true, starveStretch * hb},
		{"late, still within the calm", 2 * threshold, starveCalm - time.Second, hb, true, starveStretch * hb},
		{"late, calm since", 2 * threshold, starveCalm + time.Second, hb, true, hb},
		{"late, a non-voter", 2 * threshold, 0, 10 * hb, true, 10 * hb},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s starvation
			if changed := s.observe(t0.Add(-tc.late), t0, threshold); changed != tc.wantChanged {
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
