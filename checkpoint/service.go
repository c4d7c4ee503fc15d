package checkpoint

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
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// ProtocolID is the replication protocol. Its wire format, on one libp2p
// stream per operation (a frame is uvarint(len) + JSON, at most
// maxControlFrame bytes):
//
//	push:  → {"op":"push","hash":H,"task":T,"size":N}
//	       ← {} (send it) | {"have":true} (already held: done) | {"code":…,"message":…}
//	       → N raw bytes, then the pusher closes its write side
//	       ← {} (verified and stored) | {"code":…,"message":…}
//	fetch: → {"op":"fetch","hash":H,"task":T}, then the fetcher closes its write side
//	       ← {"size":N} followed by N raw bytes | {"code":…,"message":…}
//
// Archives are streamed, not framed: p2p's request/response frames hold a
// message in memory and are bounded at 4 MiB by default, while an archive
// may be up to Limits.MaxArchiveBytes. Whoever receives an archive reads at
// most the declared size, hashes it as it arrives into a temporary file,
// and keeps it only if the hash matches and it passes Verify.
const ProtocolID protocol.ID = "/coopgrid/checkpoint/1.0.0"

// Op is a replication operation, as seen by the authorisation hook.
type Op string

// Operations.
const (
	// OpPush: the remote peer sends an archive for this peer to keep.
	OpPush Op = "push"
	// OpFetch: the remote peer asks for an archive this peer holds.
	OpFetch Op = "fetch"
)

// AuthFunc decides whether remote may perform op on the archive hash of
// task. It is called for every request before anything else is done; an
// error refuses the request and its message is sent to the remote peer with
// the code CodeForbidden (or the code of a *p2p.Error). The node supplies
// it, e.g. push: remote is a federation member and task is one of its
// organisation's tasks; fetch: task's checkpoint is hash and the task is
// assigned to a machine of remote's organisation.
type AuthFunc func(remote peer.ID, op Op, hash, task string) error

// Stable error codes sent by the server, besides p2p's CodeBadRequest,
// CodeTooLarge, CodeTruncated, CodeTimeout, CodeUnavailable (busy) and
// CodeInternal. The client returns them as *p2p.Error (use p2p.Code).
const (
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not_found"
	CodeHashMismatch = "hash_mismatch"
	CodeBadArchive   = "bad_archive"
	CodeStoreFull    = "store_full"
	CodeTaskQuota    = "task_quota"
)

// Replication defaults.
const (
	// DefaultCopies is the replication factor, counting this peer's copy.
	DefaultCopies = 2
	// MaxCopies is the most holders the ledger records for a checkpoint.
	MaxCopies              = 16
	DefaultTransferTimeout = 10 * time.Minute
	DefaultMaxConcurrent   = 4
	maxControlFrame        = 16 << 10
	requestTimeout         = 30 * time.Second
)

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Auth authorises incoming requests. nil refuses every request.
	Auth AuthFunc
	// TransferTimeout bounds one push or fetch, on both sides, when the
	// caller's context has no earlier deadline (default 10 min: 1 GiB at
	// 1.8 MB/s).
	TransferTimeout time.Duration
	// MaxConcurrent bounds the requests served at once; more are refused
	// with CodeUnavailable (default 4).
	MaxConcurrent int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Service serves ProtocolID from a Store and pushes and fetches archives
// to and from other peers.
type Service struct {
	h     host.Host
	store *Store
	cfg   ServiceConfig
	log   *slog.Logger
	sem   chan struct{}
}

// NewService registers the protocol handler on h. Close removes it.
func NewService(h host.Host, store *Store, cfg ServiceConfig) *Service {
	if cfg.TransferTimeout <= 0 {
		cfg.TransferTimeout = DefaultTransferTimeout
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{h: h, store: store, cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, cfg.MaxConcurrent)}
	h.SetStreamHandler(ProtocolID, s.serve)
	return s
}

