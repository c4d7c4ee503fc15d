package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func newStore(t *testing.T, cfg StoreConfig) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "checkpoints")
	}
	cfg.Logger = quiet
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return s
}

// ckDir makes a checkpoint directory with one file of n random
// (incompressible) bytes, so that archive sizes are predictable.
func ckDir(t *testing.T, n int) string {
	t.Helper()
	d := t.TempDir()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	writeFile(t, d, "state", b)
	return d
}

func TestStorePackDirAndLookups(t *testing.T) {
	s := newStore(t, StoreConfig{})
	ctx := context.Background()
	d := t.TempDir()
	writeTree(t, d, map[string]node{"count": file(0o644, "12")})
	a, err := s.PackDir(ctx, "org1-1", d)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := filepath.Join(s.Dir(), a.Hash+".tar.gz")
	if a.Path != wantPath {
		t.Errorf("path %s, want %s", a.Path, wantPath)
	}
	fi, err := os.Stat(wantPath)
	if err != nil || fi.Size() != a.Size || fi.Mode().Perm() != 0o600 {
		t.Fatalf("archive file: %v size %d mode %v, want %d bytes 0600", err, fi.Size(), fi.Mode(), a.Size)
	}
	b, _ := os.ReadFile(wantPath)
	if HashBytes(b) != a.Hash {
		t.Fatal("stored bytes do not hash to the name")
	}
	if !s.Has(a.Hash) {
		t.Fatal("Has false after PackDir")
	}
	if p, err := s.Path(a.Hash); err != nil || p != wantPath {
		t.Errorf("Path: %s %v", p, err)
	}
	f, size, err := s.Open(a.Hash)
	if err != nil || size != a.Size {
		t.Fatalf("Open: %v size %d", err, size)
	}
	f.Close()
	// The same content for another task is stored once, attributed to both.
	a2, err := s.PackDir(ctx, "org2-7", d)
	if err != nil || a2.Hash != a.Hash {
		t.Fatalf("second PackDir: %v %s", err, a2.Hash)
	}
	want := []Entry{{Hash: a.Hash, Size: a.Size, Tasks: []string{"org1-1", "org2-7"}}}
	if got := s.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("List %+v, want %+v", got, want)
	}
	if total, ofTask := s.Usage("org2-7"); total != a.Size || ofTask != a.Size {
		t.Errorf("Usage %d %d, want %d %d", total, ofTask, a.Size, a.Size)
	}
	// Lookups of what is not there.
	missing := HashBytes([]byte("nothing"))
	if s.Has(missing) {
		t.Error("Has a missing hash")
	}
	if _, err := s.Path(missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("Path missing: %v", err)
	}
	if _, _, err := s.Open(missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open missing: %v", err)
	}
	for _, bad := range []string{"", "../../etc/passwd", "sha256:../x", strings.Repeat("a", 71)} {
		if _, err := s.Path(bad); !errors.Is(err, ErrBadHash) {
			t.Errorf("Path(%q): %v, want ErrBadHash", bad, err)
		}
		if err := s.Delete(bad); !errors.Is(err, ErrBadHash) {
			t.Errorf("Delete(%q): %v, want ErrBadHash", bad, err)
		}
	}
	if _, err := s.PackDir(ctx, "../evil", d); err == nil {
		t.Error("PackDir accepted a bad task ID")
	}
	// Delete, twice.
	if err := s.Delete(a.Hash); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(a.Hash); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if s.Has(a.Hash) || len(listDir(t, s.Dir())) != 0 {
		t.Errorf("after Delete: Has %v, files %v", s.Has(a.Hash), listDir(t, s.Dir()))
	}
}

