package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// fuzzLimits keep each fuzz run small.
var fuzzLimits = Limits{MaxArchiveBytes: 1 << 20, MaxFileBytes: 64 << 10, MaxTotalBytes: 256 << 10, MaxEntries: 64}

// fuzzSeeds are archives of every shape the rules care about. They are
// also committed in testdata/fuzz/FuzzUnpack (see TestWriteFuzzCorpus).
func fuzzSeeds(t testing.TB) map[string][]byte {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o640, Size: 5})
	_, _ = tw.Write([]byte("hello"))
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "top", Mode: 0o600, Size: 3})
	_, _ = tw.Write([]byte("abc"))
	_ = tw.Close()
	valid := gz(t, tb.Bytes())
	return map[string][]byte{
		"valid":            valid,
		"truncated":        valid[:len(valid)/2],
		"flipped":          func() []byte { c := bytes.Clone(valid); c[len(c)/2] ^= 0x40; return c }(),
		"dotdot":           craft(t, reg("../evil", "x")),
		"absolute":         craft(t, reg("/tmp/evil", "x")),
		"symlink-out":      craft(t, rawEntry{hdr: symlinkHdr("l", "/etc")}, reg("l/passwd", "x")),
		"hardlink-out":     craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "../../etc/passwd"}}),
		"device":           craft(t, rawEntry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}),
		"duplicate":        craft(t, reg("a", "1"), reg("a", "2")),
		"inside-file":      craft(t, reg("a", "1"), reg("a/b", "2")),
		"deep-implicit":    craft(t, reg("x/y/z/w", "deep"), rawDir("x/y/")),
		"empty-tar":        gz(t, make([]byte, 1024)),
		"not-gzip":         []byte("definitely not an archive"),
		"trailing-garbage": append(bytes.Clone(valid), 0xde, 0xad),
	}
}

// FuzzUnpack checks that no input panics, that nothing is ever written
// outside the destination, that a failure leaves no destination and no
// leftovers, that a success holds only directories and regular files within
// the limits, and that Verify agrees with Unpack.
func FuzzUnpack(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		ar := filepath.Join(base, "a.tar.gz")
		if err := os.WriteFile(ar, data, 0o600); err != nil {
			t.Fatal(err)
		}
		must(t, os.Mkdir(filepath.Join(base, "outside"), 0o700))
		dest := filepath.Join(base, "work", "ck")
		h := HashBytes(data)
		err := Unpack(context.Background(), ar, h, dest, fuzzLimits)
		_, verr := Verify(context.Background(), ar, h, fuzzLimits)
		if (err == nil) != (verr == nil) {
			t.Fatalf("Unpack: %v; Verify: %v", err, verr)
		}
		if err != nil && !errors.Is(err, ErrBadArchive) {
			t.Fatalf("a failure not blamed on the archive: %v", err)
		}
		if got := listDir(t, filepath.Join(base, "outside")); len(got) != 0 {
			t.Fatalf("written outside: %v", got)
		}
		top := listDir(t, base)
		if !reflect.DeepEqual(top, []string{"a.tar.gz", "outside"}) && !reflect.DeepEqual(top, []string{"a.tar.gz", "outside", "work"}) {
			t.Fatalf("base holds %v", top)
		}
		if _, serr := os.Stat(filepath.Join(base, "work")); serr == nil {
			want := []string(nil)
			if err == nil {
				want = []string{"ck"}
			}
			if got := listDir(t, filepath.Join(base, "work")); !reflect.DeepEqual(got, want) {
				t.Fatalf("work holds %v after err=%v", got, err)
			}
		}
		if err != nil {
			return
		}
		files, total := 0, int64(0)
		_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, werr error) error {
			if werr != nil {
				_ = os.Chmod(p, 0o700)
				return nil
			}
			if p == dest {
				return nil
			}
			info, ierr := os.Lstat(p)
			if ierr != nil {
				t.Fatal(ierr)
			}
			switch {
			case info.IsDir():
				_ = os.Chmod(p, 0o700)
			case info.Mode().IsRegular():
				files++
				total += info.Size()
			default:
				t.Fatalf("%s is a %s", p, info.Mode().Type())
			}
			return nil
		})
		if total > fuzzLimits.MaxTotalBytes {
			t.Fatalf("%d bytes extracted", total)
		}
		// Every file is an entry (directories may be implicit parents).
		if files > fuzzLimits.MaxEntries {
			t.Fatalf("%d files extracted", files)
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzUnpack from fuzzSeeds
// when COOPGRID_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("COOPGRID_WRITE_CORPUS") != "1" {
		t.Skip("set COOPGRID_WRITE_CORPUS=1 to regenerate the committed seed corpus")
	}
	d := filepath.Join("testdata", "fuzz", "FuzzUnpack")
	must(t, os.MkdirAll(d, 0o755))
	for name, b := range fuzzSeeds(t) {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
		must(t, os.WriteFile(filepath.Join(d, name), []byte(content), 0o644))
	}
}