// Close stops serving. Transfers in progress run to their end.
func (s *Service) Close() { s.h.RemoveStreamHandler(ProtocolID) }

// Store returns the store the service serves.
func (s *Service) Store() *Store { return s.store }

type request struct {
	Op   Op     `json:"op"`
	Hash string `json:"hash"`
	Task string `json:"task,omitempty"`
	Size int64  `json:"size,omitempty"`
}

type response struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Have    bool   `json:"have,omitempty"`
	Size    int64  `json:"size,omitempty"`
}

func (r response) err() error {
	if r.Code == "" {
		return nil
	}
	return &p2p.Error{Code: r.Code, Message: r.Message}
}

func writeMsg(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := binary.AppendUvarint(make([]byte, 0, len(b)+binary.MaxVarintLen64), uint64(len(b)))
	_, err = w.Write(append(buf, b...))
	return err
}

func readMsg(r *bufio.Reader, v any) error {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("length header: %w", p2p.ErrTruncated)
		}
		return fmt.Errorf("length header: %w", err)
	}
	if n > maxControlFrame {
		return fmt.Errorf("declared %d bytes, limit %d: %w", n, maxControlFrame, p2p.ErrTooLarge)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("message of %d bytes: %w", n, p2p.ErrTruncated)
		}
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("message: %w", err)
	}
	if dec.More() {
		return errors.New("message: trailing data")
	}
	return nil
}

// exactReader yields exactly n bytes of r: fewer is io.ErrUnexpectedEOF.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) {
		if e.left > 0 {
			return n, io.ErrUnexpectedEOF
		}
		err = nil
	}
	return n, err
}

// errResponse maps an error to its wire code.
func errResponse(err error) response {
	var pe *p2p.Error
	code := p2p.CodeInternal
	switch {
	case errors.As(err, &pe):
		return response{Code: pe.Code, Message: pe.Message}
	case errors.Is(err, ErrForbidden):
		code = CodeForbidden
	case errors.Is(err, ErrNotFound):
		code = CodeNotFound
	case errors.Is(err, ErrHashMismatch):
		code = CodeHashMismatch
	case errors.Is(err, ErrTooLarge), errors.Is(err, p2p.ErrTooLarge):
		code = p2p.CodeTooLarge
	case errors.Is(err, ErrBadArchive):
		code = CodeBadArchive
	case errors.Is(err, ErrStoreFull):
		code = CodeStoreFull
	case errors.Is(err, ErrTaskQuota):
		code = CodeTaskQuota
	case errors.Is(err, ErrBadHash):
		code = p2p.CodeBadRequest
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, p2p.ErrTruncated):
		code = p2p.CodeTruncated
	case errors.Is(err, context.DeadlineExceeded):
		code = p2p.CodeTimeout
	}
	return response{Code: code, Message: err.Error()}
}

