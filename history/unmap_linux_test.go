package history

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/coopgrid/coopgrid/internal/bboltmap"
	"github.com/coopgrid/coopgrid/ledger"
)

// mappedKiB is the resident size of this process's mappings of the file
// at path.
func mappedKiB(t *testing.T, path string) int {
	t.Helper()
	n, err := bboltmap.MappedKiB(path)
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	return n
}

// TestReleaseMappedKeepsTheRecords: a listing of the whole store maps its
// pages into the process; releaseMapped unmaps them (the mapping's
// resident size falls to a few pages), and the records read again after
// it are the same, byte for byte.
func TestReleaseMappedKeepsTheRecords(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	path, err := filepath.EvalSymlinks(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8000
	for i := range n / 1000 {
		var ts []ledger.Task
		for j := range 1000 {
			seq := uint64(i*1000 + j + 1)
			ts = append(ts, task(seq, "uni", fmt.Sprintf("job-%d", seq%7), ledger.TaskDone, int64(seq)))
		}
		if err := s.Put(uint64(i+1), ts); err != nil {
			t.Fatal(err)
		}
	}
	list := func() Page {
		t.Helper()
		p, err := s.List(context.Background(), Query{Limit: MaxLimit})
		if err != nil || len(p.Records) != n {
			t.Fatalf("list: %d records, %v", len(p.Records), err)
		}
		return p
	}
	s.released.Store(1 << 62) // no release during the listing
	before := list()
	touched := mappedKiB(t, path)
	if touched < 1024 {
		t.Fatalf("a listing of %d records left %d KiB mapped: the test measures nothing", n, touched)
	}
	s.released.Store(0)
	s.releaseMapped()
	left := mappedKiB(t, path)
	t.Logf("mapped: %d KiB after the listing, %d KiB after the release", touched, left)
	if left > touched/8 {
		t.Fatalf("%d KiB still mapped after the release (%d before)", left, touched)
	}
	after := list()
	if !slices.EqualFunc(before.Records, after.Records, func(a, b Record) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Fatal("the records read after the release differ")
	}
}
