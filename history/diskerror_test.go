package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.etcd.io/bbolt"

	"github.com/coopgrid/coopgrid/internal/testcluster"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// failingDisk is a real store's write path with some writes failing, as a
// full or failing disk makes them fail: the next `armed` writes return an
// error and change nothing; every other one goes to the file.
type failingDisk struct {
	db     *bbolt.DB
	mu     sync.Mutex
	armed  int
	failed int
}

var errDisk = errors.New("write history.db: no space left on device")

func (d *failingDisk) Update(fn func(*bbolt.Tx) error) error {
	d.mu.Lock()
	fail := d.armed > 0
	if fail {
		d.armed--
		d.failed++
	}
	d.mu.Unlock()
	if fail {
		return errDisk
	}
	return d.db.Update(fn)
}

func (d *failingDisk) failNext(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = n
}

func (d *failingDisk) failures() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// openFailing opens a real store whose writes go through a failingDisk.
func openFailing(t *testing.T, dir string) (*Store, *failingDisk) {
	t.Helper()
	s := open(t, dir)
	d := &failingDisk{db: s.db}
	s.w = d
	return s, d
}

// TestFailedWriteLeavesAGap: a Put or Restored whose write fails leaves
// the records it lost as a gap — listed, not covered (so this peer never
// serves that range as whole), written to the file by the next write that
// succeeds, and never covered by what the file says it holds, even when
// every later write fails up to a restart.
func TestFailedWriteLeavesAGap(t *testing.T) {
	done := func(seq uint64) ledger.Task { return task(seq, "a", "j", ledger.TaskDone, 1) }
	for _, c := range []struct {
		name string
		// run drives the store; fail arms the failing writes.
		run func(t *testing.T, s *Store, fail func(int))
		// want are the gaps after run and after a reopen (and, for
		// reopen, a Restored of the peer's own snapshot at 12).
		want, reopened []Gap
	}{{
		name: "a failed Put, then a write that succeeds",
		run: func(t *testing.T, s *Store, fail func(int)) {
			fail(1)
			if err := s.Put(10, []ledger.Task{done(1)}); !errors.Is(err, errDisk) {
				t.Fatalf("Put: %v, want the disk's error", err)
			}
			s.Applied(10)
			if err := s.Put(11, []ledger.Task{done(2)}); err != nil {
				t.Fatal(err)
			}
			s.Applied(12)
		},
		want:     []Gap{{9, 10}},
		reopened: []Gap{{9, 10}},
	}, {
		name: "a failed Put, then every write fails up to the restart",
		run: func(t *testing.T, s *Store, fail func(int)) {
			if err := s.Put(8, []ledger.Task{done(1)}); err != nil {
				t.Fatal(err)
			}
			s.Applied(8)
			fail(100)
			if err := s.Put(10, []ledger.Task{done(2)}); err == nil {
				t.Fatal("Put succeeded on a failing disk")
			}
			s.Applied(10)
			if err := s.Put(11, []ledger.Task{done(3)}); err == nil {
				t.Fatal("Put succeeded on a failing disk")
			}
			s.Applied(12)
		},
		want: []Gap{{9, 10}, {10, 11}},
		// The file still says 8: the restored snapshot at 12 opens (8, 12].
		reopened: []Gap{{8, 12}},
	}, {
		name: "a failed Restored, then a write that succeeds",
		run: func(t *testing.T, s *Store, fail func(int)) {
			if err := s.Put(5, []ledger.Task{done(1)}); err != nil {
				t.Fatal(err)
			}
			s.Applied(5)
			fail(1)
			if err := s.Restored(9); !errors.Is(err, errDisk) {
				t.Fatalf("Restored: %v, want the disk's error", err)
			}
			s.Applied(12)
		},
		want:     []Gap{{5, 9}},
		reopened: []Gap{{5, 9}},
	}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, d := openFailing(t, dir)
			c.run(t, s, d.failNext)
			if g, err := s.Gaps(); err != nil || !slices.Equal(g, c.want) {
				t.Fatalf("gaps %v (%v), want %v", g, err, c.want)
			}
			for _, g := range c.want {
				if ok, _ := s.Covers(g.From, g.To); ok {
					t.Errorf("covers (%d, %d], whose records it lost", g.From, g.To)
				}
			}
			_ = s.Close() // may fail with the disk: what the file says counts
			s = open(t, dir)
			defer s.Close()
			if err := s.Restored(12); err != nil {
				t.Fatal(err)
			}
			if g, err := s.Gaps(); err != nil || !slices.Equal(g, c.reopened) {
				t.Fatalf("after a restart: gaps %v (%v), want %v", g, err, c.reopened)
			}
		})
	}
}

