// Package history is a peer's local store of the tasks that left the
// replicated state (issue 17): when the federation's retention rule lets a
// finished task go, the ledger's forget_tasks hands every peer the task's
// full record (ledger.Result.Forgotten) and each peer keeps its own
// organisation's here, in a bbolt file of the data directory
// (DATA/history.db), where `peer history` (GET /v1/history) reads it, in
// the manner of Slurm's accounting database behind sacct.
//
// The store is local and not replicated: each organisation keeps its own
// history, and no peer keeps or serves another organisation's
// (docs/HISTORY.md). Records are keyed by the task's federation-wide submit
// sequence, so a listing is in submit order and its cursor is a sequence;
// writing a record twice (an entry applied again after a restart) leaves
// one record.
package history

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"go.etcd.io/bbolt"
)

// FileName is the store's file in the data directory.
const FileName = "history.db"

// MaxLimit bounds one page.
const MaxLimit = 10_000

var tasksBucket = []byte("tasks")

// Record is one forgotten task as the store keeps it.
type Record struct {
	// Index is the log index of the forget_tasks that removed it.
	Index uint64      `json:"index"`
	Task  ledger.Task `json:"task"`
}

// Store is an open history file. It is safe for concurrent use (bbolt
// serialises writers and lets readers run beside them).
type Store struct {
	db *bbolt.DB
	// w is the file's write path: db itself, except in a test that makes
	// a write fail as a full or failing disk would (updater).
	w updater
	// applied is the last log index known applied with its records kept
	// (Applied; coverage.go), written to the file as "through" at the next
	// write and at Close.
	applied atomic.Uint64
	// released is when the file's pages were last unmapped from the
	// process (unix ns; unmap.go).
	released atomic.Int64

	mu sync.Mutex
	// missed are the ranges whose records a failed write lost (a Put or
	// Restored that returned an error), not noted in the file yet: the next
	// write notes them as gaps in its own transaction (update), and until
	// then Gaps and Covers count them (guarded by mu).
	missed []Gap
}

// updater is a read-write transaction on the file (*bbolt.DB).
type updater interface {
	Update(fn func(*bbolt.Tx) error) error
}

// Open opens (creating it if needed) the history file at path. It waits
// at most lockTimeout for the file's lock (another process holding it).
func Open(path string, lockTimeout time.Duration) (*Store, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: lockTimeout})
	if err != nil {
		return nil, fmt.Errorf("open history %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(tasksBucket); err != nil {
			return err
		}
		return migrate(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open history %s: %w", path, err)
	}
	return &Store{db: db, w: db}, nil
}

// Close writes what the store covers and closes the file. Should that
// write fail, the file keeps covering less than was applied, and the next
// start opens a gap for the rest (Restored), so nothing is lost unnoted.
func (s *Store) Close() error {
	err := s.update(func(tx *bbolt.Tx) error { return setThrough(tx, s.applied.Load()) })
	return errors.Join(err, s.db.Close())
}

// Put records tasks, forgotten at log index, in one transaction, synced
// to disk before it returns. The caller calls Applied(index) after it,
// also when it failed: the records are then lost here, and the index is
// noted as a gap that the replica fetches from another member (missed).
//
// An index the file already covers (a restart replaying the log since its
// last snapshot applies forgets whose records were written before the
// stop) is not written again: one read instead of a synced write.
func (s *Store) Put(index uint64, tasks []ledger.Task) error {
	if len(tasks) == 0 {
		return nil
	}
	if ok, err := s.covered(index); err == nil && ok {
		return nil
	}
	err := s.update(func(tx *bbolt.Tx) error {
		for _, t := range tasks {
			if err := putRecord(tx, Record{Index: index, Task: t}); err != nil {
				return err
			}
		}
		return setThrough(tx, max(index, s.applied.Load()))
	})
	if err != nil {
		s.miss(Gap{From: index - 1, To: index})
		return fmt.Errorf("history: record %d tasks of index %d (noted as a gap to fetch from another member): %w", len(tasks), index, err)
	}
	s.releaseMapped()
	return nil
}

func key(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Query selects records; zero fields select everything.
type Query struct {
	Org    string
	Job    string
	States []ledger.TaskState
	// EndedFromMs and EndedToMs bound the time the task ended (inclusive;
	// 0: unbounded).
	EndedFromMs, EndedToMs int64
	// After is the cursor: only tasks with a larger submit sequence (the
	// Next of the previous page; 0 from the start).
	After uint64
	// Limit is the page size, 1 to MaxLimit.
	Limit int
}

// ErrBadQuery wraps what is wrong with a Query.
var ErrBadQuery = errors.New("bad history query")

func (q *Query) validate() error {
	if q.Limit < 1 || q.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d: want 1 to %d", ErrBadQuery, q.Limit, MaxLimit)
	}
	if q.EndedFromMs < 0 || q.EndedToMs < 0 || (q.EndedToMs != 0 && q.EndedToMs < q.EndedFromMs) {
		return fmt.Errorf("%w: time range [%d, %d] ms", ErrBadQuery, q.EndedFromMs, q.EndedToMs)
	}
	return nil
}

func (q *Query) matches(t *ledger.Task) bool {
	switch {
	case q.Org != "" && t.Org != q.Org,
		q.Job != "" && t.Spec.Job != q.Job,
		len(q.States) > 0 && !slices.Contains(q.States, t.State),
		q.EndedFromMs != 0 && t.EndedMs < q.EndedFromMs,
		q.EndedToMs != 0 && t.EndedMs > q.EndedToMs:
		return false
	}
	return true
}

// Page is one page of a listing.
type Page struct {
	Records []Record
	// Next is the cursor of the next page, 0 when this one is the last.
	Next uint64
}

// List returns the records q selects, in submit order, one page of at most
// q.Limit. It scans from the cursor on, so a selective filter over a long
// history costs a scan of what it skips; ctx stops it.
func (s *Store) List(ctx context.Context, q Query) (Page, error) {
	if err := q.validate(); err != nil {
		return Page{}, err
	}
	var p Page
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(tasksBucket).Cursor()
		k, v := c.Seek(key(q.After + 1))
		if q.After == ^uint64(0) {
			k = nil
		}
		for n := 0; k != nil; k, v = c.Next() {
			if n++; n%4096 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %x: %w", k, err)
			}
			if !q.matches(&r.Task) {
				continue
			}
			if len(p.Records) == q.Limit {
				p.Next = p.Records[len(p.Records)-1].Task.Seq
				return nil
			}
			p.Records = append(p.Records, r)
		}
		return nil
	})
	s.releaseMapped()
	if err != nil {
		return Page{}, fmt.Errorf("history: list: %w", err)
	}
	return p, nil
}

// Len counts the records.
func (s *Store) Len() (int, error) {
	var n int
	err := s.db.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket(tasksBucket).Stats().KeyN
		return nil
	})
	return n, err
}
