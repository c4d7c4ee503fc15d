package history

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"
)

// What a store covers. A peer that applies every entry of the log records
// every forget_tasks in order; one that installs a snapshot skips the
// entries the snapshot covers, and with them the records of the tasks
// forgotten there. The store keeps, beside the records:
//
//   - byIndex: (forget index, seq) → nothing, so that the records of a range
//     of log indices can be read in order (what another peer asks for);
//   - meta "through": every forget_tasks at or below it was recorded here,
//     except in the gaps;
//   - gaps: from → to, the ranges (from, to] of log indices whose records
//     this store lacks because a snapshot skipped them. A gap leaves once
//     another member sent its records (replica.go).
var (
	byIndexBucket = []byte("by-index")
	metaBucket    = []byte("meta")
	gapsBucket    = []byte("gaps")
	throughKey    = []byte("through")
)

// Gap is a range (From, To] of log indices whose forgotten tasks the
// store lacks.
type Gap struct{ From, To uint64 }

func indexKey(index, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, index), seq)
}

// migrate builds byIndex from the records of a store written before it
// existed; it runs in Open's transaction.
func migrate(tx *bbolt.Tx) error {
	if tx.Bucket(byIndexBucket) != nil {
		return nil
	}
	bi, err := tx.CreateBucket(byIndexBucket)
	if err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(metaBucket); err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(gapsBucket); err != nil {
		return err
	}
	return tx.Bucket(tasksBucket).ForEach(func(k, v []byte) error {
		var r Record
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("record %x: %w", k, err)
		}
		return bi.Put(indexKey(r.Index, r.Task.Seq), nil)
	})
}

func through(tx *bbolt.Tx) uint64 {
	v := tx.Bucket(metaBucket).Get(throughKey)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func setThrough(tx *bbolt.Tx, index uint64) error {
	if index <= through(tx) {
		return nil
	}
	return tx.Bucket(metaBucket).Put(throughKey, binary.BigEndian.AppendUint64(nil, index))
}

// Applied notes that every entry up to index was applied and its
// forgotten tasks (if any) recorded; it is kept in memory and written at
// the next Put, Restored or Close, so that a restart does not take the
// entries since the last forget for a gap.
func (s *Store) Applied(index uint64) {
	for {
		at := s.applied.Load()
		if index <= at || s.applied.CompareAndSwap(at, index) {
			return
		}
	}
}

// Restored records that the state was replaced by a snapshot at index: the
// forget_tasks between what the store covers and index were never seen
// here, a gap to fill from another member. Restoring the peer's own last
// snapshot at start-up, which the store already covers, opens none.
//
// Should the write fail, the range is kept in memory as missed (from what
// the store is known to cover) and noted by the next write: the records
// are fetched all the same.
func (s *Store) Restored(index uint64) error {
	err := s.update(func(tx *bbolt.Tx) error {
		from := max(through(tx), s.applied.Load())
		if index <= from {
			return setThrough(tx, from)
		}
		if err := putGap(tx, Gap{From: from, To: index}); err != nil {
			return err
		}
		return setThrough(tx, index)
	})
	if err != nil {
		from := s.applied.Load()
		_ = s.db.View(func(tx *bbolt.Tx) error { from = max(from, through(tx)); return nil })
		if index > from {
			s.miss(Gap{From: from, To: index})
		}
		s.Applied(index)
		return fmt.Errorf("history: note the snapshot at %d (kept as a gap to fetch): %w", index, err)
	}
	s.Applied(index)
	return nil
}

// miss keeps g, a range whose records a failed write lost, until a write
// notes it in the file.
func (s *Store) miss(g Gap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.missed, g) {
		s.missed = append(s.missed, g)
	}
}

// unsaved returns the missed ranges not in the file yet.
func (s *Store) unsaved() []Gap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.missed)
}

// update runs fn in a write transaction that also notes the missed ranges
// as gaps, so that what the file says it covers never includes a range it
// lost without naming it; they leave memory once the transaction commits.
func (s *Store) update(fn func(tx *bbolt.Tx) error) error {
	pending := s.unsaved()
	err := s.w.Update(func(tx *bbolt.Tx) error {
		for _, g := range pending {
			if err := putGap(tx, g); err != nil {
				return err
			}
		}
		return fn(tx)
	})
	if err == nil && len(pending) > 0 {
		s.mu.Lock()
		s.missed = slices.DeleteFunc(s.missed, func(g Gap) bool { return slices.Contains(pending, g) })
		s.mu.Unlock()
	}
	return err
}

// putGap notes the gap g; one that starts where another does widens it.
func putGap(tx *bbolt.Tx, g Gap) error {
	b := tx.Bucket(gapsBucket)
	k := binary.BigEndian.AppendUint64(nil, g.From)
	if v := b.Get(k); len(v) == 8 {
		g.To = max(g.To, binary.BigEndian.Uint64(v))
	}
	return b.Put(k, binary.BigEndian.AppendUint64(nil, g.To))
}

// Gaps lists the ranges whose records the store lacks, in order: those in
// the file and the missed ones not noted there yet.
func (s *Store) Gaps() ([]Gap, error) {
	out := s.unsaved()
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(gapsBucket).ForEach(func(k, v []byte) error {
			g := Gap{From: binary.BigEndian.Uint64(k), To: binary.BigEndian.Uint64(v)}
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
			return nil
		})
	})
	slices.SortFunc(out, func(a, b Gap) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To)) })
	return out, err
}

