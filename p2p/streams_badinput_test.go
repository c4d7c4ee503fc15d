package p2p

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// TestUnknownProtocolVersion: a request for a protocol version the remote
// does not serve is refused during stream negotiation, before any byte of
// it reaches a handler, and reported as unreachable (so a caller may send
// it elsewhere).
func TestUnknownProtocolVersion(t *testing.T) {
	psk := mustSecret(t)
	a := newTestHost(t, t.TempDir(), psk)
	var served atomic.Int64
	a.Handle(echoProto, func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
		served.Add(1)
		return echoHandler(ctx, remote, req)
	})
	b := newTestHost(t, t.TempDir(), psk)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.ConnectAddr(ctx, addrOf(t, a)); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []protocol.ID{
		"/coopgrid/test-echo/2.0.0",
		"/coopgrid/test-echo/0.9.0",
		"/coopgrid/test-echo/1.0.0/extra",
		"/coopgrid/test-echo",
		"",
	} {
		t.Run(string(proto), func(t *testing.T) {
			_, err := b.Request(ctx, a.ID(), proto, []byte("hello"))
			if err == nil || !errors.Is(err, ErrUnreachable) || Code(err) != CodeUnavailable {
				t.Fatalf("err %v (code %q), want ErrUnreachable / %q", err, Code(err), CodeUnavailable)
			}
		})
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("handler ran %d times for unknown versions", n)
	}
	// The served version still works.
	if resp, err := b.Request(ctx, a.ID(), echoProto, []byte("hello")); err != nil || string(resp) != "echo:hello" {
		t.Fatalf("known version: %q %v", resp, err)
	}
}

// TestReplayedRequest: a request frame sent again on a new stream is a new,
// independent exchange: the framing keeps no state between streams, and the
// handler always sees the authenticated sender of the stream it reads, never
// the peer that first sent the bytes. So a member replaying another
// member's captured request acts as itself (the consensus layer then
// refuses a command whose Peer is not the sender: consensus
// TestProposeRules, "forwarded, acting as another member"). Replays of one's
// own requests are not deduplicated here; that is the handler's business.
func TestReplayedRequest(t *testing.T) {
	psk := mustSecret(t)
	const limit = 1024
	a := newTestHost(t, t.TempDir(), psk, func(c *Config) { c.MaxMessageSize = limit })
	var served atomic.Int64
	a.Handle(echoProto, func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
		served.Add(1)
		return echoHandler(ctx, remote, req)
	})
	b := newTestHost(t, t.TempDir(), psk)
	c := newTestHost(t, t.TempDir(), psk)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, h := range []*Host{b, c} {
		if _, err := h.ConnectAddr(ctx, addrOf(t, a)); err != nil {
			t.Fatal(err)
		}
	}
	// The exact bytes b's request puts on the wire.
	var captured bytes.Buffer
	if err := writeFrame(&captured, []byte("whoami"), limit); err != nil {
		t.Fatal(err)
	}
	raw := func(h *Host, frame []byte) (status byte, body string) {
		t.Helper()
		s, err := h.NewStream(ctx, a.ID(), echoProto)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := s.Write(frame); err != nil {
			t.Fatal(err)
		}
		_ = s.CloseWrite()
		resp, err := readFrame(bufio.NewReader(s), limit+1)
		if err != nil || len(resp) == 0 {
			t.Fatalf("response: %q %v", resp, err)
		}
		return resp[0], string(resp[1:])
	}
	tests := []struct {
		name   string
		sender *Host
		frame  []byte
		want   peer.ID
	}{
		{"original", b, captured.Bytes(), b.ID()},
		{"replayed by the same peer", b, captured.Bytes(), b.ID()},
		{"replayed by another member", c, captured.Bytes(), c.ID()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, body := raw(tc.sender, tc.frame)
			if st != statusOK || body != tc.want.String() {
				t.Fatalf("status %d body %q, want the stream's sender %s", st, body, tc.want)
			}
		})
	}
	// Two frames on one stream: only the first is a request; the second is
	// never served.
	before := served.Load()
	twice := append(append([]byte{}, captured.Bytes()...), captured.Bytes()...)
	if st, body := raw(b, twice); st != statusOK || body != b.ID().String() {
		t.Fatalf("doubled frame: status %d body %q", st, body)
	}
	if n := served.Load() - before; n != 1 {
		t.Fatalf("a stream carrying two frames was served %d times", n)
	}
}