func (s *Service) serve(st network.Stream) {
	defer st.Close()
	remote := st.Conn().RemotePeer()
	// A peer gets a short time to state its request, so that a silent
	// stream cannot hold a goroutine for a whole transfer's time.
	_ = st.SetDeadline(time.Now().Add(min(requestTimeout, s.cfg.TransferTimeout)))
	br := bufio.NewReader(st)
	var req request
	err := readMsg(br, &req)
	_ = st.SetDeadline(time.Now().Add(s.cfg.TransferTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TransferTimeout)
	defer cancel()
	if err != nil {
		resp := errResponse(err)
		if resp.Code == p2p.CodeInternal {
			resp.Code = p2p.CodeBadRequest
		}
		s.refuse(st, remote, req, resp)
		return
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		s.refuse(st, remote, req, response{Code: p2p.CodeUnavailable, Message: fmt.Sprintf("busy: %d transfers in progress", s.cfg.MaxConcurrent)})
		return
	}
	if err := validRequest(req); err != nil {
		s.refuse(st, remote, req, response{Code: p2p.CodeBadRequest, Message: err.Error()})
		return
	}
	if err := s.authorize(remote, req); err != nil {
		s.refuse(st, remote, req, errResponse(err))
		return
	}
	switch req.Op {
	case OpPush:
		err = s.servePush(ctx, st, br, req)
	case OpFetch:
		err = s.serveFetch(st, req)
	}
	if err != nil {
		s.log.Warn("checkpoint: request failed", "op", req.Op, "hash", req.Hash, "task", req.Task, "peer", remote, "err", err)
		return
	}
	s.log.Debug("checkpoint: request served", "op", req.Op, "hash", req.Hash, "task", req.Task, "peer", remote)
}

func (s *Service) refuse(st network.Stream, remote peer.ID, req request, resp response) {
	s.log.Warn("checkpoint: request refused", "op", req.Op, "hash", req.Hash, "task", req.Task, "peer", remote, "code", resp.Code, "err", resp.Message)
	_ = writeMsg(st, resp)
}

func validRequest(req request) error {
	if req.Op != OpPush && req.Op != OpFetch {
		return fmt.Errorf("unknown op %q", truncate(string(req.Op), 40))
	}
	if err := checkHash(req.Hash); err != nil {
		return err
	}
	if err := checkTask(req.Task); err != nil {
		return err
	}
	if req.Op == OpPush && req.Size <= 0 {
		return fmt.Errorf("push of %d bytes", req.Size)
	}
	if req.Op == OpFetch && req.Size != 0 {
		return errors.New("fetch request with a size")
	}
	return nil
}

func (s *Service) authorize(remote peer.ID, req request) error {
	if s.cfg.Auth == nil {
		return fmt.Errorf("%w: this peer has no authorisation hook", ErrForbidden)
	}
	if err := s.cfg.Auth(remote, req.Op, req.Hash, req.Task); err != nil {
		var pe *p2p.Error
		if errors.As(err, &pe) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrForbidden, err)
	}
	return nil
}

// servePush receives an archive. The outcome goes to the pusher; the
// returned error is for the log.
func (s *Service) servePush(ctx context.Context, st network.Stream, br *bufio.Reader, req request) error {
	if s.store.Has(req.Hash) {
		// Only attribute it to the task; nothing to receive.
		if _, err := s.store.Put(ctx, req.Task, strings.NewReader(""), req.Hash); err != nil {
			_ = writeMsg(st, errResponse(err))
			return err
		}
		return writeMsg(st, response{Have: true})
	}
	if err := s.store.Fits(req.Task, req.Size); err != nil {
		_ = writeMsg(st, errResponse(err))
		return err
	}
	if err := writeMsg(st, response{}); err != nil {
		return err
	}
	if _, err := s.store.Put(ctx, req.Task, &exactReader{r: br, left: req.Size}, req.Hash); err != nil {
		_ = writeMsg(st, errResponse(err))
		return err
	}
	return writeMsg(st, response{})
}

func (s *Service) serveFetch(st network.Stream, req request) error {
	f, size, err := s.store.Open(req.Hash)
	if err != nil {
		_ = writeMsg(st, errResponse(err))
		return err
	}
	defer f.Close()
	if err := writeMsg(st, response{Size: size}); err != nil {
		return err
	}
	if _, err := io.CopyN(st, f, size); err != nil {
		// The fetcher would see a truncated archive; tell it plainly.
		_ = st.Reset()
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// open starts a stream to p bounded by ctx, or by TransferTimeout when ctx
// has no deadline; cancelling ctx resets the stream.
func (s *Service) open(ctx context.Context, p peer.ID) (network.Stream, func(), error) {
	cancel := func() {}
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, s.cfg.TransferTimeout)
	}
	st, err := s.h.NewStream(ctx, p, ProtocolID)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("open stream: %w: %w", p2p.ErrUnreachable, err)
	}
	dl, _ := ctx.Deadline()
	_ = st.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	return st, func() { stop(); cancel(); _ = st.Close() }, nil
}

