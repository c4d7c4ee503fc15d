package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Dir holds the archives, e.g. DATA/checkpoints. Created 0700 if missing.
	Dir string
	// Limits bound each archive (zero fields: DefaultLimits).
	Limits Limits
	// MaxPeerBytes bounds the sum of all archives (default 16 GiB).
	MaxPeerBytes int64
	// MaxTaskBytes bounds the sum of the archives attributed to one task
	// (default 2 GiB: room for the current checkpoint and the next one
	// while it replaces it).
	MaxTaskBytes int64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Store defaults.
const (
	DefaultMaxPeerBytes = 16 << 30
	DefaultMaxTaskBytes = 2 << 30
)

// Store is a content-addressed directory of archives:
//
//	<dir>/<hash>.tar.gz   the archive, mode 0600, named by its hash
//	<dir>/<hash>.json     {"v":1,"tasks":[...]}: the tasks it belongs to
//	<dir>/.tmp-*          files being written (removed by NewStore)
//
// Every write goes to a temporary file that is synced, renamed into place,
// and followed by a sync of the directory, so a crash leaves either the
// whole archive or none of it. Everything Put accepts has the hash it
// claims and passes Verify. A Store is safe for concurrent use.
type Store struct {
	dir    string
	limits Limits
	maxPeer,
	maxTask int64
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]*storeEntry
	total   int64
}

type storeEntry struct {
	size  int64
	tasks []string // sorted
}

// Entry describes an archive in a Store.
type Entry struct {
	Hash  string
	Size  int64
	Tasks []string
}

const (
	archiveExt = ".tar.gz"
	metaExt    = ".json"
	tmpPrefix  = ".tmp-"
	maxMeta    = 1 << 20
)

type metaFile struct {
	V     int      `json:"v"`
	Tasks []string `json:"tasks"`
}

// NewStore opens (creating if needed) the store in cfg.Dir and indexes what
// it holds. Leftover temporary files are removed; a metadata file without
// its archive is removed; an unreadable metadata file is logged and its
// archive kept with no task attributed.
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("checkpoint store: Dir is required")
	}
	if err := cfg.Limits.validate(); err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	if cfg.MaxPeerBytes < 0 || cfg.MaxTaskBytes < 0 {
		return nil, fmt.Errorf("checkpoint store: negative size limit (peer %d, task %d)", cfg.MaxPeerBytes, cfg.MaxTaskBytes)
	}
	s := &Store{
		dir:     filepath.Clean(cfg.Dir),
		limits:  cfg.Limits.withDefaults(),
		maxPeer: cfg.MaxPeerBytes,
		maxTask: cfg.MaxTaskBytes,
		log:     cfg.Logger,
		entries: map[string]*storeEntry{},
	}
	if s.maxPeer == 0 {
		s.maxPeer = DefaultMaxPeerBytes
	}
	if s.maxTask == 0 {
		s.maxTask = DefaultMaxTaskBytes
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	metas := map[string]string{}
	for _, e := range ents {
		n := e.Name()
		p := filepath.Join(s.dir, n)
		switch {
		case strings.HasPrefix(n, tmpPrefix):
			removeTree(p)
		case strings.HasSuffix(n, archiveExt) && ValidHash(strings.TrimSuffix(n, archiveExt)) && e.Type().IsRegular():
			info, err := e.Info()
			if err != nil {
				return nil, fmt.Errorf("checkpoint store: %w", err)
			}
			s.entries[strings.TrimSuffix(n, archiveExt)] = &storeEntry{size: info.Size()}
			s.total += info.Size()
		case strings.HasSuffix(n, metaExt) && ValidHash(strings.TrimSuffix(n, metaExt)):
			metas[strings.TrimSuffix(n, metaExt)] = p
		default:
			s.log.Warn("checkpoint store: ignoring unknown file", "path", p)
		}
	}
	for h, p := range metas {
		e, ok := s.entries[h]
		if !ok {
			_ = os.Remove(p)
			continue
		}
		tasks, err := readMeta(p)
		if err != nil {
			s.log.Warn("checkpoint store: unreadable metadata, no task attributed", "path", p, "err", err)
			continue
		}
		e.tasks = tasks
	}
	return s, nil
}

