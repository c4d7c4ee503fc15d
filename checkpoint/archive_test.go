package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sampleTree has nested and empty directories, restrictive and executable
// modes, an empty file, binary content, a name too long for plain ustar
// (so PAX headers are used) and a non-ASCII name.
func sampleTree() map[string]node {
	long := strings.Repeat("d", 120) + "/" + strings.Repeat("f", 150)
	return map[string]node{
		"state.json":        file(0o644, `{"i":41}`),
		"run.sh":            file(0o755, "#!/bin/sh\necho hi\n"),
		"secret":            file(0o600, "k"),
		"readonly":          file(0o444, "ro"),
		"empty":             file(0o640, ""),
		"bin/blob":          file(0o600, "\x00\x01\x02\xff\xfe"+strings.Repeat("z", 70_000)),
		"bin":               dir(0o750),
		"nested/a/b/c.txt":  file(0o644, "deep"),
		"nested/a":          dir(0o700),
		"locked":            dir(0o500),
		"locked/inside":     file(0o400, "in a read-only dir"),
		"emptydir":          dir(0o755),
		long:                file(0o644, "long name"),
		"ação/çà.txt":       file(0o644, "utf-8"),
		"with space/x y.md": file(0o644, "spaces"),
	}
}

func TestPackUnpackRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o700); err != nil {
		t.Fatal(err)
	}
	writeTree(t, src, sampleTree())
	b, a := packBytes(t, src, Limits{})
	if !ValidHash(a.Hash) || !strings.HasPrefix(a.Hash, "sha256:") {
		t.Fatalf("hash %q", a.Hash)
	}
	// The ledger accepts 1-128 characters of [A-Za-z0-9:_-].
	if len(a.Hash) > 128 || strings.Trim(a.Hash, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_-") != "" {
		t.Fatalf("hash %q does not fit the ledger's format", a.Hash)
	}
	work := t.TempDir()
	ar := writeFile(t, work, "a.tar.gz", b)
	dest := filepath.Join(work, "task", "checkpoint")
	if err := Unpack(context.Background(), ar, a.Hash, dest, Limits{}); err != nil {
		t.Fatalf("Unpack: %v", err)
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dest: %v, mode %v; want a 0700 directory", err, fi.Mode())
	}
	if pfi, err := os.Stat(filepath.Dir(dest)); err != nil || pfi.Mode().Perm() != 0o711 {
		t.Fatalf("created parent: %v mode %v, want 0711 like the executor", err, pfi.Mode())
	}
	got := readTree(t, dest)
	srcTree := readTree(t, src)
	if !reflect.DeepEqual(got, srcTree) {
		t.Errorf("unpacked tree differs from the source:\n got %v\nwant %v", got, srcTree)
	}
	for n, w := range sampleTree() {
		if g, ok := got[n]; !ok || g != w {
			t.Errorf("%s: got %+v, want %+v", n, g, w)
		}
	}
	if a.Entries != len(srcTree) {
		t.Errorf("Entries %d, want %d", a.Entries, len(srcTree))
	}
	// Only dest was created next to the archive: no temporary leftovers.
	if got := listDir(t, filepath.Dir(dest)); !reflect.DeepEqual(got, []string{"checkpoint"}) {
		t.Errorf("parent holds %v", got)
	}
}