// Covers says whether the store holds every forgotten task of the log
// indices (from, to]: it has seen them all and no gap overlaps.
func (s *Store) Covers(from, to uint64) (bool, error) {
	for _, g := range s.unsaved() {
		if g.From < to && from < g.To {
			return false, nil
		}
	}
	ok := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		if max(through(tx), s.applied.Load()) < to {
			return nil
		}
		c := tx.Bucket(gapsBucket).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			g := Gap{From: binary.BigEndian.Uint64(k), To: binary.BigEndian.Uint64(v)}
			if g.From < to && from < g.To {
				return nil
			}
		}
		ok = true
		return nil
	})
	return ok, err
}

// covered says whether the file itself says it holds the records of the
// forget at index: its through reaches index and no gap, noted or missed,
// holds it. (Covers also counts what was applied since the last write.)
func (s *Store) covered(index uint64) (bool, error) {
	for _, g := range s.unsaved() {
		if g.From < index && index <= g.To {
			return false, nil
		}
	}
	ok := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		if through(tx) < index {
			return nil
		}
		c := tx.Bucket(gapsBucket).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if binary.BigEndian.Uint64(k) < index && index <= binary.BigEndian.Uint64(v) {
				return nil
			}
		}
		ok = true
		return nil
	})
	return ok, err
}

// Cursor is a position in a range read: after the record of (Index, Seq).
type Cursor struct {
	Index uint64 `json:"index"`
	Seq   uint64 `json:"seq"`
}

// Range reads the records forgotten at log indices in (from, to], in
// (index, seq) order, after the cursor (zero: from the start), at most
// limit records and about maxBytes of encoded records. next is the cursor
// of the following page, nil when this one ends the range.
func (s *Store) Range(ctx context.Context, from, to uint64, after Cursor, limit, maxBytes int) (recs []Record, next *Cursor, err error) {
	start := indexKey(from+1, 0)
	if after.Index > from {
		start = indexKey(after.Index, after.Seq+1)
		if after.Seq == ^uint64(0) {
			start = indexKey(after.Index+1, 0)
		}
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		c, tasks := tx.Bucket(byIndexBucket).Cursor(), tx.Bucket(tasksBucket)
		size := 0
		for k, _ := c.Seek(start); k != nil; k, _ = c.Next() {
			idx, seq := binary.BigEndian.Uint64(k), binary.BigEndian.Uint64(k[8:])
			if idx > to {
				return nil
			}
			if len(recs) == limit || (len(recs) > 0 && size >= maxBytes) {
				last := recs[len(recs)-1]
				next = &Cursor{Index: last.Index, Seq: last.Task.Seq}
				return nil
			}
			if len(recs)%256 == 255 && ctx.Err() != nil {
				return ctx.Err()
			}
			v := tasks.Get(key(seq))
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %d: %w", seq, err)
			}
			recs = append(recs, r)
			size += len(v)
		}
		return nil
	})
	s.releaseMapped()
	if err != nil {
		return nil, nil, fmt.Errorf("history: read (%d, %d]: %w", from, to, err)
	}
	return recs, next, nil
}

// PutRecords stores records another member sent (each with the index of
// the forget that removed it), in one synced transaction. A record
// already held is written again, unchanged.
func (s *Store) PutRecords(recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	err := s.update(func(tx *bbolt.Tx) error {
		for _, r := range recs {
			if err := putRecord(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("history: store %d fetched records: %w", len(recs), err)
	}
	s.releaseMapped()
	return nil
}

func putRecord(tx *bbolt.Tx, r Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode %s: %w", r.Task.ID, err)
	}
	if err := tx.Bucket(tasksBucket).Put(key(r.Task.Seq), v); err != nil {
		return fmt.Errorf("store %s: %w", r.Task.ID, err)
	}
	if err := tx.Bucket(byIndexBucket).Put(indexKey(r.Index, r.Task.Seq), nil); err != nil {
		return fmt.Errorf("index %s: %w", r.Task.ID, err)
	}
	return nil
}

// Filled removes gap g once its records are stored.
func (s *Store) Filled(g Gap) error {
	s.mu.Lock()
	s.missed = slices.DeleteFunc(s.missed, func(m Gap) bool { return m == g })
	s.mu.Unlock()
	err := s.update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(gapsBucket)
		k := binary.BigEndian.AppendUint64(nil, g.From)
		if v := b.Get(k); len(v) == 8 && binary.BigEndian.Uint64(v) == g.To {
			return b.Delete(k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("history: close gap (%d, %d]: %w", g.From, g.To, err)
	}
	return nil
}

// CopyTo writes a consistent copy of the store to a new file at path (one
// read transaction: writers go on meanwhile), for an online backup. What
// it covers is written first, so that the copy, restored with a snapshot
// taken before it, opens no gap.
func (s *Store) CopyTo(path string) error {
	err := s.update(func(tx *bbolt.Tx) error { return setThrough(tx, s.applied.Load()) })
	if err == nil {
		err = s.db.View(func(tx *bbolt.Tx) error { return tx.CopyFile(path, 0o600) })
	}
	if err != nil {
		return fmt.Errorf("history: copy to %s: %w", path, err)
	}
	return nil
}
