package history

import (
	"context"
	"slices"
	"testing"

	"github.com/coopgrid/coopgrid/ledger"
)

// TestGapsAndRanges: a snapshot installed past what the store covers
// opens a gap, a store with a gap over a range does not cover it, a range
// reads back in (index, seq) order across pages whatever the page bounds,
// and filling closes the gap. Restoring a snapshot the store already
// covers (a restart) opens none, even after a reopen.
func TestGapsAndRanges(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	put := func(idx uint64, ts ...ledger.Task) {
		t.Helper()
		if err := s.Put(idx, ts); err != nil {
			t.Fatal(err)
		}
		s.Applied(idx)
	}
	put(10, task(5, "a", "j", ledger.TaskDone, 1), task(2, "b", "j", ledger.TaskDone, 1))
	put(12, task(7, "a", "j", ledger.TaskDone, 1))
	s.Applied(15)
	if ok, _ := s.Covers(0, 15); !ok {
		t.Fatal("a store that applied every entry to 15 does not cover (0, 15]")
	}
	if ok, _ := s.Covers(0, 16); ok {
		t.Fatal("covers an index it has not applied")
	}
	// A restart: the store closes at 15, and the peer restores its own
	// snapshot at 14.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	if err := s.Restored(14); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.Gaps(); len(g) != 0 {
		t.Fatalf("restoring a covered snapshot opened gaps %v", g)
	}
	// Installing a snapshot at 40 skips (15, 40].
	if err := s.Restored(40); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.Gaps(); !slices.Equal(g, []Gap{{15, 40}}) {
		t.Fatalf("gaps %v, want (15, 40]", g)
	}
	for _, c := range []struct {
		from, to uint64
		want     bool
	}{{0, 15, true}, {0, 16, false}, {20, 30, false}, {39, 40, false}, {40, 41, false}} {
		if ok, _ := s.Covers(c.from, c.to); ok != c.want {
			t.Errorf("covers (%d, %d] = %v, want %v", c.from, c.to, ok, c.want)
		}
	}
	s.Applied(50)
	if ok, _ := s.Covers(40, 50); !ok {
		t.Error("does not cover (40, 50] past the gap")
	}
	// Records another member sends for the gap.
	var sent []Record
	for i := range uint64(7) {
		sent = append(sent, Record{Index: 20 + i/3, Task: task(100-i, "c", "j", ledger.TaskDone, 1)})
	}
	if err := s.PutRecords(sent); err != nil {
		t.Fatal(err)
	}
	for _, lim := range []int{1, 2, 3, 100} {
		var got []uint64
		var after Cursor
		for pages := 0; ; pages++ {
			recs, next, err := s.Range(ctx, 15, 40, after, lim, 1<<20)
			if err != nil || pages > 10 {
				t.Fatalf("limit %d: %v after %d pages", lim, err, pages)
			}
			for _, r := range recs {
				got = append(got, r.Task.Seq)
			}
			if next == nil {
				break
			}
			after = *next
		}
		// Index 20 holds seqs 100, 99, 98; 21: 97, 96, 95; 22: 94.
		if want := []uint64{98, 99, 100, 95, 96, 97, 94}; !slices.Equal(got, want) {
			t.Fatalf("limit %d: read %v, want %v", lim, got, want)
		}
	}
	if recs, _, _ := s.Range(ctx, 0, 12, Cursor{}, 100, 1<<20); len(recs) != 3 {
		t.Fatalf("(0, 12]: %d records, want the 3 put", len(recs))
	}
	if err := s.Filled(Gap{15, 40}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Covers(0, 50); !ok {
		t.Fatal("a filled store does not cover (0, 50]")
	}
	if p, _ := s.List(ctx, Query{Org: "c", Limit: 100}); len(p.Records) != 7 {
		t.Fatalf("the fetched records are not listed: %d", len(p.Records))
	}
}

// TestCheckPage: an answer with a record outside the range, out of
// order, or a cursor that does not follow its records is refused.
func TestCheckPage(t *testing.T) {
	rec := func(idx, seq uint64) Record { return Record{Index: idx, Task: ledger.Task{ID: "t", Seq: seq}} }
	g := Gap{10, 20}
	for _, tc := range []struct {
		name string
		p    rangeResponse
		ok   bool
	}{
		{"good", rangeResponse{Records: []Record{rec(11, 5), rec(11, 6), rec(20, 1)}, Next: &Cursor{20, 1}}, true},
		{"last page", rangeResponse{Records: []Record{rec(12, 1)}}, true},
		{"empty", rangeResponse{}, true},
		{"below", rangeResponse{Records: []Record{rec(10, 5)}}, false},
		{"above", rangeResponse{Records: []Record{rec(21, 5)}}, false},
		{"out of order", rangeResponse{Records: []Record{rec(12, 5), rec(11, 6)}}, false},
		{"twice", rangeResponse{Records: []Record{rec(12, 5), rec(12, 5)}}, false},
		{"cursor behind", rangeResponse{Records: []Record{rec(12, 5)}, Next: &Cursor{11, 1}}, false},
		{"cursor without records", rangeResponse{Next: &Cursor{12, 1}}, false},
	} {
		if err := checkPage(g, Cursor{}, tc.p); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
