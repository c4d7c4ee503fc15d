package transfer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/internal/safeopen"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Protocols of the file transfers between peers. Each is a request/response
// exchange of the p2p package (length-prefixed, size-limited frames) with
// JSON bodies; large files travel in chunks of ChunkSize.
const (
	// ProtoBlob fetches a chunk of a task's input from the submitting
	// peer. Only the peer owning the machine the task is allocated to may
	// fetch it.
	ProtoBlob = "/coopgrid/blob/1.0.0"
	// ProtoOutputs pushes a chunk of an output file to the submitting
	// peer. Only the peer owning a machine the task ran on may push.
	ProtoOutputs = "/coopgrid/outputs/1.0.0"
	// ProtoLogs returns a task's captured stdout or stderr from the peer
	// that ran it; only the task's organisation may read them.
	ProtoLogs = "/coopgrid/logs/1.0.0"

	// ChunkSize is the most file data one frame carries (base64 in JSON
	// makes it about 1.4 MiB, well under p2p.DefaultMaxMessageSize).
	ChunkSize = 1 << 20
)

// Stable codes of the file protocols (beside the p2p package's).
const (
	CodeForbidden = "forbidden"
	CodeNotFound  = "not_found"
)

func protocolID(s string) protocol.ID { return protocol.ID(s) }

// blobStore keeps input files by content: DATA/blobs/<sha256 hex>.
type blobStore struct{ dir string }

func newBlobStore(dir string) (*blobStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &blobStore{dir: dir}, nil
}

// Digest is the name of an input in the blob store and in the ledger
// (ledger.Spec.InputDigests): the sha256 of its content in lowercase hex.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (s *blobStore) path(digest string) string { return filepath.Join(s.dir, digest) }

func (s *blobStore) has(digest string) bool {
	fi, err := os.Stat(s.path(digest))
	return err == nil && fi.Mode().IsRegular()
}

// put stores b and returns its digest. A blob already present is kept.
func (s *blobStore) put(b []byte) (string, error) {
	d := Digest(b)
	if s.has(d) {
		return d, nil
	}
	f, err := os.CreateTemp(s.dir, ".in-*")
	if err != nil {
		return "", fmt.Errorf("store input: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, s.path(d))
	}
	if werr != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("store input: %w", werr)
	}
	return d, nil
}

// read returns a blob after checking its content against its name (a
// corrupted file is removed, to be fetched again).
func (s *blobStore) read(digest string, limit int64) ([]byte, error) {
	if !ledger.ValidDigest(digest) {
		return nil, fmt.Errorf("blob %q: not a sha256 digest", digest)
	}
	f, err := os.Open(s.path(digest))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", digest, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("blob %s: larger than %d bytes", digest, limit)
	}
	if Digest(b) != digest {
		os.Remove(s.path(digest))
		return nil, fmt.Errorf("blob %s: content does not match its digest (removed)", digest)
	}
	return b, nil
}

// BlobRequest asks for up to ChunkSize bytes of a blob from Offset.
type BlobRequest struct {
	Task   string `json:"task"`
	Digest string `json:"digest"`
	Offset int64  `json:"offset"`
}

// BlobResponse carries a chunk of a blob and the blob's whole size.
type BlobResponse struct {
	Size int64  `json:"size"`
	Data []byte `json:"data"`
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	return nil
}