func TestStorePutVerifies(t *testing.T) {
	s := newStore(t, StoreConfig{})
	ctx := context.Background()
	good, h := validArchive(t)
	for _, c := range []struct {
		name string
		data []byte
		hash string
		want error
	}{
		{"wrong hash", good, HashBytes([]byte("other")), ErrHashMismatch},
		{"damaged bytes", flip(good, len(good)/2), h, ErrHashMismatch},
		{"right hash, unsafe entry", craft(t, reg("../x", "1")), "", ErrUnsafePath},
		{"right hash, symlink", craft(t, rawEntry{hdr: symlinkHdr("l", "/etc")}), "", ErrUnsupportedEntry},
		{"truncated", good[:100], "", ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Put(ctx, "org1-1", bytes.NewReader(c.data), c.hash)
			if !errors.Is(err, c.want) || !errors.Is(err, ErrBadArchive) {
				t.Fatalf("Put: %v, want %v", err, c.want)
			}
			if n := len(listDir(t, s.Dir())); n != 0 || len(s.List()) != 0 {
				t.Errorf("store holds %v after a refused Put", listDir(t, s.Dir()))
			}
		})
	}
	a, err := s.Put(ctx, "org1-1", bytes.NewReader(good), h)
	if err != nil || a.Hash != h || a.Entries != 3 {
		t.Fatalf("Put good: %+v %v", a, err)
	}
	// Held already: r is not read at all.
	if _, err := s.Put(ctx, "org1-2", failingReader{}, h); err != nil {
		t.Fatalf("Put of a held hash read its reader: %v", err)
	}
	if got := s.List()[0].Tasks; !reflect.DeepEqual(got, []string{"org1-1", "org1-2"}) {
		t.Errorf("tasks %v", got)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("must not be read") }

func TestStoreLimits(t *testing.T) {
	ctx := context.Background()
	d1, d2, d3 := ckDir(t, 3000), ckDir(t, 3000), ckDir(t, 3000)
	probe := newStore(t, StoreConfig{})
	a1, err := probe.PackDir(ctx, "x-1", d1)
	if err != nil {
		t.Fatal(err)
	}
	size := a1.Size // about 3.1 kB each

	t.Run("per peer", func(t *testing.T) {
		s := newStore(t, StoreConfig{MaxPeerBytes: 2*size + size/2})
		if _, err := s.PackDir(ctx, "a-1", d1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PackDir(ctx, "b-1", d2); err != nil {
			t.Fatal(err)
		}
		_, err := s.PackDir(ctx, "c-1", d3)
		if !errors.Is(err, ErrStoreFull) || !strings.Contains(err.Error(), "peer's limit") {
			t.Fatalf("third archive: %v, want ErrStoreFull", err)
		}
		if len(s.List()) != 2 || len(listDir(t, s.Dir())) != 4 {
			t.Errorf("store holds %v", listDir(t, s.Dir()))
		}
		if err := s.Fits("c-1", size); !errors.Is(err, ErrStoreFull) {
			t.Errorf("Fits: %v", err)
		}
	})
	t.Run("per task", func(t *testing.T) {
		s := newStore(t, StoreConfig{MaxTaskBytes: size + size/2})
		if _, err := s.PackDir(ctx, "a-1", d1); err != nil {
			t.Fatal(err)
		}
		_, err := s.PackDir(ctx, "a-1", d2)
		if !errors.Is(err, ErrTaskQuota) || !strings.Contains(err.Error(), "task a-1") {
			t.Fatalf("second archive of a-1: %v, want ErrTaskQuota", err)
		}
		// Another task is not affected.
		if _, err := s.PackDir(ctx, "b-1", d2); err != nil {
			t.Fatalf("b-1: %v", err)
		}
		// Attributing an archive already held to a full task is refused too.
		var buf bytes.Buffer
		b2, _ := Pack(ctx, d2, &buf, Limits{})
		if _, err := s.Put(ctx, "a-1", bytes.NewReader(buf.Bytes()), b2.Hash); !errors.Is(err, ErrTaskQuota) {
			t.Fatalf("Put for a-1: %v, want ErrTaskQuota", err)
		}
		// Once the old checkpoint is collected, the task has room again.
		if _, _, err := s.GC(func(h string) bool { return h != a1.Hash }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PackDir(ctx, "a-1", d3); err != nil {
			t.Fatalf("after GC: %v", err)
		}
	})
	t.Run("per archive", func(t *testing.T) {
		s := newStore(t, StoreConfig{Limits: Limits{MaxArchiveBytes: size / 2}})
		if _, err := s.PackDir(ctx, "a-1", d1); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("PackDir: %v, want ErrTooLarge", err)
		}
		var buf bytes.Buffer
		_, _ = Pack(ctx, d1, &buf, Limits{})
		if _, err := s.Put(ctx, "a-1", &buf, ""); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Put: %v, want ErrTooLarge", err)
		}
		if len(listDir(t, s.Dir())) != 0 {
			t.Errorf("store holds %v", listDir(t, s.Dir()))
		}
	})
	t.Run("bad config", func(t *testing.T) {
		for _, cfg := range []StoreConfig{
			{},
			{Dir: t.TempDir(), MaxPeerBytes: -1},
			{Dir: t.TempDir(), Limits: Limits{MaxFileBytes: -1}},
		} {
			if _, err := NewStore(cfg); err == nil {
				t.Errorf("NewStore(%+v) accepted", cfg)
			}
		}
	})
}

