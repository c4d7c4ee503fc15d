package p2p

import (
	"bufio"
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

const sessionProto = protocol.ID("/coopgrid/test-session/1.0.0")

// sessionPair starts two connected hosts: srv serves echoHandler as a
// session protocol (and as the one-shot echoProto), cli requests.
func sessionPair(t *testing.T, idle time.Duration) (srv, cli *Host) {
	t.Helper()
	psk := mustSecret(t)
	srv = newTestHost(t, t.TempDir(), psk)
	cli = newTestHost(t, t.TempDir(), psk)
	HandleSession(srv.Host, sessionProto, echoHandler, SessionOptions{StreamOptions: StreamOptions{MaxMessageSize: 64, Logger: quietLogger()}, Idle: idle})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.ConnectAddr(ctx, addrOf(t, srv)); err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

// openStreams counts h's open streams of proto with p.
func openStreams(h *Host, p peer.ID, proto protocol.ID) int {
	n := 0
	for _, c := range h.Network().ConnsToPeer(p) {
		for _, s := range c.GetStreams() {
			if s.Protocol() == proto {
				n++
			}
		}
	}
	return n
}

func sessionRequest(t *testing.T, c *Session, to peer.ID, req string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Request(ctx, to, []byte(req))
}

// TestSessionOneStreamManyRequests: many requests travel on one stream,
// each answered, each handled for the stream's authenticated peer.
func TestSessionOneStreamManyRequests(t *testing.T) {
	srv, cli := sessionPair(t, 0)
	c := NewSession(cli.Host, sessionProto, "", StreamOptions{MaxMessageSize: 64})
	defer c.Close()
	for i := range 5 {
		resp, err := sessionRequest(t, c, srv.ID(), "whoami")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if string(resp) != cli.ID().String() {
			t.Fatalf("request %d handled for %q, want the requester %s", i, resp, cli.ID())
		}
	}
	if n := c.Opened(); n != 1 {
		t.Fatalf("%d streams opened for 5 requests, want 1", n)
	}
	if n := openStreams(srv, cli.ID(), sessionProto); n != 1 {
		t.Fatalf("the server holds %d streams of the requester, want 1", n)
	}
}

// TestSessionRefusalEndsTheStream: an error answer reaches the requester
// with its code and ends the stream; the next request opens another.
func TestSessionRefusalEndsTheStream(t *testing.T) {
	srv, cli := sessionPair(t, 0)
	c := NewSession(cli.Host, sessionProto, "", StreamOptions{MaxMessageSize: 64})
	defer c.Close()
	if _, err := sessionRequest(t, c, srv.ID(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ req, code string }{{"fail-coded", "not_leader"}, {"fail-plain", CodeInternal}} {
		if _, err := sessionRequest(t, c, srv.ID(), tc.req); Code(err) != tc.code {
			t.Fatalf("%s: error %v, want code %s", tc.req, err, tc.code)
		}
	}
	waitUntil(t, "the refused streams to end on the server", func() bool { return openStreams(srv, cli.ID(), sessionProto) == 0 })
	if resp, err := sessionRequest(t, c, srv.ID(), "b"); err != nil || string(resp) != "echo:b" {
		t.Fatalf("after refusals: %q, %v", resp, err)
	}
	if n := c.Opened(); n != 3 {
		t.Fatalf("%d streams opened, want 3 (one, then one after each refusal)", n)
	}
}

// TestSessionBadFrames: an oversized or truncated request on a session
// stream is answered with its code, and the stream ends without the rest
// of the payload being read.
func TestSessionBadFrames(t *testing.T) {
	srv, cli := sessionPair(t, 0)
	for _, tc := range []struct {
		name string
		data []byte
		code string
	}{
		{"declared over the limit", []byte{0xff, 0x7f}, CodeTooLarge},
		{"cut short", []byte{10, 'a', 'b'}, CodeTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := cli.NewStream(ctx, srv.ID(), sessionProto)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// A good request first: the stream is a session's.
			if err := writeFrame(s, []byte("x"), 64); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(s)
			if f, err := readFrame(r, 65); err != nil || string(f[1:]) != "echo:x" {
				t.Fatalf("first request: %q %v", f, err)
			}
			if _, err := s.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			if tc.code == CodeTruncated {
				_ = s.CloseWrite()
			}
			f, err := readFrame(r, 1<<10)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeResponse(f); Code(err) != tc.code {
				t.Fatalf("answer %v, want code %s", err, tc.code)
			}
			if _, err := readFrame(r, 1<<10); err == nil {
				t.Fatal("the stream went on after a bad frame")
			}
		})
	}
	c := NewSession(cli.Host, sessionProto, "", StreamOptions{MaxMessageSize: 64})
	if _, err := sessionRequest(t, c, srv.ID(), string(make([]byte, 65))); Code(err) != CodeTooLarge || c.Opened() != 0 {
		t.Fatalf("an oversized request: %v, %d streams opened; want too_large before any stream", err, c.Opened())
	}
}

// TestSessionReopens: a stream the server ended (idle) or the requester
// moved away from (another peer) is replaced by a new one, and the
// request still succeeds.
func TestSessionReopens(t *testing.T) {
	srv, cli := sessionPair(t, 200*time.Millisecond)
	c := NewSession(cli.Host, sessionProto, "", StreamOptions{MaxMessageSize: 64})
	defer c.Close()
	if _, err := sessionRequest(t, c, srv.ID(), "a"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the server to end the idle stream", func() bool { return openStreams(srv, cli.ID(), sessionProto) == 0 })
	if resp, err := sessionRequest(t, c, srv.ID(), "b"); err != nil || string(resp) != "echo:b" {
		t.Fatalf("after the server ended the stream: %q, %v", resp, err)
	}
	if n := c.Opened(); n != 2 {
		t.Fatalf("%d streams opened, want 2", n)
	}

	// Another peer: the stream to the first ends.
	other := newTestHost(t, t.TempDir(), srv.Config().Secret)
	HandleSession(other.Host, sessionProto, echoHandler, SessionOptions{StreamOptions: StreamOptions{MaxMessageSize: 64}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.ConnectAddr(ctx, addrOf(t, other)); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionRequest(t, c, other.ID(), "c"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the stream to the first peer to end", func() bool { return openStreams(srv, cli.ID(), sessionProto) == 0 })
	if n := openStreams(other, cli.ID(), sessionProto); n != 1 {
		t.Fatalf("the new peer holds %d streams, want 1", n)
	}
}

// TestSessionOneStreamPerPeer: a peer's second stream ends its first on
// the server, so a peer holds at most one; the first's owner reopens.
func TestSessionOneStreamPerPeer(t *testing.T) {
	srv, cli := sessionPair(t, 0)
	c1 := NewSession(cli.Host, sessionProto, "", StreamOptions{MaxMessageSize: 64})
	c2 := NewSession(cli.Host, sessionProto, "", StreamOptions{MaxMessageSize: 64})
	defer c1.Close()
	defer c2.Close()
	for _, c := range []*Session{c1, c2} {
		if _, err := sessionRequest(t, c, srv.ID(), "a"); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "one stream of the peer on the server", func() bool { return openStreams(srv, cli.ID(), sessionProto) == 1 })
	if resp, err := sessionRequest(t, c1, srv.ID(), "b"); err != nil || string(resp) != "echo:b" {
		t.Fatalf("the first session after its stream ended: %q, %v", resp, err)
	}
	if n := c1.Opened(); n != 2 {
		t.Fatalf("the first session opened %d streams, want 2", n)
	}
}

// TestSessionFallback: a peer that serves only the one-shot protocol (an
// older version) is asked on it, a stream per request.
func TestSessionFallback(t *testing.T) {
	psk := mustSecret(t)
	srv := newTestHost(t, t.TempDir(), psk)
	cli := newTestHost(t, t.TempDir(), psk)
	Handle(srv.Host, echoProto, echoHandler, StreamOptions{Logger: quietLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.ConnectAddr(ctx, addrOf(t, srv)); err != nil {
		t.Fatal(err)
	}
	c := NewSession(cli.Host, sessionProto, echoProto, StreamOptions{})
	for _, req := range []string{"a", "b"} {
		if resp, err := sessionRequest(t, c, srv.ID(), req); err != nil || string(resp) != "echo:"+req {
			t.Fatalf("%s: %q, %v", req, resp, err)
		}
	}
	if _, err := sessionRequest(t, c, srv.ID(), "fail-coded"); Code(err) != "not_leader" {
		t.Fatalf("refusal on the fallback: %v", err)
	}
	if n := c.Opened(); n != 0 {
		t.Fatalf("%d session streams opened with a peer that has no session protocol", n)
	}
}
