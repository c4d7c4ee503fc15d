package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// benchDir is a checkpoint of 64 files of 256 KiB: half random
// (incompressible), half repetitive, 16 MiB in all.
func benchDir(b *testing.B) string {
	b.Helper()
	d := b.TempDir()
	buf := make([]byte, 256<<10)
	for i := range 64 {
		if i%2 == 0 {
			_, _ = rand.Read(buf)
		} else {
			copy(buf, bytes.Repeat([]byte(fmt.Sprintf("row %d;", i)), len(buf)))
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d", i)), buf, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return d
}

func BenchmarkPack(b *testing.B) {
	d := benchDir(b)
	b.SetBytes(16 << 20)
	for b.Loop() {
		if _, err := Pack(context.Background(), d, discard{}, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func BenchmarkUnpack(b *testing.B) {
	d := benchDir(b)
	var buf bytes.Buffer
	a, err := Pack(context.Background(), d, &buf, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	ar := filepath.Join(work, "a.tar.gz")
	if err := os.WriteFile(ar, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	dest := filepath.Join(work, "ck")
	b.SetBytes(16 << 20)
	for b.Loop() {
		// Each run replaces the previous extraction, as a restore does.
		if err := Unpack(context.Background(), ar, a.Hash, dest, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplicate pushes a 16 MiB checkpoint to another peer over
// loopback libp2p; the receiver hashes, verifies and stores it.
func BenchmarkReplicate(b *testing.B) {
	d := benchDir(b)
	n := newNet(b)
	src, dst := n.peer(allowAll), n.peer(allowAll)
	know(src, dst)
	a, err := src.store.PackDir(context.Background(), "org1-1", d)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(a.Size)
	for b.Loop() {
		if _, err := src.svc.Replicate(context.Background(), "org1-1", a.Hash, []peer.ID{dst.h.ID()}, 2); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := dst.store.Delete(a.Hash); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