// members is a fixed membership: the replica's Members for two stores.
type members []peer.ID

func (m members) IsMember(p peer.ID) bool { return slices.Contains(m, p) }
func (m members) Others() []peer.ID       { return m }

// TestReplicaRefetchesWhatAFailedWriteLost: two peers' real stores and
// replicas over libp2p on loopback. B's disk fails the write of one
// forget's records (index 10); B goes on applying. Its replica fetches
// that range from A, and when storing the fetched page fails too, tries
// again after its backoff: in the end B holds the lost records, no gap,
// and covers the whole log, as A does.
func TestReplicaRefetchesWhatAFailedWriteLost(t *testing.T) {
	if testing.Short() {
		t.Skip("libp2p hosts")
	}
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	hA, hB := testcluster.NewHost(t, "a", dirA, psk), testcluster.NewHost(t, "b", dirB, psk)
	defer hA.Close()
	defer hB.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := hB.ConnectAddr(ctx, testcluster.Addr(t, "a", hA)); err != nil {
		t.Fatal(err)
	}
	a := open(t, dirA)
	defer a.Close()
	b, disk := openFailing(t, dirB)
	defer b.Close()

	// Both apply the same forgets at 5 to 12, two tasks each.
	for idx := uint64(5); idx <= 12; idx++ {
		ts := []ledger.Task{task(2*idx, "a", "j", ledger.TaskDone, 1), task(2*idx+1, "b", "j", ledger.TaskFailed, 1)}
		if err := a.Put(idx, ts); err != nil {
			t.Fatal(err)
		}
		a.Applied(idx)
		if idx == 10 {
			disk.failNext(1)
		}
		if err := b.Put(idx, ts); (err != nil) != (idx == 10) {
			t.Fatalf("B's Put at %d: %v", idx, err)
		}
		b.Applied(idx)
	}
	if g, _ := b.Gaps(); !slices.Equal(g, []Gap{{9, 10}}) {
		t.Fatalf("B's gaps %v, want (9, 10]", g)
	}
	// A serves; B fetches, and its first store of the page fails.
	ra := NewReplica(ReplicaConfig{Host: hA, Members: members{hB.ID()}, Store: a})
	defer ra.Close()
	disk.failNext(1)
	rb := NewReplica(ReplicaConfig{Host: hB, Members: members{hA.ID()}, Store: b, MaxPause: 2 * time.Second})
	defer rb.Close()

	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := b.Gaps()
		if err == nil && len(g) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's gaps still %v (%v)", g, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := disk.failures(); n != 2 {
		t.Fatalf("%d writes failed, want 2 (the Put and the first fetched page): the retry was not exercised", n)
	}
	if ok, _ := b.Covers(0, 12); !ok {
		t.Error("B does not cover (0, 12] after the refetch")
	}
	recs, _, err := b.Range(ctx, 9, 10, Cursor{}, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(recordIDs(recs)); got != "[a-20 b-21]" {
		t.Fatalf("B's records of index 10: %s, want [a-20 b-21]", got)
	}
}

func recordIDs(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Task.ID)
	}
	return out
}

// TestPutOfACoveredIndexWritesNothing: a restart replays the forgets since
// the last snapshot, whose records the file already holds: Put then writes
// nothing (a write armed to fail is not reached), while an index beyond
// what the file covers, or inside one of its gaps, is written.
func TestPutOfACoveredIndexWritesNothing(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	done := func(seq uint64) []ledger.Task { return []ledger.Task{task(seq, "a", "j", ledger.TaskDone, 1)} }
	for idx := uint64(3); idx <= 5; idx++ {
		if err := s.Put(idx, done(idx)); err != nil {
			t.Fatal(err)
		}
		s.Applied(idx)
	}
	if err := s.Restored(9); err != nil { // a gap (5, 9]
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, disk := openFailing(t, dir)
	defer s.Close()
	disk.failNext(1)
	if err := s.Put(4, done(4)); err != nil {
		t.Fatalf("Put of a covered index: %v", err)
	}
	if disk.failures() != 0 {
		t.Fatal("Put of a covered index wrote to the file")
	}
	for _, idx := range []uint64{7, 10} { // in the gap, beyond through
		disk.failNext(1)
		if err := s.Put(idx, done(idx)); !errors.Is(err, errDisk) {
			t.Fatalf("Put at %d: %v, want a write (that fails)", idx, err)
		}
	}
}
