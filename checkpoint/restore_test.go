package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

func ids(ps ...*testPeer) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.h.ID().String()
	}
	return out
}

var olderTree = map[string]node{"count": file(0o644, "7")}

func TestRestoreFetchesAndUnpacks(t *testing.T) {
	n := newNet(t)
	a, c := n.peer(allowAll), n.peer(allowAll)
	know(a, c)
	ctx := ctxT(t)
	src := t.TempDir()
	writeTree(t, src, map[string]node{"count": file(0o644, "41"), "coopgrid-progress.json": file(0o644, `{"done_mflop":41000}`)})
	ar, err := a.store.PackDir(ctx, "org1-1", src)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(c.dir, "tasks", "org1-1", "checkpoint")
	writeTree(t, dest, olderTree)
	ref := Ref{Task: "org1-1", Hash: ar.Hash, Holders: append([]string{"not-a-peer-id"}, ids(a)...)}
	if err := Restore(ctx, c.store, c.svc, ref, dest); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got, want := readTree(t, dest), readTree(t, src); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %v, want %v", got, want)
	}
	if !c.store.Has(ar.Hash) || !reflect.DeepEqual(c.store.List()[0].Tasks, []string{"org1-1"}) {
		t.Errorf("the fetched archive is not kept for the task: %+v", c.store.List())
	}
	if p, err := ReadProgress(dest, "org1-1", 100_000); err != nil || p != 41_000 {
		t.Errorf("progress %d %v", p, err)
	}
}

func TestRestoreFailuresLeaveDestinationAlone(t *testing.T) {
	n := newNet(t)
	ctx := ctxT(t)
	// A holder whose store holds a well-formed name over bad content, as a
	// malicious or broken peer would serve: right hash, unsafe entry.
	evil := craft(t, reg("../escaped", "x"))
	evilHash := HashBytes(evil)
	evilDir := filepath.Join(t.TempDir(), "checkpoints")
	must(t, os.MkdirAll(evilDir, 0o700))
	writeFile(t, evilDir, evilHash+".tar.gz", evil)
	bad := n.peer(allowAll, func(c *StoreConfig) { c.Dir = evilDir })
	good := n.peer(allowAll)
	dead := n.peer(allowAll)
	c := n.peer(allowAll)
	know(bad, good, dead, c)
	must(t, dead.h.Close())
	ar, err := good.store.PackDir(ctx, "org1-1", ckDir(t, 1000))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		ref      Ref
		fetcher  Fetcher
		badInput bool
		want     error
	}{
		{"archive with a traversal entry", Ref{Task: "org1-1", Hash: evilHash, Holders: ids(bad)}, c.svc, true, ErrUnsafePath},
		{"every holder down", Ref{Task: "org1-1", Hash: ar.Hash, Holders: ids(dead)}, c.svc, false, ErrUnavailable},
		{"no usable holder", Ref{Task: "org1-1", Hash: ar.Hash, Holders: []string{"garbage"}}, c.svc, false, ErrUnavailable},
		{"no fetcher", Ref{Task: "org1-1", Hash: ar.Hash, Holders: ids(good)}, nil, false, ErrUnavailable},
		{"malformed hash", Ref{Task: "org1-1", Hash: "sha256:XYZ", Holders: ids(good)}, c.svc, false, ErrBadHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "checkpoint")
			writeTree(t, dest, olderTree)
			err := Restore(ctx, c.store, tc.fetcher, tc.ref, dest)
			var re *RestoreError
			if !errors.As(err, &re) || !errors.Is(err, tc.want) {
				t.Fatalf("Restore: %v, want a *RestoreError wrapping %v", err, tc.want)
			}
			if re.BadArchive() != tc.badInput || re.Task != "org1-1" {
				t.Errorf("BadArchive %v task %q, want %v", re.BadArchive(), re.Task, tc.badInput)
			}
			if got := readTree(t, dest); !reflect.DeepEqual(got, olderTree) {
				t.Errorf("destination changed: %v", got)
			}
			if got := listDir(t, filepath.Dir(dest)); !reflect.DeepEqual(got, []string{"checkpoint"}) {
				t.Errorf("leftovers: %v", got)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(filepath.Dir(dest)), "escaped")); err == nil {
				t.Error("an entry escaped")
			}
		})
	}
	if c.store.Has(evilHash) {
		t.Error("the bad archive was kept")
	}
	// The same bad archive, already in the local store (indexed, never
	// verified): Unpack refuses it.
	localDir := filepath.Join(t.TempDir(), "checkpoints")
	must(t, os.MkdirAll(localDir, 0o700))
	writeFile(t, localDir, evilHash+".tar.gz", evil)
	local := newStore(t, StoreConfig{Dir: localDir})
	dest := filepath.Join(t.TempDir(), "checkpoint")
	err = Restore(ctx, local, nil, Ref{Task: "org1-1", Hash: evilHash}, dest)
	var re *RestoreError
	if !errors.As(err, &re) || !re.BadArchive() {
		t.Fatalf("local bad archive: %v", err)
	}
	if _, err := os.Lstat(dest); err == nil {
		t.Error("destination created")
	}
}