func TestStoreGC(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, StoreConfig{})
	var hashes []string
	var sizes []int64
	for i, task := range []string{"a-1", "b-1", "c-1"} {
		a, err := s.PackDir(ctx, task, ckDir(t, 1000+i))
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, a.Hash)
		sizes = append(sizes, a.Size)
	}
	keep := hashes[1]
	removed, freed, err := s.GC(func(h string) bool { return h == keep })
	if err != nil {
		t.Fatal(err)
	}
	wantRemoved := []string{hashes[0], hashes[2]}
	slices.Sort(wantRemoved)
	if !reflect.DeepEqual(removed, wantRemoved) || freed != sizes[0]+sizes[2] {
		t.Errorf("GC removed %v freeing %d, want %v freeing %d", removed, freed, wantRemoved, sizes[0]+sizes[2])
	}
	if got := s.List(); len(got) != 1 || got[0].Hash != keep {
		t.Errorf("left %+v", got)
	}
	if total, _ := s.Usage(""); total != sizes[1] {
		t.Errorf("usage %d, want %d", total, sizes[1])
	}
	if got := listDir(t, s.Dir()); !reflect.DeepEqual(got, []string{keep + ".json", keep + ".tar.gz"}) {
		t.Errorf("files %v", got)
	}
	// Nothing to collect: nothing removed.
	if removed, freed, err := s.GC(func(string) bool { return true }); len(removed) != 0 || freed != 0 || err != nil {
		t.Errorf("second GC: %v %d %v", removed, freed, err)
	}
}

func TestStoreReopen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "checkpoints")
	s := newStore(t, StoreConfig{Dir: dir})
	a, err := s.PackDir(ctx, "a-1", ckDir(t, 500))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "b-2", failingReader{}, a.Hash); err != nil {
		t.Fatal(err)
	}
	// What a crash may leave: a temporary file, a metadata file whose
	// archive never made it; and a file that is none of ours.
	writeFile(t, dir, ".tmp-put-123", []byte("partial"))
	orphan := HashBytes([]byte("orphan"))
	writeFile(t, dir, orphan+".json", []byte(`{"v":1,"tasks":["c-1"]}`))
	writeFile(t, dir, "README", []byte("hello"))

	s2 := newStore(t, StoreConfig{Dir: dir})
	want := []Entry{{Hash: a.Hash, Size: a.Size, Tasks: []string{"a-1", "b-2"}}}
	if got := s2.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("reopened: %+v, want %+v", got, want)
	}
	if got := listDir(t, dir); !reflect.DeepEqual(got, []string{"README", a.Hash + ".json", a.Hash + ".tar.gz"}) {
		t.Errorf("files after reopen: %v", got)
	}
	// Damaged metadata: the archive is kept with no task.
	writeFile(t, dir, a.Hash+".json", []byte("{not json"))
	s3 := newStore(t, StoreConfig{Dir: dir})
	if got := s3.List(); len(got) != 1 || len(got[0].Tasks) != 0 {
		t.Errorf("with damaged metadata: %+v", got)
	}
}