func readMeta(p string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMeta+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxMeta {
		return nil, fmt.Errorf("over %d bytes", maxMeta)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m metaFile
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m.V != 1 {
		return nil, fmt.Errorf("version %d", m.V)
	}
	for _, t := range m.Tasks {
		if err := checkTask(t); err != nil || t == "" {
			return nil, fmt.Errorf("task %q: bad ID", truncate(t, 80))
		}
	}
	slices.Sort(m.Tasks)
	return slices.Compact(m.Tasks), nil
}

// checkTask validates a task ID as the executor does: 1-128 characters of
// [A-Za-z0-9._-] starting with a letter or digit. "" means "no task".
func checkTask(t string) error {
	if t == "" {
		return nil
	}
	if len(t) > 128 {
		return fmt.Errorf("task ID of %d characters, limit 128", len(t))
	}
	for i, c := range t {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("task ID %q: want [A-Za-z0-9][A-Za-z0-9._-]*", truncate(t, 80))
		}
	}
	return nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Limits returns the archive limits (defaults applied).
func (s *Store) Limits() Limits { return s.limits }

func (s *Store) archivePath(h string) string { return filepath.Join(s.dir, h+archiveExt) }
func (s *Store) metaPath(h string) string    { return filepath.Join(s.dir, h+metaExt) }

// Has reports whether the store holds the archive.
func (s *Store) Has(hash string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.entries[hash]
	return ok
}

// Path returns the archive's file, or ErrNotFound.
func (s *Store) Path(hash string) (string, error) {
	if err := checkHash(hash); err != nil {
		return "", err
	}
	if !s.Has(hash) {
		return "", fmt.Errorf("%s: %w", hash, ErrNotFound)
	}
	return s.archivePath(hash), nil
}

// Open opens the archive for reading and returns its size. The file stays
// readable after a concurrent Delete (Unix semantics).
func (s *Store) Open(hash string) (*os.File, int64, error) {
	p, err := s.Path(hash)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%s: %w", hash, ErrNotFound)
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// List returns every archive, sorted by hash.
func (s *Store) List() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.entries))
	for h, e := range s.entries {
		out = append(out, Entry{Hash: h, Size: e.size, Tasks: slices.Clone(e.tasks)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hash < out[j].Hash })
	return out
}

// Usage returns the bytes held in all, and by the archives of task.
func (s *Store) Usage(task string) (total, ofTask int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.taskUsageLocked(task)
}

func (s *Store) taskUsageLocked(task string) int64 {
	if task == "" {
		return 0
	}
	var n int64
	for _, e := range s.entries {
		if _, ok := slices.BinarySearch(e.tasks, task); ok {
			n += e.size
		}
	}
	return n
}