// Push sends the archive hash, held in the local store, to p, which keeps
// it for task. Refusals come back as *p2p.Error with a stable code.
func (s *Service) Push(ctx context.Context, p peer.ID, task, hash string) error {
	if err := s.push(ctx, p, task, hash); err != nil {
		return fmt.Errorf("push %s to %s: %w", hash, p, err)
	}
	return nil
}

func (s *Service) push(ctx context.Context, p peer.ID, task, hash string) error {
	if err := checkTask(task); err != nil {
		return err
	}
	f, size, err := s.store.Open(hash)
	if err != nil {
		return err
	}
	defer f.Close()
	st, done, err := s.open(ctx, p)
	if err != nil {
		return err
	}
	defer done()
	if err := writeMsg(st, request{Op: OpPush, Hash: hash, Task: task, Size: size}); err != nil {
		return withCtx(ctx, fmt.Errorf("send request: %w", err))
	}
	br := bufio.NewReader(st)
	var resp response
	if err := readMsg(br, &resp); err != nil {
		return withCtx(ctx, fmt.Errorf("read response: %w", err))
	}
	if err := resp.err(); err != nil || resp.Have {
		return err
	}
	if _, err := io.CopyN(st, f, size); err != nil {
		// The server may have refused mid-way; its answer says more.
		if rerr := readMsg(br, &resp); rerr == nil && resp.err() != nil {
			return resp.err()
		}
		return withCtx(ctx, fmt.Errorf("send archive: %w", err))
	}
	if err := st.CloseWrite(); err != nil {
		return withCtx(ctx, fmt.Errorf("send archive: %w", err))
	}
	resp = response{}
	if err := readMsg(br, &resp); err != nil {
		return withCtx(ctx, fmt.Errorf("read result: %w", err))
	}
	return resp.err()
}

func withCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// FetchFrom fetches the archive hash of task from p into the local store
// and returns its path. The bytes are verified (hash, then Verify) before
// they are kept.
func (s *Service) FetchFrom(ctx context.Context, p peer.ID, task, hash string) (string, error) {
	path, err := s.fetchFrom(ctx, p, task, hash)
	if err != nil {
		return "", fmt.Errorf("fetch %s from %s: %w", hash, p, err)
	}
	return path, nil
}

func (s *Service) fetchFrom(ctx context.Context, p peer.ID, task, hash string) (string, error) {
	if err := checkHash(hash); err != nil {
		return "", err
	}
	if err := checkTask(task); err != nil {
		return "", err
	}
	st, done, err := s.open(ctx, p)
	if err != nil {
		return "", err
	}
	defer done()
	if err := writeMsg(st, request{Op: OpFetch, Hash: hash, Task: task}); err != nil {
		return "", withCtx(ctx, fmt.Errorf("send request: %w", err))
	}
	if err := st.CloseWrite(); err != nil {
		return "", withCtx(ctx, fmt.Errorf("send request: %w", err))
	}
	br := bufio.NewReader(st)
	var resp response
	if err := readMsg(br, &resp); err != nil {
		return "", withCtx(ctx, fmt.Errorf("read response: %w", err))
	}
	if err := resp.err(); err != nil {
		return "", err
	}
	if max := s.store.Limits().MaxArchiveBytes; resp.Size <= 0 || resp.Size > max {
		_ = st.Reset()
		// Not an *ArchiveError: the holder's claim, not the archive, is
		// known to be wrong, and another holder may do better.
		return "", fmt.Errorf("holder announces %d bytes, limit %d: %w", resp.Size, max, ErrTooLarge)
	}
	if err := s.store.Fits(task, resp.Size); err != nil {
		_ = st.Reset()
		return "", err
	}
	a, err := s.store.Put(ctx, task, &exactReader{r: br, left: resp.Size}, hash)
	if err != nil {
		return "", withCtx(ctx, err)
	}
	return a.Path, nil
}

