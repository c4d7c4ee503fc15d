package p2p

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
)

func TestUntilGrid(t *testing.T) {
	base := time.Unix(1_700_000_000, 0) // a multiple of 2 s
	for _, c := range []struct {
		name  string
		now   time.Time
		every time.Duration
		want  time.Duration
	}{
		{"on a point: the next one", base, 2 * time.Second, 2 * time.Second},
		{"early in the step", base.Add(100 * time.Millisecond), 2 * time.Second, 1900 * time.Millisecond},
		{"half-way: the next point", base.Add(time.Second), 2 * time.Second, time.Second},
		{"late in the step: the point after", base.Add(1900 * time.Millisecond), 2 * time.Second, 2100 * time.Millisecond},
		{"other step", base.Add(300 * time.Millisecond), 500 * time.Millisecond, 700 * time.Millisecond},
		{"no step", base.Add(time.Millisecond), 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := UntilGrid(c.now, c.every)
			if got != c.want {
				t.Fatalf("UntilGrid = %v, want %v", got, c.want)
			}
			if c.every > 0 && c.now.Add(got).UnixNano()%int64(c.every) != 0 {
				t.Fatalf("ends at %v, not on the grid of %v", c.now.Add(got), c.every)
			}
		})
	}
}

// TestMuxerIdleIntervals: the hosts' yamux pings idle connections every
// KeepAliveInterval and measures their round trip every
// MeasureRTTInterval, and the process-wide default stays yamux's own. A
// voter keeps a connection to every member: at 100 peers, measures every
// 5 minutes from both ends woke it 0.7 times a second, so the interval is
// at least 30 minutes.
func TestMuxerIdleIntervals(t *testing.T) {
	if MeasureRTTInterval < 30*time.Minute || KeepAliveInterval < 2*time.Minute {
		t.Fatalf("RTT every %v, keep-alive after %v: want at least 30 min and 2 min", MeasureRTTInterval, KeepAliveInterval)
	}
	m := muxer()
	if m.KeepAliveInterval != KeepAliveInterval || m.MeasureRTTInterval != MeasureRTTInterval {
		t.Fatalf("muxer: keep-alive %v, RTT every %v; want %v and %v", m.KeepAliveInterval, m.MeasureRTTInterval, KeepAliveInterval, MeasureRTTInterval)
	}
	if d := yamux.DefaultTransport; d.MeasureRTTInterval == MeasureRTTInterval || d.KeepAliveInterval == KeepAliveInterval {
		t.Fatalf("yamux.DefaultTransport changed: keep-alive %v, RTT every %v", d.KeepAliveInterval, d.MeasureRTTInterval)
	}
}