// Fits reports whether an archive of size bytes for task would fit within
// the limits now: ErrTooLarge, ErrStoreFull or ErrTaskQuota otherwise. The
// replication server asks before receiving an archive; the final word is
// the check made when the archive is committed.
func (s *Store) Fits(task string, size int64) error {
	if size > s.limits.MaxArchiveBytes {
		return badf(ErrTooLarge, "archive of %d bytes, limit %d", size, s.limits.MaxArchiveBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fitsLocked(task, size)
}

func (s *Store) fitsLocked(task string, size int64) error {
	if s.total+size > s.maxPeer {
		return fmt.Errorf("%w: %d bytes held + %d would pass the peer's limit of %d bytes", ErrStoreFull, s.total, size, s.maxPeer)
	}
	if u := s.taskUsageLocked(task); task != "" && u+size > s.maxTask {
		return fmt.Errorf("%w: task %s holds %d bytes + %d would pass its limit of %d bytes", ErrTaskQuota, task, u, size, s.maxTask)
	}
	return nil
}

// PackDir packs the checkpoint directory dir of task into the store (see
// Pack) and returns the archive, with Path set. Packing the same content
// twice gives the same archive, stored once.
func (s *Store) PackDir(ctx context.Context, task, dir string) (Archive, error) {
	if err := checkTask(task); err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(s.dir, tmpPrefix+"pack-*")
	if err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	defer removeTmp(tmp)
	a, err := Pack(ctx, dir, tmp, s.limits)
	if err != nil {
		return Archive{}, err
	}
	if err := s.commit(task, a.Hash, tmp, a.Size); err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	a.Path = s.archivePath(a.Hash)
	return a, nil
}

// Put stores an archive read from r for task ("" attributes it to no
// task). When wantHash is set, the bytes must hash to it (ErrHashMismatch
// otherwise), and if the store already holds wantHash, r is not read at
// all and only the task is added. Every archive is checked as Verify does
// before it is kept: Put never stores bytes that Unpack would refuse.
func (s *Store) Put(ctx context.Context, task string, r io.Reader, wantHash string) (Archive, error) {
	if err := checkTask(task); err != nil {
		return Archive{}, fmt.Errorf("put: %w", err)
	}
	if wantHash != "" {
		if err := checkHash(wantHash); err != nil {
			return Archive{}, fmt.Errorf("put: %w", err)
		}
		if a, ok, err := s.addTask(task, wantHash); ok || err != nil {
			if err != nil {
				return Archive{}, fmt.Errorf("put %s: %w", wantHash, err)
			}
			return a, nil
		}
	}
	tmp, err := os.CreateTemp(s.dir, tmpPrefix+"put-*")
	if err != nil {
		return Archive{}, fmt.Errorf("put: %w", err)
	}
	defer removeTmp(tmp)
	h := newHasher()
	n, err := io.Copy(io.MultiWriter(tmp, h), ctxReader{ctx, io.LimitReader(r, s.limits.MaxArchiveBytes+1)})
	if err != nil {
		return Archive{}, fmt.Errorf("put: receive: %w", err)
	}
	if n > s.limits.MaxArchiveBytes {
		return Archive{}, fmt.Errorf("put: %w", badf(ErrTooLarge, "archive over %d bytes", s.limits.MaxArchiveBytes))
	}
	got := hashOf(h)
	if wantHash != "" && got != wantHash {
		return Archive{}, fmt.Errorf("put: %w", badf(ErrHashMismatch, "received %d bytes hashing to %s, want %s", n, got, wantHash))
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return Archive{}, fmt.Errorf("put: %w", err)
	}
	st, err := scan(ctx, ctxReader{ctx, tmp}, s.limits, discardVisitor{})
	if err != nil {
		return Archive{}, fmt.Errorf("put %s: %w", got, err)
	}
	if err := s.commit(task, got, tmp, n); err != nil {
		return Archive{}, fmt.Errorf("put %s: %w", got, err)
	}
	return Archive{Hash: got, Size: n, Entries: st.Entries, ContentBytes: st.ContentBytes, Path: s.archivePath(got)}, nil
}

// addTask attributes an archive already held to task. ok says it was held.
func (s *Store) addTask(task, hash string) (Archive, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addTaskLocked(task, hash)
}

func (s *Store) addTaskLocked(task, hash string) (Archive, bool, error) {
	e, ok := s.entries[hash]
	if !ok {
		return Archive{}, false, nil
	}
	a := Archive{Hash: hash, Size: e.size, Path: s.archivePath(hash)}
	if task == "" {
		return a, true, nil
	}
	if _, has := slices.BinarySearch(e.tasks, task); has {
		return a, true, nil
	}
	if u := s.taskUsageLocked(task); u+e.size > s.maxTask {
		return Archive{}, true, fmt.Errorf("%w: task %s holds %d bytes + %d would pass its limit of %d bytes", ErrTaskQuota, task, u, e.size, s.maxTask)
	}
	tasks := insertSorted(e.tasks, task)
	if err := s.writeMeta(hash, tasks); err != nil {
		return Archive{}, true, err
	}
	e.tasks = tasks
	return a, true, nil
}

func insertSorted(ss []string, s string) []string {
	i, found := slices.BinarySearch(ss, s)
	if found {
		return ss
	}
	return slices.Insert(slices.Clone(ss), i, s)
}

// commit syncs tmp and renames it to the archive's name, after checking the
// limits, unless the archive is already there (then only the task is
// added). The metadata is written first: a crash in between leaves a
// metadata file without an archive, which NewStore removes.
func (s *Store) commit(task, hash string, tmp *os.File, size int64) error {
	if err := tmp.Sync(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok, err := s.addTaskLocked(task, hash); ok || err != nil {
		return err
	}
	if err := s.fitsLocked(task, size); err != nil {
		return err
	}
	var tasks []string
	if task != "" {
		tasks = []string{task}
	}
	if err := s.writeMeta(hash, tasks); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.archivePath(hash)); err != nil {
		_ = os.Remove(s.metaPath(hash))
		return err
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.entries[hash] = &storeEntry{size: size, tasks: tasks}
	s.total += size
	return nil
}

// writeMeta writes <hash>.json atomically.
func (s *Store) writeMeta(hash string, tasks []string) error {
	if tasks == nil {
		tasks = []string{}
	}
	b, err := json.Marshal(metaFile{V: 1, Tasks: tasks})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, tmpPrefix+"meta-*")
	if err != nil {
		return err
	}
	defer removeTmp(f)
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), s.metaPath(hash)); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// removeTmp closes and removes a temporary file; after a rename the name is
// gone and Remove fails harmlessly.
func removeTmp(f *os.File) {
	f.Close()
	_ = os.Remove(f.Name())
}

// Delete removes an archive. Deleting an archive that is not held is not
// an error.
func (s *Store) Delete(hash string) error {
	if err := checkHash(hash); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteLocked(hash)
}

func (s *Store) deleteLocked(hash string) error {
	e, ok := s.entries[hash]
	if !ok {
		return nil
	}
	if err := os.Remove(s.archivePath(hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", hash, err)
	}
	if err := os.Remove(s.metaPath(hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("checkpoint store: remove metadata", "hash", hash, "err", err)
	}
	delete(s.entries, hash)
	s.total -= e.size
	return syncDir(s.dir)
}

// GC deletes every archive for which keep returns false and returns the
// hashes removed (sorted) and the bytes freed. keep is called without the
// store's lock held, so it may consult other state freely (for the daemon:
// is the hash the checkpoint of a task that is not finished or cancelled?).
func (s *Store) GC(keep func(hash string) bool) (removed []string, freed int64, err error) {
	var errs []error
	for _, e := range s.List() {
		if keep(e.Hash) {
			continue
		}
		s.mu.Lock()
		_, still := s.entries[e.Hash]
		derr := s.deleteLocked(e.Hash)
		s.mu.Unlock()
		if derr != nil {
			errs = append(errs, derr)
			continue
		}
		if still {
			removed = append(removed, e.Hash)
			freed += e.Size
		}
	}
	if len(removed) > 0 {
		s.log.Info("checkpoint store: garbage collected", "archives", len(removed), "bytes", freed)
	}
	return removed, freed, errors.Join(errs...)
}