// Fetch makes sure the local store holds the archive hash of task and
// returns its path. If it is not held, it is fetched from each holder in
// order (skipping this peer) until one delivers bytes with the right hash
// that pass Verify: a holder that is down, refuses, or sends damaged bytes
// is skipped for the next. The error wraps ErrUnavailable when no holder
// delivered. If a holder delivered bytes with the right hash that fail
// Verify, the archive itself is bad: Fetch stops and returns that
// *ArchiveError, since every holder has the same bytes.
func (s *Service) Fetch(ctx context.Context, task, hash string, holders []peer.ID) (string, error) {
	if err := checkHash(hash); err != nil {
		return "", fmt.Errorf("fetch: %w", err)
	}
	if s.store.Has(hash) {
		a, err := s.store.Put(ctx, task, strings.NewReader(""), hash)
		if err != nil {
			return "", fmt.Errorf("fetch %s: %w", hash, err)
		}
		return a.Path, nil
	}
	var (
		errs  []error
		tried int
		seen  = map[peer.ID]bool{s.h.ID(): true}
	)
	for _, p := range holders {
		if seen[p] {
			continue
		}
		seen[p] = true
		tried++
		path, err := s.FetchFrom(ctx, p, task, hash)
		if err == nil {
			s.log.Info("checkpoint: fetched", "hash", hash, "task", task, "from", p)
			return path, nil
		}
		s.log.Warn("checkpoint: holder failed, trying the next", "hash", hash, "task", task, "holder", p, "err", err)
		if errors.Is(err, ErrBadArchive) && !errors.Is(err, ErrHashMismatch) {
			return "", err
		}
		if errors.Is(err, ErrStoreFull) || errors.Is(err, ErrTaskQuota) {
			return "", err // no other holder can change that
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("fetch %s: %w", hash, ctx.Err())
	}
	// The holders' errors are reported, not wrapped: a holder that sent
	// damaged bytes says nothing about the archive itself.
	return "", fmt.Errorf("fetch %s: %w: %d holders tried: %v", hash, ErrUnavailable, tried, errors.Join(errs...))
}

// Replicate pushes the archive hash of task, held in the local store, to
// candidates in order until copies peers hold it, counting this one
// (copies ≤ 0 means DefaultCopies; at most MaxCopies). It returns the
// holders, this peer first, which is what the ledger records. A candidate
// that is down or refuses is skipped for the next. If fewer than copies
// were reached the holders reached so far are returned with an error
// wrapping ErrNotEnoughCopies: the checkpoint is still usable, and the
// daemon records it with the holders it has.
func (s *Service) Replicate(ctx context.Context, task, hash string, candidates []peer.ID, copies int) ([]peer.ID, error) {
	if copies <= 0 {
		copies = DefaultCopies
	}
	copies = min(copies, MaxCopies)
	if err := checkHash(hash); err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	if !s.store.Has(hash) {
		return nil, fmt.Errorf("replicate %s: %w locally", hash, ErrNotFound)
	}
	self := s.h.ID()
	holders := []peer.ID{self}
	seen := map[peer.ID]bool{self: true}
	var errs []error
	for _, p := range candidates {
		if len(holders) >= copies {
			break
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		if err := s.Push(ctx, p, task, hash); err != nil {
			s.log.Warn("checkpoint: replica refused or unreachable, trying the next", "hash", hash, "task", task, "peer", p, "err", err)
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		holders = append(holders, p)
	}
	if len(holders) < copies {
		detail := "no other candidate"
		if len(errs) > 0 {
			detail = errors.Join(errs...).Error()
		}
		return holders, fmt.Errorf("replicate %s: %d of %d copies: %w: %s", hash, len(holders), copies, ErrNotEnoughCopies, detail)
	}
	return holders, nil
}
