package p2p

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// A session protocol carries many request/response exchanges on one
// long-lived stream, for a peer that sends small requests often (a
// heartbeat every few seconds to the leader): opening a stream per request
// costs both sides a multistream negotiation, a yamux stream and a
// goroutine each time, which at a hundred senders dominated the
// receiver's idle CPU. The frames are Request's (uvarint(len) payload;
// uvarint(len) status payload), the requester just does not close its
// write side after a request. Every request is checked as if it came
// alone: the handler sees the stream's authenticated remote peer for each.
//
// A refusal (an error response) ends the stream: the requester opens a
// new one for its next request. So a peer that may not use the protocol
// (a non-member) cannot hold a stream open by sending requests that are
// refused, and a requester's state is simply "a stream or none".

// SessionOptions bound a session protocol on the serving side.
type SessionOptions struct {
	StreamOptions
	// Idle ends a stream on which no request arrived for this long
	// (default 5 minutes). The first request must arrive within
	// StreamOptions.Timeout.
	Idle time.Duration
}

// HandleSession registers fn for the session protocol proto on h (see
// above). A peer keeps at most one stream of proto open: its new stream
// ends the previous one.
func HandleSession(h host.Host, proto protocol.ID, fn HandlerFunc, opts SessionOptions) {
	opts.StreamOptions = opts.StreamOptions.withDefaults()
	if opts.Idle <= 0 {
		opts.Idle = 5 * time.Minute
	}
	srv := &sessionServer{fn: fn, opts: opts, open: map[peer.ID]network.Stream{}}
	h.SetStreamHandler(proto, srv.serve)
}

type sessionServer struct {
	fn   HandlerFunc
	opts SessionOptions

	mu   sync.Mutex
	open map[peer.ID]network.Stream
}

// adopt makes s remote's one stream, ending the one it replaces.
func (srv *sessionServer) adopt(remote peer.ID, s network.Stream) {
	srv.mu.Lock()
	old := srv.open[remote]
	srv.open[remote] = s
	srv.mu.Unlock()
	if old != nil {
		_ = old.Reset()
	}
}

// drop forgets s if it is still remote's stream.
func (srv *sessionServer) drop(remote peer.ID, s network.Stream) {
	srv.mu.Lock()
	if srv.open[remote] == s {
		delete(srv.open, remote)
	}
	srv.mu.Unlock()
}

func (srv *sessionServer) serve(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	r := bufio.NewReader(s)
	wait := srv.opts.Timeout
	adopted := false
	defer func() {
		if adopted {
			srv.drop(remote, s)
		}
	}()
	for {
		_ = s.SetReadDeadline(time.Now().Add(wait))
		if _, err := r.Peek(1); err != nil {
			// The requester closed its side, went idle too long, or
			// the stream was reset: no request was cut short.
			return
		}
		if !adopted {
			// Adopted before its first answer goes out, so that of two
			// streams of a peer the later one served stays. A refused
			// stream ends and is dropped at once.
			srv.adopt(remote, s)
			adopted = true
		}
		if !srv.serveOne(s, r, remote) {
			return
		}
		wait = srv.opts.Idle
	}
}

