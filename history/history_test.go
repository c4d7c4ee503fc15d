package history

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

func task(seq uint64, org, job string, st ledger.TaskState, ended int64) ledger.Task {
	return ledger.Task{ID: fmt.Sprintf("%s-%d", org, seq), Org: org, Seq: seq, State: st, EndedMs: ended,
		SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"./run"}, Job: job},
		Segments: []ledger.Segment{{Machine: org + "/m1", MachineOrg: org, StartMs: ended - 10, EndMs: ended, EnergyMilliJ: 7, Outcome: ledger.OutcomeDone}}}
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(filepath.Join(dir, FileName), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func seqs(p Page) []uint64 {
	var out []uint64
	for _, r := range p.Records {
		out = append(out, r.Task.Seq)
	}
	return out
}

// TestListFilters: each filter selects what it says, in submit order,
// and the whole record (segments included) comes back.
func TestListFilters(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	if err := s.Put(10, []ledger.Task{
		task(1, "a", "j1", ledger.TaskDone, 1000),
		task(3, "a", "j2", ledger.TaskFailed, 3000),
		task(2, "b", "j1", ledger.TaskCancelled, 2000),
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(11, []ledger.Task{task(4, "a", "j1", ledger.TaskDone, 4000)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		q    Query
		want []uint64
	}{
		{"all", Query{Limit: 100}, []uint64{1, 2, 3, 4}},
		{"org", Query{Org: "a", Limit: 100}, []uint64{1, 3, 4}},
		{"job", Query{Job: "j1", Limit: 100}, []uint64{1, 2, 4}},
		{"state", Query{States: []ledger.TaskState{ledger.TaskFailed, ledger.TaskCancelled}, Limit: 100}, []uint64{2, 3}},
		{"time", Query{EndedFromMs: 2000, EndedToMs: 3000, Limit: 100}, []uint64{2, 3}},
		{"from only", Query{EndedFromMs: 3500, Limit: 100}, []uint64{4}},
		{"org and job", Query{Org: "a", Job: "j1", Limit: 100}, []uint64{1, 4}},
		{"none", Query{Org: "c", Limit: 100}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.List(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seqs(p), tc.want) || p.Next != 0 {
				t.Fatalf("got %v (next %d), want %v", seqs(p), p.Next, tc.want)
			}
		})
	}
	p, _ := s.List(ctx, Query{Org: "a", Limit: 1})
	if r := p.Records[0]; r.Index != 10 || r.Task.ID != "a-1" || len(r.Task.Segments) != 1 || r.Task.Segments[0].EnergyMilliJ != 7 {
		t.Fatalf("record %+v", r)
	}
}

// TestPaging: pages of two walk the filtered listing without gaps or
// repeats, and the last page says so (Next 0).
func TestPaging(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	var ts []ledger.Task
	for i := uint64(1); i <= 7; i++ {
		ts = append(ts, task(i, []string{"a", "b"}[i%2], "j", ledger.TaskDone, int64(i)*1000))
	}
	if err := s.Put(5, ts); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	q := Query{Org: "b", Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p, err := s.List(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, seqs(p)...)
		if p.Next == 0 {
			break
		}
		q.After = p.Next
	}
	if !slices.Equal(got, []uint64{1, 3, 5, 7}) {
		t.Fatalf("pages gave %v", got)
	}
}

// TestPutTwiceAndReopen: a record written again (an entry applied again
// after a restart) stays one record, and the store survives a reopen.
func TestPutTwiceAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	for range 2 {
		if err := s.Put(9, []ledger.Task{task(1, "a", "", ledger.TaskDone, 5)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	if n, err := s.Len(); err != nil || n != 1 {
		t.Fatalf("%d records (%v), want 1", n, err)
	}
}

// TestBadQuery: a page size or time range out of bounds is refused as
// ErrBadQuery.
func TestBadQuery(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	for _, q := range []Query{
		{Limit: 0},
		{Limit: MaxLimit + 1},
		{Limit: 1, EndedFromMs: -1},
		{Limit: 1, EndedFromMs: 5, EndedToMs: 4},
	} {
		if _, err := s.List(context.Background(), q); !errors.Is(err, ErrBadQuery) {
			t.Errorf("%+v: %v, want ErrBadQuery", q, err)
		}
	}
}

// TestLockedFile: a second open of a file another store holds fails after
// the lock timeout instead of waiting forever.
func TestLockedFile(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	if _, err := Open(filepath.Join(dir, FileName), 50*time.Millisecond); err == nil {
		t.Fatal("a held file opened twice")
	}
}
