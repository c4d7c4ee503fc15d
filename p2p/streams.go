package p2p

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Wire format of one request/response exchange on a fresh stream:
//
//	request:  uvarint(len) payload                   then the requester closes its write side
//	response: uvarint(len) status payload            status 0 = ok, 1 = error
//
// An error payload is JSON {"code": "...", "message": "..."}. Every frame is
// bounded by a maximum size; a larger declared length is rejected before any
// of the payload is read.

// Defaults for request/response streams.
const (
	DefaultMaxMessageSize = 4 << 20
	DefaultRequestTimeout = 30 * time.Second
)

// Stable error codes carried by *Error. Handlers may use their own codes too.
const (
	CodeBadRequest  = "bad_request"
	CodeTooLarge    = "too_large"
	CodeTruncated   = "truncated"
	CodeInternal    = "internal"
	CodeTimeout     = "timeout"
	CodeUnavailable = "unavailable"
	CodeCanceled    = "canceled"
)

// Local framing errors. Code maps them to CodeTooLarge and CodeTruncated.
var (
	ErrTooLarge  = errors.New("frame exceeds the maximum message size")
	ErrTruncated = errors.New("frame truncated")
	// ErrUnreachable wraps a failure to open the stream: the request was
	// never delivered, so the caller may safely send it elsewhere.
	ErrUnreachable = errors.New("peer unreachable")
)

// Error is an error reported by the remote handler (or built by a handler to
// be sent): a stable machine-readable Code and a human-readable Message.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Errorf builds an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Code returns the stable code of err: the code of a wrapped *Error, else the
// code of a known local failure, else CodeUnavailable for network failures
// (dial, stream reset). It returns "" for nil.
func Code(err error) string {
	var (
		e    *Error
		nerr net.Error
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, ErrTruncated):
		return CodeTruncated
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return CodeTimeout
	case errors.As(err, &nerr) && nerr.Timeout():
		return CodeTimeout
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	}
	return CodeUnavailable
}

// HandlerFunc serves one request. remote is the authenticated peer that
// opened the stream (its key was verified by the security handshake). An
// *Error return is sent with its code; any other error is sent as
// CodeInternal with its message.
type HandlerFunc func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error)