func (s *Service) handleBlob(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	var req BlobRequest
	if err := decodeStrict(data, &req); err != nil {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "blob request: %v", err)
	}
	if !ledger.ValidDigest(req.Digest) || req.Offset < 0 {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "blob request: bad digest or offset")
	}
	if !s.members.IsMember(remote) {
		return nil, p2p.Errorf(CodeForbidden, "peer %s is not a member of the federation", remote)
	}
	_, err := s.tasks.Task(ctx, req.Task, func(t ledger.Task, l *ledger.Ledger) error {
		found := false
		for _, d := range t.Spec.InputDigests {
			found = found || d == req.Digest
		}
		if !found {
			return p2p.Errorf(CodeNotFound, "task %s has no input %s", t.ID, req.Digest)
		}
		if !t.State.Placed() {
			return p2p.Errorf(CodeForbidden, "task %s is %s, allocated to no machine", t.ID, t.State)
		}
		m, _ := l.Machine(t.Machine)
		o, _ := l.Org(m.Org)
		if o.Peer != remote.String() {
			return p2p.Errorf(CodeForbidden, "task %s is allocated to %s, not to a machine of peer %s", t.ID, t.Machine, remote)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f, err := os.Open(s.blobs.path(req.Digest))
	if err != nil {
		return nil, p2p.Errorf(CodeNotFound, "input %s is not stored here", req.Digest)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", req.Digest, err)
	}
	if req.Offset > fi.Size() {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "offset %d beyond the size %d", req.Offset, fi.Size())
	}
	buf := make([]byte, min(ChunkSize, fi.Size()-req.Offset))
	if _, err := f.ReadAt(buf, req.Offset); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("blob %s: %w", req.Digest, err)
	}
	return json.Marshal(BlobResponse{Size: fi.Size(), Data: buf})
}

// fetchBlob fetches a blob from peer from, verifies it and stores it.
func (s *Service) fetchBlob(ctx context.Context, from peer.ID, task, digest string, limit int64) error {
	if s.blobs.has(digest) {
		return nil
	}
	if from == s.self {
		return backoff.Permanent(fmt.Errorf("input %s of task %s is missing from this peer's own store", digest, task))
	}
	f, err := os.CreateTemp(s.blobs.dir, ".fetch-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	defer f.Close()
	h := sha256.New()
	var off, size int64 = 0, -1
	for size < 0 || off < size {
		req, _ := json.Marshal(BlobRequest{Task: task, Digest: digest, Offset: off})
		resp, err := s.host.Request(ctx, from, protocolID(ProtoBlob), req)
		if err != nil {
			switch p2p.Code(err) {
			case CodeForbidden, CodeNotFound, p2p.CodeBadRequest:
				return backoff.Permanent(fmt.Errorf("fetch input %s: %w", digest, err))
			}
			return fmt.Errorf("fetch input %s: %w", digest, err)
		}
		var br BlobResponse
		if err := decodeStrict(resp, &br); err != nil {
			return fmt.Errorf("fetch input %s: bad response: %w", digest, err)
		}
		switch {
		case br.Size > limit:
			return backoff.Permanent(fmt.Errorf("input %s is %d bytes, more than the %d allowed", digest, br.Size, limit))
		case size >= 0 && br.Size != size:
			return fmt.Errorf("fetch input %s: size changed from %d to %d", digest, size, br.Size)
		case len(br.Data) > ChunkSize || off+int64(len(br.Data)) > br.Size:
			return fmt.Errorf("fetch input %s: chunk overruns the size", digest)
		case len(br.Data) == 0 && off < br.Size:
			return fmt.Errorf("fetch input %s: empty chunk at %d of %d", digest, off, br.Size)
		}
		size = br.Size
		if _, err := f.Write(br.Data); err != nil {
			return fmt.Errorf("fetch input %s: %w", digest, err)
		}
		h.Write(br.Data)
		off += int64(len(br.Data))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("fetch input %s: content hashes to %s", digest, got)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, s.blobs.path(digest))
}

// FetchInputs gets every input of t from the peer of t's organisation
// (retrying transient failures until Limits.FetchTimeout) and returns them
// by name.
func (s *Service) FetchInputs(ctx context.Context, t ledger.Task) (map[string][]byte, error) {
	if len(t.Spec.Inputs) == 0 {
		return nil, nil
	}
	if len(t.Spec.InputDigests) != len(t.Spec.Inputs) {
		return nil, fmt.Errorf("task %s names %d inputs without their digests: this peer cannot fetch them", t.ID, len(t.Spec.Inputs))
	}
	from, err := s.members.PeerOf(t.Org)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.limits.FetchTimeout)
	defer cancel()
	limit := s.limits.MaxInputBytes
	out := make(map[string][]byte, len(t.Spec.Inputs))
	var total int64
	for i, name := range t.Spec.Inputs {
		d := t.Spec.InputDigests[i]
		if err := s.fetchWithRetry(ctx, from, t.ID, name, d, limit-total); err != nil {
			return nil, err
		}
		b, err := s.blobs.read(d, limit-total)
		if err != nil {
			return nil, err
		}
		total += int64(len(b))
		out[name] = b
	}
	return out, nil
}

