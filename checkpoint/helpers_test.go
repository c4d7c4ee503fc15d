package checkpoint

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/pnet"
)

var quiet = slog.New(slog.DiscardHandler)

// node is the content of one file or directory in a test tree.
type node struct {
	dir     bool
	mode    fs.FileMode
	content string
}

func file(mode fs.FileMode, content string) node { return node{mode: mode, content: content} }
func dir(mode fs.FileMode) node                  { return node{dir: true, mode: mode} }

// writeTree creates the tree under root (root itself must exist), parents
// first, then fixes the directory modes deepest first.
func writeTree(t *testing.T, root string, tree map[string]node) {
	t.Helper()
	names := make([]string, 0, len(tree))
	for n := range tree {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(root, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		nd := tree[n]
		if nd.dir {
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(nd.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, nd.mode); err != nil {
			t.Fatal(err)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range names {
		if nd := tree[n]; nd.dir {
			if err := os.Chmod(filepath.Join(root, filepath.FromSlash(n)), nd.mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { removeTree(root) })
}

// readTree reads back a tree: every entry below root with its mode and
// content. It fails the test on anything but files and directories.
func readTree(t *testing.T, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	// Reading may need permissions the tree takes away (when not root):
	// each directory is opened up after its mode is recorded, which also
	// lets the test's cleanup remove it.
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case info.IsDir():
			if rel != "." {
				out[rel] = dir(info.Mode().Perm())
			}
			_ = os.Chmod(p, 0o700)
		case info.Mode().IsRegular():
			_ = os.Chmod(p, 0o600)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_ = os.Chmod(p, info.Mode().Perm())
			out[rel] = file(info.Mode().Perm(), string(b))
		default:
			t.Errorf("unexpected %s at %s", info.Mode().Type(), rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read tree %s: %v", root, err)
	}
	return out
}

// packBytes packs dir and returns the archive bytes.
func packBytes(t *testing.T, dir string, l Limits) ([]byte, Archive) {
	t.Helper()
	var buf bytes.Buffer
	a, err := Pack(context.Background(), dir, &buf, l)
	if err != nil {
		t.Fatalf("Pack %s: %v", dir, err)
	}
	if int64(buf.Len()) != a.Size || HashBytes(buf.Bytes()) != a.Hash {
		t.Fatalf("Pack reported size %d hash %s, wrote %d bytes hashing to %s", a.Size, a.Hash, buf.Len(), HashBytes(buf.Bytes()))
	}
	return buf.Bytes(), a
}

// writeFile writes b to a new file in dir and returns its path.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rawEntry is one hand-made tar entry.
type rawEntry struct {
	hdr  tar.Header
	body string
}

func reg(name, body string) rawEntry {
	return rawEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: body}
}

func rawDir(name string) rawEntry {
	return rawEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

// craft builds a gzip-compressed tar from hand-made headers, bypassing
// every check Pack makes.
func craft(t testing.TB, entries ...rawEntry) []byte {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("craft %q: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("craft %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return gz(t, tb.Bytes())
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return zb.Bytes()
}

// listDir lists the names in a directory, sorted.
func listDir(t *testing.T, d string) []string {
	t.Helper()
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// testNet is a set of peers on loopback sharing a federation secret.
type testNet struct {
	t   testing.TB
	psk pnet.PSK
}

func newNet(t testing.TB) *testNet {
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	return &testNet{t: t, psk: psk}
}

// testPeer is a host with its store and replication service.
type testPeer struct {
	h     *p2p.Host
	store *Store
	svc   *Service
	dir   string
}

func (n *testNet) peer(auth AuthFunc, mut ...func(*StoreConfig)) *testPeer {
	t := n.t
	t.Helper()
	d := t.TempDir()
	h, err := p2p.New(p2p.Config{DataDir: filepath.Join(d, "p2p"), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: n.psk, Logger: quiet})
	if err != nil {
		t.Fatalf("p2p.New: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	cfg := StoreConfig{Dir: filepath.Join(d, "checkpoints"), Logger: quiet}
	for _, m := range mut {
		m(&cfg)
	}
	st, err := NewStore(cfg)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	svc := NewService(h, st, ServiceConfig{Auth: auth, TransferTimeout: 20 * time.Second, Logger: quiet})
	t.Cleanup(svc.Close)
	return &testPeer{h: h, store: st, svc: svc, dir: d}
}

// know makes every peer able to dial every other by ID.
func know(peers ...*testPeer) {
	for _, a := range peers {
		for _, b := range peers {
			if a != b {
				a.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), peerstore.PermanentAddrTTL)
			}
		}
	}
}

func allowAll(peer.ID, Op, string, string) error { return nil }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func symlinkHdr(name, target string) tar.Header {
	return tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}
}