// serveOne reads, serves and answers one request; false when the stream
// ends (a bad frame, a refusal, a failed write).
func (srv *sessionServer) serveOne(s network.Stream, r *bufio.Reader, remote peer.ID) bool {
	deadline := time.Now().Add(srv.opts.Timeout)
	_ = s.SetDeadline(deadline)
	req, err := readFrame(r, srv.opts.MaxMessageSize)
	if err != nil {
		code := frameErrorCode(err)
		// The stream ends: the rest of an oversized payload is never read.
		_ = writeResponse(s, nil, Errorf(code, "read request: %v", err), srv.opts.MaxMessageSize)
		return false
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	resp, herr := srv.fn(ctx, remote, req)
	cancel()
	if err := writeResponse(s, resp, herr, srv.opts.MaxMessageSize); err != nil {
		srv.opts.Logger.Debug("p2p: write session response", "protocol", s.Protocol(), "peer", remote, "err", err)
		_ = s.Reset()
		return false
	}
	return herr == nil && len(resp) <= srv.opts.MaxMessageSize
}

// Session is the requesting side of a session protocol: it keeps one
// stream to the peer it last sent to, opens it on the first request,
// and opens another when the stream failed, was refused, or the
// requests go to another peer. Safe for concurrent use (requests are
// sent one at a time).
type Session struct {
	h        host.Host
	proto    protocol.ID
	fallback protocol.ID
	opts     StreamOptions

	mu     sync.Mutex
	to     peer.ID
	s      network.Stream
	r      *bufio.Reader
	opened int
}

// NewSession returns a session for proto on h. fallback, when set, is a
// request/response protocol (Handle) with the same messages, used with a
// peer that does not serve proto (an older version): one stream per
// request there.
func NewSession(h host.Host, proto, fallback protocol.ID, opts StreamOptions) *Session {
	return &Session{h: h, proto: proto, fallback: fallback, opts: opts.withDefaults()}
}

// Request sends req to p and returns the response payload, like the
// package's Request. Requests must be safe to repeat: a request on a
// reused stream that failed before any answer (the server had ended the
// stream) is sent once more on a new stream.
func (c *Session) Request(ctx context.Context, p peer.ID, req []byte) ([]byte, error) {
	if len(req) > c.opts.MaxMessageSize {
		return nil, fmt.Errorf("request %s to %s: %d bytes: %w", c.proto, p, len(req), ErrTooLarge)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s != nil && c.to != p {
		c.closeLocked()
	}
	reused := c.s != nil
	resp, err := c.requestLocked(ctx, p, req)
	if err != nil && reused && ctx.Err() == nil && !isRemote(err) {
		resp, err = c.requestLocked(ctx, p, req)
	}
	if err != nil {
		return nil, fmt.Errorf("request %s to %s: %w", c.proto, p, err)
	}
	return resp, nil
}

// isRemote reports whether err is the remote handler's answer.
func isRemote(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func (c *Session) requestLocked(ctx context.Context, p peer.ID, req []byte) ([]byte, error) {
	if c.s == nil {
		protos := []protocol.ID{c.proto}
		if c.fallback != "" {
			protos = append(protos, c.fallback)
		}
		s, err := c.h.NewStream(ctx, p, protos...)
		if err != nil {
			return nil, fmt.Errorf("open stream: %w: %w", ErrUnreachable, err)
		}
		if s.Protocol() != c.proto {
			// An older peer: one exchange, then the stream ends.
			defer s.Close()
			return c.exchangeOn(ctx, s, func() ([]byte, error) { return exchange(s, req, c.opts.MaxMessageSize) })
		}
		c.to, c.s, c.r = p, s, bufio.NewReader(s)
		c.opened++
	}
	s, r := c.s, c.r
	resp, err := c.exchangeOn(ctx, s, func() ([]byte, error) { return sessionExchange(s, r, req, c.opts.MaxMessageSize) })
	if err != nil {
		// A refusal ends the stream on the server's side; any other
		// failure leaves it in an unknown state.
		c.closeLocked()
	}
	return resp, err
}

// exchangeOn runs one exchange on s within ctx: the stream's deadline is
// the context's, and cancelling the context resets the stream.
func (c *Session) exchangeOn(ctx context.Context, s network.Stream, run func() ([]byte, error)) ([]byte, error) {
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	resp, err := run()
	if !stop() || ctx.Err() != nil {
		if err == nil {
			err = ctx.Err()
		} else {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, err
	}
	return resp, err
}

// sessionExchange writes one request on s and reads its response.
func sessionExchange(s network.Stream, r *bufio.Reader, req []byte, limit int) ([]byte, error) {
	if err := writeFrame(s, req, limit); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	frame, err := readFrame(r, limit+1)
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	return decodeResponse(frame)
}

// Opened is the number of session streams opened so far (tests and
// benchmarks: a healthy session opens one per peer it talks to).
func (c *Session) Opened() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened
}

// Close ends the session's stream, if any. The session stays usable.
func (c *Session) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *Session) closeLocked() {
	if c.s != nil {
		_ = c.s.Close()
	}
	c.s, c.r, c.to = nil, nil, ""
}