func TestRestoreRefetchesDamagedLocalCopy(t *testing.T) {
	n := newNet(t)
	a, c := n.peer(allowAll), n.peer(allowAll)
	know(a, c)
	ctx := ctxT(t)
	src := ckDir(t, 20_000)
	ar, err := a.store.PackDir(ctx, "org1-1", src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.svc.Fetch(ctx, "org1-1", ar.Hash, []peer.ID{a.h.ID()}); err != nil {
		t.Fatal(err)
	}
	// c's copy rots on disk after it was verified.
	cp, _ := c.store.Path(ar.Hash)
	raw, _ := os.ReadFile(cp)
	must(t, os.WriteFile(cp, flip(raw, 100), 0o600))

	dest := filepath.Join(t.TempDir(), "checkpoint")
	if err := Restore(ctx, c.store, c.svc, Ref{Task: "org1-1", Hash: ar.Hash, Holders: ids(c, a)}, dest); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got, want := readTree(t, dest), readTree(t, src); !reflect.DeepEqual(got, want) {
		t.Fatal("restored content differs")
	}
	if !sameFile(t, cp, ar.Path) {
		t.Error("the damaged local copy was not replaced")
	}
}

func TestReadProgress(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]node
		want  int64
		err   bool
	}{
		{"real task", map[string]node{ProgressFile: file(0o644, `{"done_mflop":500}`)}, 500, false},
		{"simulated task", map[string]node{SimProgressFile: file(0o644, `{"task":"org1-1","done_mflop":700}`)}, 700, false},
		{"real file first", map[string]node{ProgressFile: file(0o644, `{"done_mflop":1}`), SimProgressFile: file(0o644, `{"done_mflop":2}`)}, 1, false},
		{"none", map[string]node{"count": file(0o644, "3")}, 0, true},
		{"other task", map[string]node{ProgressFile: file(0o644, `{"task":"org2-1","done_mflop":5}`)}, 0, true},
		{"over the size", map[string]node{ProgressFile: file(0o644, `{"done_mflop":1001}`)}, 0, true},
		{"negative", map[string]node{ProgressFile: file(0o644, `{"done_mflop":-1}`)}, 0, true},
		{"missing field", map[string]node{ProgressFile: file(0o644, `{}`)}, 0, true},
		{"not json", map[string]node{ProgressFile: file(0o644, `fifty`)}, 0, true},
		{"a directory", map[string]node{ProgressFile: dir(0o755)}, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			writeTree(t, d, c.files)
			got, err := ReadProgress(d, "org1-1", 1000)
			if (err != nil) != c.err || got != c.want {
				t.Fatalf("ReadProgress: %d %v, want %d (error %v)", got, err, c.want, c.err)
			}
			if c.name == "none" && !errors.Is(err, ErrNoProgress) {
				t.Errorf("%v, want ErrNoProgress", err)
			}
		})
	}
	t.Run("symlink", func(t *testing.T) {
		d := t.TempDir()
		target := writeFile(t, t.TempDir(), "p.json", []byte(`{"done_mflop":5}`))
		must(t, os.Symlink(target, filepath.Join(d, ProgressFile)))
		if _, err := ReadProgress(d, "org1-1", 1000); err == nil {
			t.Fatal("followed a symlink")
		}
	})
}