// Pacing of an input's fetch attempts: 100 ms doubling to 2 s, no jitter,
// for as long as the context lives.
const (
	fetchFirstPause = 100 * time.Millisecond
	fetchMaxPause   = 2 * time.Second
)

// fetchWithRetry fetches one input into the blob store, retrying transient
// failures until ctx ends; a permanent one (refused, too large) ends it at
// once.
func (s *Service) fetchWithRetry(ctx context.Context, from peer.ID, task, name, digest string, limit int64) error {
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = s.fetchBlob(ctx, from, task, digest, limit)
		return struct{}{}, last
	},
		backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: fetchFirstPause, Multiplier: 2, MaxInterval: fetchMaxPause}),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, _ time.Duration) {
			s.log.Debug("fetch input: retrying", "task", task, "input", name, "err", err)
		}))
	var permanent *backoff.PermanentError
	if err != nil && !errors.As(last, &permanent) {
		// Retry gave up on a transient failure: ctx ended.
		return fmt.Errorf("fetch input %q of task %s from %s: %w (last error: %v)", name, task, from, ctx.Err(), last)
	}
	return err
}

// OutputChunk is one piece of an output file pushed to the submitter.
type OutputChunk struct {
	Task    string `json:"task"`
	Machine string `json:"machine"`
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Offset  int64  `json:"offset"`
	Data    []byte `json:"data"`
}

// matchOutput says whether rel is covered by one of the patterns: a
// pattern matches the file or one of the directories above it (the
// executor's rule, docs/EXECUTOR.md).
func matchOutput(patterns []string, rel string) bool {
	for _, p := range patterns {
		for r := rel; r != "." && r != "/" && r != ""; r = path.Dir(r) {
			if ok, _ := path.Match(p, r); ok {
				return true
			}
		}
	}
	return false
}

// validOutputName accepts a clean relative path that stays inside the
// outputs directory and is not one of this peer's partial files.
func validOutputName(name string) bool {
	if name == "" || len(name) > ledger.MaxFileNameLen || strings.IndexByte(name, 0) >= 0 || strings.Contains(name, "\\") {
		return false
	}
	if path.IsAbs(name) || path.Clean(name) != name || name == "." || name == ".." || strings.HasPrefix(name, "../") {
		return false
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".incoming-") {
			return false
		}
	}
	return true
}

// outputDir is where this peer keeps the outputs of one of its tasks.
func (s *Service) outputDir(task string) string { return filepath.Join(s.dirs.Outputs, task) }