// StreamOptions bound one protocol's frames and time.
type StreamOptions struct {
	// MaxMessageSize bounds every request and response payload
	// (default DefaultMaxMessageSize).
	MaxMessageSize int
	// Timeout bounds a whole exchange when the context has no earlier
	// deadline, and a handler's run (default DefaultRequestTimeout).
	Timeout time.Duration
	// Logger receives handler failures (default slog.Default()).
	Logger *slog.Logger
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

const (
	statusOK  byte = 0
	statusErr byte = 1
)

// Handle registers fn for protocol proto on h. Each request runs on its own
// stream and goroutine, with a context cancelled after opts.Timeout.
func Handle(h host.Host, proto protocol.ID, fn HandlerFunc, opts StreamOptions) {
	opts = opts.withDefaults()
	h.SetStreamHandler(proto, func(s network.Stream) {
		serveStream(s, fn, opts)
	})
}

func serveStream(s network.Stream, fn HandlerFunc, opts StreamOptions) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	deadline := time.Now().Add(opts.Timeout)
	_ = s.SetDeadline(deadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	req, err := readFrame(bufio.NewReader(s), opts.MaxMessageSize)
	if err != nil {
		code := frameErrorCode(err)
		// The deferred Close also closes the read side, so the rest of an
		// oversized payload is discarded, never read.
		_ = writeResponse(s, nil, Errorf(code, "read request: %v", err), opts.MaxMessageSize)
		return
	}
	resp, herr := fn(ctx, remote, req)
	if herr != nil {
		var e *Error
		if !errors.As(herr, &e) {
			e = &Error{Code: CodeInternal, Message: herr.Error()}
		}
		herr = e
	}
	if err := writeResponse(s, resp, herr, opts.MaxMessageSize); err != nil {
		opts.Logger.Warn("p2p: write response", "protocol", s.Protocol(), "peer", remote, "err", err)
		_ = s.Reset()
	}
}

func writeResponse(w io.Writer, resp []byte, herr error, limit int) error {
	if herr != nil {
		var e *Error
		if !errors.As(herr, &e) {
			e = &Error{Code: CodeInternal, Message: herr.Error()}
		}
		b, _ := json.Marshal(e)
		if len(b) > limit {
			// A small limit still carries the code.
			b, _ = json.Marshal(Error{Code: e.Code})
		}
		return writeFrame(w, append([]byte{statusErr}, b...), limit+1)
	}
	if len(resp) > limit {
		b, _ := json.Marshal(Errorf(CodeTooLarge, "response of %d bytes exceeds %d", len(resp), limit))
		return writeFrame(w, append([]byte{statusErr}, b...), limit+1)
	}
	return writeFrame(w, append([]byte{statusOK}, resp...), limit+1)
}

// Request opens a stream to p for proto, sends req and returns the response
// payload. A remote failure is returned as *Error (use errors.As or Code).
// The exchange ends at the context's deadline, or after opts.Timeout when the
// context has none; cancelling the context resets the stream.
func Request(ctx context.Context, h host.Host, p peer.ID, proto protocol.ID, req []byte, opts StreamOptions) ([]byte, error) {
	opts = opts.withDefaults()
	if len(req) > opts.MaxMessageSize {
		return nil, fmt.Errorf("request %s to %s: %d bytes: %w", proto, p, len(req), ErrTooLarge)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	s, err := h.NewStream(ctx, p, proto)
	if err != nil {
		return nil, fmt.Errorf("request %s to %s: open stream: %w: %w", proto, p, ErrUnreachable, err)
	}
	defer s.Close()
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()

	resp, err := exchange(s, req, opts.MaxMessageSize)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("request %s to %s: %w", proto, p, err)
	}
	return resp, nil
}

func exchange(s network.Stream, req []byte, limit int) ([]byte, error) {
	werr := writeFrame(s, req, limit)
	if werr == nil {
		werr = s.CloseWrite()
	}
	// Even when sending failed, the handler may have answered (it rejects
	// an oversized request before reading it): that answer says more than
	// the write error.
	frame, err := readFrame(bufio.NewReader(s), limit+1)
	if err != nil {
		if werr != nil {
			return nil, fmt.Errorf("send: %w", werr)
		}
		return nil, fmt.Errorf("read response: %w", err)
	}
	return decodeResponse(frame)
}

// decodeResponse splits a response frame into its payload, or the
// remote's *Error.
func decodeResponse(frame []byte) ([]byte, error) {
	if len(frame) == 0 {
		return nil, fmt.Errorf("read response: empty frame: %w", ErrTruncated)
	}
	switch frame[0] {
	case statusOK:
		return frame[1:], nil
	case statusErr:
		var e Error
		if err := json.Unmarshal(frame[1:], &e); err != nil || e.Code == "" {
			return nil, fmt.Errorf("read response: malformed error frame")
		}
		return nil, &e
	}
	return nil, fmt.Errorf("read response: unknown status %d", frame[0])
}

// writeFrame writes uvarint(len(b)) followed by b.
func writeFrame(w io.Writer, b []byte, limit int) error {
	if len(b) > limit {
		return fmt.Errorf("%d bytes: %w", len(b), ErrTooLarge)
	}
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], uint64(len(b)))
	// One write keeps small frames in one packet.
	buf := make([]byte, 0, n+len(b))
	buf = append(buf, hdr[:n]...)
	buf = append(buf, b...)
	_, err := w.Write(buf)
	return err
}

// readFrame reads one frame of at most limit bytes. A declared length above
// the limit is rejected before reading the payload; a stream that ends inside
// the header or the payload gives ErrTruncated; a stream that ends before any
// byte gives ErrTruncated too (a request/response peer always sends a frame).
func readFrame(r *bufio.Reader, limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("length header: %w", ErrTruncated)
		}
		return nil, fmt.Errorf("length header: %w", err)
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("declared %d bytes, limit %d: %w", n, limit, ErrTooLarge)
	}
	// Grow with the bytes that actually arrive rather than trusting the
	// declared length with an up-front allocation.
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("payload of %d bytes, got %d: %w", n, buf.Len(), ErrTruncated)
		}
		return nil, fmt.Errorf("payload: %w", err)
	}
	return buf.Bytes(), nil
}

// frameErrorCode is the stable code a request that could not be read is
// refused with.
func frameErrorCode(err error) string {
	switch {
	case errors.Is(err, ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, ErrTruncated):
		return CodeTruncated
	}
	return CodeBadRequest
}
