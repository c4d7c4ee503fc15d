package consensus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordHandler keeps the records logged through it.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func attr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

// TestRaftWarningsAboutOnePeerAreRateLimited: raft's lines about a dead
// follower (a heartbeat failure four times a second, an append failure
// naming the follower as a raft.Server) go out once per peerLogEvery for
// each peer and message, the next one that goes out says how many were
// held back, and lines about other peers or naming no peer are not held.
func TestRaftWarningsAboutOnePeerAreRateLimited(t *testing.T) {
	h := &recordHandler{}
	now := time.Unix(1_000_000, 0)
	lim := newPeerLimiter(peerLogEvery)
	lim.now = func() time.Time { return now }
	w := &slogWriter{log: slog.New(h), limit: lim}
	write := func(lines ...string) {
		t.Helper()
		if _, err := w.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	heartbeat := func(peer string) string {
		return `{"@level":"error","@message":"failed to heartbeat to","@module":"raft","backoff time":200000000,"error":"dial backoff","peer":"` + peer + `"}`
	}
	appendTo := func(peer string) string {
		return `{"@level":"error","@message":"failed to appendEntries to","@module":"raft","error":"EOF","peer":{"Address":"` + peer + `","ID":"` + peer + `","Suffrage":0}}`
	}
	info := `{"@level":"info","@message":"entering leader state","@module":"raft","leader":"A"}`
	noPeer := `{"@level":"warn","@message":"failed to contact quorum of nodes, stepping down","@module":"raft"}`

	for range 8 { // two seconds of failures at four a second
		write(heartbeat("A"), appendTo("A"), heartbeat("B"), info, noPeer)
		now = now.Add(250 * time.Millisecond)
	}
	count := func(msg, peer string) int {
		n := 0
		for _, r := range h.recs {
			if r.Message != msg {
				continue
			}
			v, _ := attr(r, "peer")
			if peer == "" || strings.Contains(v.String(), peer) {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		msg, peer string
		want      int
	}{
		{"failed to heartbeat to", "A", 1},
		{"failed to heartbeat to", "B", 1},
		{"failed to appendEntries to", "A", 1},
		{"entering leader state", "", 8},
		{"failed to contact quorum of nodes, stepping down", "", 8},
	} {
		if got := count(tc.msg, tc.peer); got != tc.want {
			t.Errorf("%q about %q: %d lines, want %d", tc.msg, tc.peer, got, tc.want)
		}
	}

	now = now.Add(peerLogEvery)
	h.recs = nil
	write(heartbeat("A"))
	if len(h.recs) != 1 {
		t.Fatalf("after %v: %d lines, want 1", peerLogEvery, len(h.recs))
	}
	if v, ok := attr(h.recs[0], "suppressed_since_last"); !ok || v.Int64() != 7 {
		t.Fatalf("suppressed_since_last = %v (%v), want 7", v, ok)
	}
}

// TestPeerLimiterIsBounded: a flood of distinct peers does not grow the
// limiter past maxLimiterKeys.
func TestPeerLimiterIsBounded(t *testing.T) {
	lim := newPeerLimiter(time.Hour)
	var b bytes.Buffer
	for i := range 3 * maxLimiterKeys {
		b.Reset()
		b.WriteString("m\x00peer")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteByte(byte(i))
		b.WriteByte(byte(i >> 8))
		lim.allow(b.String())
	}
	if n := len(lim.last); n > maxLimiterKeys {
		t.Fatalf("%d keys kept, bound %d", n, maxLimiterKeys)
	}
}