// HandleOutputs serves ProtoOutputs: it checks a pushed chunk against the
// ledger and stores it. New registers it; it is exported for tests that
// wrap it.
func (s *Service) HandleOutputs(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	var c OutputChunk
	if err := decodeStrict(data, &c); err != nil {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "output chunk: %v", err)
	}
	if !validOutputName(c.Name) {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "output name %q: want a clean relative path inside the task's directory", c.Name)
	}
	if c.Size < 0 || c.Offset < 0 || len(c.Data) > ChunkSize || c.Offset+int64(len(c.Data)) > c.Size {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "output chunk: size %d, offset %d and %d bytes do not fit", c.Size, c.Offset, len(c.Data))
	}
	if c.Size > s.limits.MaxOutputBytes {
		return nil, p2p.Errorf(p2p.CodeTooLarge, "output %q is %d bytes, more than the %d this peer accepts", c.Name, c.Size, s.limits.MaxOutputBytes)
	}
	if !s.members.IsMember(remote) {
		return nil, p2p.Errorf(CodeForbidden, "peer %s is not a member of the federation", remote)
	}
	_, err := s.tasks.Task(ctx, c.Task, func(t ledger.Task, l *ledger.Ledger) error {
		if t.Org != s.org {
			return p2p.Errorf(CodeForbidden, "task %s belongs to %q, not to this peer's %q", t.ID, t.Org, s.org)
		}
		ran := false
		for _, seg := range t.Segments {
			if seg.Machine == c.Machine {
				o, _ := l.Org(seg.MachineOrg)
				ran = ran || o.Peer == remote.String()
			}
		}
		if !ran {
			return p2p.Errorf(CodeForbidden, "task %s did not run on machine %q of peer %s", t.ID, c.Machine, remote)
		}
		if !matchOutput(t.Spec.Outputs, c.Name) {
			return p2p.Errorf(CodeForbidden, "%q matches none of task %s's output patterns", c.Name, t.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.storeOutputChunk(c); err != nil {
		return nil, err
	}
	return []byte("{}"), nil
}

// storeOutputChunk appends a chunk to the file's partial copy and moves it
// into place with its last chunk. Chunks must come in order.
func (s *Service) storeOutputChunk(c OutputChunk) error {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	dir := s.outputDir(c.Task)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	partial := filepath.Join(dir, ".incoming-"+Digest([]byte(c.Name))[:24])
	if c.Offset == 0 {
		// The whole task's outputs stay under the limit, counting this
		// file in place of an older copy of it.
		used, err := dirSize(dir, filepath.Join(dir, filepath.FromSlash(c.Name)))
		if err != nil {
			return fmt.Errorf("outputs: %w", err)
		}
		if used+c.Size > s.limits.MaxOutputBytes {
			return p2p.Errorf(p2p.CodeTooLarge, "task %s's outputs would take %d bytes, more than the %d this peer accepts", c.Task, used+c.Size, s.limits.MaxOutputBytes)
		}
		os.Remove(partial)
	}
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("outputs: %w", err)
	}
	if fi.Size() != c.Offset {
		f.Close()
		return p2p.Errorf(p2p.CodeBadRequest, "output %q: chunk at %d, but %d bytes arrived so far", c.Name, c.Offset, fi.Size())
	}
	_, werr := f.Write(c.Data)
	if werr == nil && c.Offset+int64(len(c.Data)) == c.Size {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("outputs: %w", werr)
	}
	if c.Offset+int64(len(c.Data)) < c.Size {
		return nil
	}
	final := filepath.Join(dir, filepath.FromSlash(c.Name))
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	if err := os.Rename(partial, final); err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	return nil
}

// dirSize sums the regular files under dir, except skip.
func dirSize(dir, skip string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		total += fi.Size()
		return nil
	})
	return total, err
}

// ShipOutputs sends a finished run's outputs to the task's organisation:
// copied locally when that is this peer, pushed over ProtoOutputs
// otherwise.
func (s *Service) ShipOutputs(ctx context.Context, t ledger.Task, machine string, outputs map[string]string) error {
	if len(outputs) == 0 {
		return nil
	}
	to, err := s.members.PeerOf(t.Org)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(outputs))
	for rel := range outputs {
		names = append(names, rel)
	}
	sort.Strings(names)
	for _, rel := range names {
		name := filepath.ToSlash(rel)
		if err := s.shipFile(ctx, to, t.ID, machine, name, outputs[rel]); err != nil {
			return fmt.Errorf("output %q: %w", name, err)
		}
	}
	return nil
}

func (s *Service) shipFile(ctx context.Context, to peer.ID, task, machine, name, src string) error {
	f, err := openOutput(src, name)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	buf := make([]byte, min(ChunkSize, max(size, 1)))
	var off int64
	for {
		k, rerr := io.ReadFull(f, buf[:min(int64(len(buf)), size-off)])
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			return rerr
		}
		c := OutputChunk{Task: task, Machine: machine, Name: name, Size: size, Offset: off, Data: buf[:k]}
		if to == s.self {
			if err := s.storeOutputChunk(c); err != nil {
				return err
			}
		} else {
			req, err := json.Marshal(c)
			if err != nil {
				return err
			}
			if _, err := s.host.Request(ctx, to, protocolID(ProtoOutputs), req); err != nil {
				return err
			}
		}
		off += int64(k)
		if off >= size || k == 0 {
			return nil
		}
	}
}