func TestPackIsDeterministic(t *testing.T) {
	tree := sampleTree()
	a := filepath.Join(t.TempDir(), "a")
	b := filepath.Join(t.TempDir(), "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeTree(t, a, tree)
	// Same content written later, with other times: the same archive.
	time.Sleep(10 * time.Millisecond)
	writeTree(t, b, tree)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(b, "state.json"), old, old); err != nil {
		t.Fatal(err)
	}
	ba, aa := packBytes(t, a, Limits{})
	bb, ab := packBytes(t, b, Limits{})
	if aa.Hash != ab.Hash || !bytes.Equal(ba, bb) {
		t.Fatalf("same content, different archives: %s vs %s", aa.Hash, ab.Hash)
	}
	// Packing again gives the same bytes.
	if again, _ := packBytes(t, a, Limits{}); !bytes.Equal(again, ba) {
		t.Fatal("second pack of the same directory differs")
	}
	// A change of content or of mode changes the hash.
	if err := os.WriteFile(filepath.Join(b, "state.json"), []byte(`{"i":42}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ac := packBytes(t, b, Limits{}); ac.Hash == aa.Hash {
		t.Error("changed content, same hash")
	}
	if err := os.Chmod(filepath.Join(a, "secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ac := packBytes(t, a, Limits{}); ac.Hash == aa.Hash {
		t.Error("changed mode, same hash")
	}
	// The gzip header carries no name and no time.
	if ba[4] != 0 || ba[5] != 0 || ba[6] != 0 || ba[7] != 0 || ba[3]&0x08 != 0 {
		t.Errorf("gzip header has a time or a name: % x", ba[:10])
	}
}

func TestPackRefuses(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, outside, "target", []byte("outside"))
	cases := []struct {
		name   string
		setup  func(t *testing.T, dir string)
		limits Limits
		want   error
	}{
		{"symlink pointing outside", func(t *testing.T, d string) {
			must(t, os.Symlink(filepath.Join(outside, "target"), filepath.Join(d, "link")))
		}, Limits{}, ErrUnsupportedEntry},
		{"symlink pointing inside", func(t *testing.T, d string) {
			writeFile(t, d, "real", []byte("x"))
			must(t, os.Symlink("real", filepath.Join(d, "link")))
		}, Limits{}, ErrUnsupportedEntry},
		{"symlinked directory", func(t *testing.T, d string) {
			must(t, os.Symlink(outside, filepath.Join(d, "out")))
		}, Limits{}, ErrUnsupportedEntry},
		{"fifo", func(t *testing.T, d string) {
			must(t, syscall.Mkfifo(filepath.Join(d, "pipe"), 0o600))
		}, Limits{}, ErrUnsupportedEntry},
		{"file over the per-file limit", func(t *testing.T, d string) {
			writeFile(t, d, "big", make([]byte, 2000))
		}, Limits{MaxFileBytes: 1000}, ErrTooLarge},
		{"content over the total limit", func(t *testing.T, d string) {
			writeFile(t, d, "a", make([]byte, 600))
			writeFile(t, d, "b", make([]byte, 600))
		}, Limits{MaxTotalBytes: 1000}, ErrTooLarge},
		{"too many entries", func(t *testing.T, d string) {
			for _, n := range []string{"a", "b", "c", "d"} {
				writeFile(t, d, n, nil)
			}
		}, Limits{MaxEntries: 3}, ErrTooManyEntries},
		{"archive over the limit", func(t *testing.T, d string) {
			b := make([]byte, 64<<10)
			_, _ = rand.Read(b) // incompressible
			writeFile(t, d, "noise", b)
		}, Limits{MaxArchiveBytes: 32 << 10}, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			c.setup(t, d)
			var buf bytes.Buffer
			_, err := Pack(context.Background(), d, &buf, c.limits)
			if !errors.Is(err, c.want) {
				t.Fatalf("Pack: %v, want %v", err, c.want)
			}
			if errors.Is(err, ErrBadArchive) {
				t.Errorf("a pack refusal is not a bad archive: %v", err)
			}
		})
	}
	t.Run("directory is a symlink", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "ck")
		must(t, os.Symlink(outside, link))
		if _, err := Pack(context.Background(), link, &bytes.Buffer{}, Limits{}); !errors.Is(err, ErrUnsupportedEntry) {
			t.Fatalf("Pack: %v, want ErrUnsupportedEntry", err)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		if _, err := Pack(context.Background(), filepath.Join(outside, "nope"), &bytes.Buffer{}, Limits{}); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Pack: %v, want not exist", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d := t.TempDir()
		writeFile(t, d, "a", nil)
		if _, err := Pack(ctx, d, &bytes.Buffer{}, Limits{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Pack: %v, want canceled", err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// validArchive packs a small directory.
func validArchive(t *testing.T) ([]byte, string) {
	t.Helper()
	d := t.TempDir()
	writeTree(t, d, map[string]node{"count": file(0o644, "41"), "sub/x": file(0o600, strings.Repeat("x", 5000))})
	b, a := packBytes(t, d, Limits{})
	return b, a.Hash
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}

func TestUnpackRejectsBadInput(t *testing.T) {
	good, goodHash := validArchive(t)
	other, otherHash := func() ([]byte, string) {
		d := t.TempDir()
		writeFile(t, d, "other", []byte("other"))
		b, a := packBytes(t, d, Limits{})
		return b, a.Hash
	}()
	_ = other
	manyEntries := []rawEntry{}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		manyEntries = append(manyEntries, reg(n, "x"))
	}
	type tc struct {
		name   string
		data   []byte
		hash   string // "" = the hash of data
		limits Limits
		want   error
	}
	cases := []tc{
		{"truncated, hash of the truncated bytes", good[:len(good)/2], "", Limits{}, ErrCorrupt},
		{"truncated, original hash", good[:len(good)/2], goodHash, Limits{}, ErrHashMismatch},
		{"truncated inside the gzip trailer", good[:len(good)-3], "", Limits{}, ErrCorrupt},
		{"flipped byte, original hash", flip(good, len(good)/2), goodHash, Limits{}, ErrHashMismatch},
		{"flipped byte, hash of the damaged bytes", flip(good, len(good)/2), "", Limits{}, ErrCorrupt},
		{"flipped checksum byte", flip(good, len(good)-6), "", Limits{}, ErrCorrupt},
		{"hash of another archive", good, otherHash, Limits{}, ErrHashMismatch},
		{"empty file", []byte{}, "", Limits{}, ErrCorrupt},
		{"not gzip", []byte("plain text, not an archive"), "", Limits{}, ErrCorrupt},
		{"not tar inside gzip", gz(t, []byte(strings.Repeat("not a tar header ", 100))), "", Limits{}, ErrCorrupt},
		{"trailing bytes after gzip", append(bytes.Clone(good), "junk"...), "", Limits{}, ErrCorrupt},
		{"second gzip member", append(bytes.Clone(good), gz(t, []byte("more"))...), "", Limits{}, ErrCorrupt},
		{"dot-dot entry", craft(t, reg("../evil", "x")), "", Limits{}, ErrUnsafePath},
		{"dot-dot inside a name", craft(t, reg("a/../../evil", "x")), "", Limits{}, ErrUnsafePath},
		{"dot-dot directory", craft(t, rawDir("../evildir/")), "", Limits{}, ErrUnsafePath},
		{"absolute entry", craft(t, reg("/tmp/coopgrid-evil", "x")), "", Limits{}, ErrUnsafePath},
		{"non-canonical name", craft(t, reg("a//b", "x")), "", Limits{}, ErrUnsafePath},
		{"dot-slash name", craft(t, reg("./a", "x")), "", Limits{}, ErrUnsafePath},
		{"symlink pointing outside", craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "link", Linkname: "/etc/passwd"}}), "", Limits{}, ErrUnsupportedEntry},
		{"symlink then write through it", craft(t,
			rawEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "up", Linkname: "../.."}},
			reg("up/evil", "x")), "", Limits{}, ErrUnsupportedEntry},
		{"symlink pointing inside", craft(t, reg("a", "x"), rawEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "b", Linkname: "a"}}), "", Limits{}, ErrUnsupportedEntry},
		{"hard link pointing outside", craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "hl", Linkname: "../../etc/passwd"}}), "", Limits{}, ErrUnsupportedEntry},
		{"character device", craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3, Mode: 0o666}}), "", Limits{}, ErrUnsupportedEntry},
		{"block device", craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8, Mode: 0o660}}), "", Limits{}, ErrUnsupportedEntry},
		{"fifo", craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "pipe", Mode: 0o600}}), "", Limits{}, ErrUnsupportedEntry},
		{"global pax header", craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": "x"}}}), "", Limits{}, ErrUnsupportedEntry},
		{"archive over the limit", good, "", Limits{MaxArchiveBytes: int64(len(good) - 1)}, ErrTooLarge},
		{"file over the per-file limit", craft(t, reg("big", strings.Repeat("b", 2000))), "", Limits{MaxFileBytes: 1000}, ErrTooLarge},
		{"content over the total limit", craft(t, reg("a", strings.Repeat("a", 600)), reg("b", strings.Repeat("b", 600))), "", Limits{MaxTotalBytes: 1000}, ErrTooLarge},
		{"too many entries", craft(t, manyEntries...), "", Limits{MaxEntries: 4}, ErrTooManyEntries},
		{"duplicate entry", craft(t, reg("a", "1"), reg("a", "2")), "", Limits{}, ErrUnsafePath},
		{"entry inside a file", craft(t, reg("a", "1"), reg("a/b", "2")), "", Limits{}, ErrUnsafePath},
		{"file over an implicit directory", craft(t, reg("a/b", "1"), reg("a", "2")), "", Limits{}, ErrUnsafePath},
		{"file name with a trailing slash", gz(t, rawTarRenamed(t, reg("ab", "1"), "a/")), "", Limits{}, ErrUnsafePath},
		{"data after the end of the tar", func() []byte {
			var tb bytes.Buffer
			tw := tar.NewWriter(&tb)
			_ = tw.Close()
			tb.WriteString("smuggled")
			return gz(t, tb.Bytes())
		}(), "", Limits{}, ErrCorrupt},
		{"tar truncated inside a file", func() []byte {
			var tb bytes.Buffer
			tw := tar.NewWriter(&tb)
			_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Size: 5000, Mode: 0o644})
			_, _ = tw.Write(make([]byte, 100))
			return gz(t, tb.Bytes()) // a complete gzip stream of an incomplete tar
		}(), "", Limits{}, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			work := t.TempDir()
			ar := writeFile(t, work, "a.tar.gz", c.data)
			h := c.hash
			if h == "" {
				h = HashBytes(c.data)
			}
			// Two destinations: one that does not exist, one that holds an
			// older checkpoint which must survive untouched.
			fresh := filepath.Join(work, "fresh", "checkpoint")
			older := filepath.Join(work, "older")
			writeTree(t, older, map[string]node{"count": file(0o644, "7")})
			for _, dest := range []string{fresh, older} {
				err := Unpack(context.Background(), ar, h, dest, c.limits)
				if !errors.Is(err, c.want) || !errors.Is(err, ErrBadArchive) {
					t.Fatalf("Unpack into %s: %v, want %v (a bad archive)", dest, err, c.want)
				}
				var ae *ArchiveError
				if !errors.As(err, &ae) || ae.Msg == "" {
					t.Errorf("error %v is not an *ArchiveError with a message", err)
				}
				// Verify agrees without extracting.
				if _, verr := Verify(context.Background(), ar, h, c.limits); !errors.Is(verr, c.want) {
					t.Errorf("Verify: %v, want %v", verr, c.want)
				}
			}
			if _, err := os.Lstat(fresh); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("fresh destination exists after a failure: %v", err)
			}
			// The hash and size checks come before anything is created;
			// later failures leave at most the (empty) parent.
			parentMade := false
			if _, err := os.Stat(filepath.Join(work, "fresh")); err == nil {
				parentMade = true
				if got := listDir(t, filepath.Join(work, "fresh")); len(got) != 0 {
					t.Errorf("leftovers next to the destination: %v", got)
				}
			}
			if parentMade && (errors.Is(c.want, ErrHashMismatch) || c.limits.MaxArchiveBytes > 0) {
				t.Errorf("the destination's parent was created before the hash and size were checked")
			}
			if got := readTree(t, older); !reflect.DeepEqual(got, map[string]node{"count": file(0o644, "7")}) {
				t.Errorf("older checkpoint changed: %v", got)
			}
			wantWork := []string{"a.tar.gz", "older"}
			if parentMade {
				wantWork = []string{"a.tar.gz", "fresh", "older"}
			}
			if got := listDir(t, work); !reflect.DeepEqual(got, wantWork) {
				t.Errorf("work dir holds %v: something was written outside the destination", got)
			}
			if _, err := os.Lstat("/tmp/coopgrid-evil"); err == nil {
				t.Errorf("an absolute entry was written")
			}
		})
	}
}

func TestUnpackReplacesOlderCheckpoint(t *testing.T) {
	good, h := validArchive(t)
	work := t.TempDir()
	ar := writeFile(t, work, "a.tar.gz", good)
	dest := filepath.Join(work, "ck")
	writeTree(t, dest, map[string]node{"count": file(0o644, "7"), "stale": file(0o644, "old"), "olddir": dir(0o500), "olddir/f": file(0o400, "x")})
	// A leftover of an interrupted earlier Unpack is cleaned up.
	must(t, os.MkdirAll(filepath.Join(work, ".ck.unpack-123", "junk"), 0o700))
	if err := Unpack(context.Background(), ar, h, dest, Limits{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]node{"count": file(0o644, "41"), "sub": dir(0o700), "sub/x": file(0o600, strings.Repeat("x", 5000))}
	if got := readTree(t, dest); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := listDir(t, work); !reflect.DeepEqual(got, []string{"a.tar.gz", "ck"}) {
		t.Errorf("work dir holds %v", got)
	}
}

func TestUnpackRefusesBadArguments(t *testing.T) {
	good, h := validArchive(t)
	work := t.TempDir()
	ar := writeFile(t, work, "a.tar.gz", good)
	notDir := writeFile(t, work, "file", []byte("x"))
	for _, c := range []struct {
		name          string
		ar, hash, dst string
		want          error
	}{
		{"malformed hash", ar, "md5:abc", filepath.Join(work, "d1"), ErrBadHash},
		{"uppercase hash", ar, strings.ToUpper(h), filepath.Join(work, "d2"), ErrBadHash},
		{"missing archive", filepath.Join(work, "nope"), h, filepath.Join(work, "d3"), fs.ErrNotExist},
		{"destination is a file", ar, h, notDir, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Unpack(context.Background(), c.ar, c.hash, c.dst, Limits{})
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("Unpack: %v, want %v", err, c.want)
			}
			if errors.Is(err, ErrBadArchive) {
				t.Errorf("%v is not the archive's fault", err)
			}
		})
	}
	if b, _ := os.ReadFile(notDir); string(b) != "x" {
		t.Error("a file in the destination's place was changed")
	}
	if err := Unpack(context.Background(), ar, h, filepath.Join(work, "d"), Limits{MaxEntries: -1}); err == nil {
		t.Error("negative limit accepted")
	}
}

func TestVerifyCountsEntries(t *testing.T) {
	good, h := validArchive(t)
	ar := writeFile(t, t.TempDir(), "a.tar.gz", good)
	st, err := Verify(context.Background(), ar, h, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 3 || st.ContentBytes != 5002 {
		t.Errorf("stats %+v, want 3 entries and 5002 bytes", st)
	}
}

func TestUnpackBudgetStopsPaddingBomb(t *testing.T) {
	// A tar end followed by megabytes of zeros: harmless padding in form,
	// but over the decompressed budget of a tiny archive.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.Close()
	tb.Write(make([]byte, 8<<20))
	data := gz(t, tb.Bytes())
	ar := writeFile(t, t.TempDir(), "a.tar.gz", data)
	l := Limits{MaxTotalBytes: 1 << 10, MaxEntries: 10}
	if _, err := Verify(context.Background(), ar, HashBytes(data), l); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Verify: %v, want ErrTooLarge", err)
	}
}

// rawTarRenamed writes e as a tar, then renames its (ustar) header to name,
// which archive/tar itself would refuse to write, and fixes the checksum.
func rawTarRenamed(t *testing.T, e rawEntry, name string) []byte {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	h := e.hdr
	h.Format = tar.FormatUSTAR
	must(t, tw.WriteHeader(&h))
	_, _ = tw.Write([]byte(e.body))
	must(t, tw.Close())
	b := tb.Bytes()
	copy(b[0:100], make([]byte, 100))
	copy(b[0:100], name)
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}