// openOutput opens an output the executor staged: src is a directory of
// its own joined with rel (executor.Result.Outputs), where the output
// copier, a process with no privilege the task lacked, put a copy of the
// task's file; the peer never reads the task's work directory itself.
// The task cannot reach the staging directory, yet nothing on the way is
// followed all the same: no symbolic link, nothing outside that
// directory, a regular file with one link only, owned by the owner of
// that directory (the peer) — read at the moment it is opened.
func openOutput(src, rel string) (*os.File, error) {
	rel = filepath.FromSlash(rel)
	root, ok := strings.CutSuffix(src, string(filepath.Separator)+rel)
	if !ok || root == "" {
		return nil, fmt.Errorf("output %s is not %s under a staging directory", src, rel)
	}
	f, err := safeopen.OpenOwned(root, rel, safeopen.OwnerOfRoot)
	if errors.Is(err, safeopen.ErrOwner) {
		return nil, fmt.Errorf("%w (the peer, who owns the staging directory): a staged output is the peer's own copy", err)
	}
	return f, err
}

// ListOutputs returns the outputs this peer holds for task, as absolute
// paths, sorted.
func (s *Service) ListOutputs(task string) []string {
	dir := s.outputDir(task)
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".incoming-") {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// LogsRequest asks for a task's captured stdout or stderr.
type LogsRequest struct {
	Task   string `json:"task"`
	Stream string `json:"stream"`
}

func (s *Service) handleLogs(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	var req LogsRequest
	if err := decodeStrict(data, &req); err != nil {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "logs request: %v", err)
	}
	if req.Stream != "stdout" && req.Stream != "stderr" {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "stream %q: want stdout or stderr", req.Stream)
	}
	if !s.members.IsMember(remote) {
		return nil, p2p.Errorf(CodeForbidden, "peer %s is not a member of the federation", remote)
	}
	_, err := s.tasks.Task(ctx, req.Task, func(t ledger.Task, l *ledger.Ledger) error {
		o, _ := l.Org(t.Org)
		if o.Peer != remote.String() {
			return p2p.Errorf(CodeForbidden, "task %s belongs to %q; only its peer may read its logs", t.ID, t.Org)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.ReadLocalLog(req.Task, req.Stream)
}

// ReadLocalLog returns the captured stream of the task's latest attempt on
// this peer, cut at MaxLogBytes.
func (s *Service) ReadLocalLog(task, stream string) ([]byte, error) {
	if !ValidTaskID(task) {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "task ID %q", task)
	}
	dir := filepath.Join(s.dirs.Tasks, task)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, p2p.Errorf(CodeNotFound, "no captured output of task %s on this peer (a simulated machine captures none)", task)
	}
	best := 0
	for _, e := range ents {
		if k, ok := strings.CutPrefix(e.Name(), "attempt-"); ok {
			if a, err := strconv.Atoi(k); err == nil && a > best {
				best = a
			}
		}
	}
	if best == 0 {
		return nil, p2p.Errorf(CodeNotFound, "no captured output of task %s on this peer", task)
	}
	f, err := os.Open(filepath.Join(dir, "attempt-"+strconv.Itoa(best), stream))
	if errors.Is(err, fs.ErrNotExist) {
		// The executor creates a stream's file with its first byte: the
		// task wrote nothing there.
		return []byte{}, nil
	}
	if err != nil {
		return nil, p2p.Errorf(CodeNotFound, "no %s for task %s: %v", stream, task, err)
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, s.limits.MaxLogBytes))
}

// ValidTaskID accepts the ledger's task IDs ("<org>-<n>"): 1-MaxTaskIDLen
// characters of [A-Za-z0-9._-] starting with a letter or digit, so never a
// path.
func ValidTaskID(s string) bool { return ledger.ValidIdent(s, ledger.MaxTaskIDLen) }
