// Package audit replays a stopped peer's Raft log through the ledger and
// checks the ledger's invariants after every entry (`peer verify`).
//
// A live peer only samples its state; the log holds every state the
// federation went through. Verify opens the peer's bolt log store and its
// snapshot store read-only, starts from the empty ledger when the log is
// complete (or from the oldest snapshot the log continues), applies every
// command entry with the same ledger.Apply the FSM uses, and after each
// entry runs ledger.CheckInvariants (PI_i ≤ Lim_i for every organisation,
// energy accounts equal to their segments, …) plus an explicit
// PI ≤ Lim and Σ user = Σ owner check. Every snapshot on disk is compared
// with the replay at its index. The first violation stops the replay and
// is reported with its index.
//
// Which entries are committed: hashicorp/raft v1.7 does not persist the
// commit index, and a follower's (or a deposed leader's) log may end with
// entries that were never committed. Options.UpTo bounds the replay to an
// index known to be committed, e.g. the applied index a live peer reported
// (GET /v1/ledger) before it was stopped; without it the whole log is
// replayed and the report says that its tail may hold uncommitted entries.
// Such entries were still produced by Apply from a valid state, so the
// invariants must hold for them too; only the final hash is not
// necessarily the federation's.
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Options tune Verify.
type Options struct {
	// UpTo replays the entries with an index ≤ UpTo only (0: the whole
	// log). It must be covered by the log or a snapshot.
	UpTo uint64
	// Check is run after every entry and after the base snapshot is
	// restored (default Invariants).
	Check func(*ledger.Ledger) error
	// CheckEvery runs Check after every CheckEvery-th command only (and
	// after the last one); default 1, every entry. The check costs time
	// proportional to the state, which keeps every finished task, so a
	// long history replays in time quadratic in its length; a larger
	// value trades the exact index of a violation (it is then reported at
	// the first checked index at or after it) for speed.
	CheckEvery int
	// Paced, when set, replaces CheckEvery: the check runs once the
	// commands since the last one reach the state's size (ledger.Size)
	// divided by PaceRatio, so that the checks together cost at most
	// about PaceRatio record visits per command: a replay linear in the
	// log, whatever the state's size. A small state (at most PaceRatio
	// records) is still checked after every command; a violation in a
	// large one is reported at the next check with the range of entries
	// that may have caused it (replay that range with CheckEvery 1).
	Paced bool
	// LockTimeout bounds the wait for raft.db's lock (default 1 s): a
	// running peer holds it.
	LockTimeout time.Duration
}

// PaceRatio is Options.Paced's budget: record visits of the check per
// command replayed.
const PaceRatio = 64

// Violation kinds.
const (
	// KindInvariant: the ledger's invariants do not hold after an entry
	// (or in a snapshot).
	KindInvariant = "invariant"
	// KindSnapshot: a snapshot is unreadable, damaged (CRC), refused by
	// ledger.Restore, or disagrees with the replay at its index.
	KindSnapshot = "snapshot"
	// KindLog: the log itself is broken: a missing entry, a term going
	// down, an index out of place.
	KindLog = "log"
)

// Violation is the first thing found wrong.
type Violation struct {
	// Index is the Raft index of the entry (or snapshot) at fault.
	Index uint64 `json:"index"`
	Kind  string `json:"kind"`
	// Command is the kind of the entry's command, when it decoded.
	Command string `json:"command,omitempty"`
	Message string `json:"message"`
}

func (v *Violation) Error() string {
	s := fmt.Sprintf("index %d: %s", v.Index, v.Kind)
	if v.Command != "" {
		s += " after " + v.Command
	}
	return s + ": " + v.Message
}

// SnapshotCheck is one snapshot on disk and what the replay made of it.
type SnapshotCheck struct {
	ID    string `json:"id"`
	Index uint64 `json:"index"` // Raft index
	Term  uint64 `json:"term"`
	// Applied and Hash are the ledger's, as recorded in the snapshot.
	Applied uint64 `json:"applied"`
	Hash    string `json:"hash"`
	// Base: the replay started from this snapshot. Matched: the replay
	// reached its index with the same applied index and hash. Neither:
	// before the base or past the end of the replay.
	Base    bool `json:"base,omitempty"`
	Matched bool `json:"matched,omitempty"`
}

// Report is what Verify found.
type Report struct {
	RaftDir string `json:"raft_dir"`
	// FirstIndex and LastIndex bound the entries in the log store (0, 0
	// when it is empty).
	FirstIndex uint64 `json:"first_index"`
	LastIndex  uint64 `json:"last_index"`
	// UpTo is Options.UpTo (0: the whole log).
	UpTo      uint64          `json:"up_to,omitempty"`
	Snapshots []SnapshotCheck `json:"snapshots,omitempty"`
	// BaseIndex is the Raft index of the base snapshot (0: the empty
	// ledger).
	BaseIndex uint64 `json:"base_index"`
	// Entries counts the log entries read, Commands those given to
	// ledger.Apply, Rejected the commands Apply refused as a whole and
	// RefusedDecisions the single decisions it refused inside accepted
	// batches: refusals are Apply's validation at work, not violations.
	Entries          int `json:"entries"`
	Commands         int `json:"commands"`
	Rejected         int `json:"rejected"`
	RefusedDecisions int `json:"refused_decisions"`
	// RejectedByCode counts rejections by their stable code,
	// RejectedByKind by command kind and code ("task_started bad_state").
	RejectedByCode map[string]int `json:"rejected_by_code,omitempty"`
	RejectedByKind map[string]int `json:"rejected_by_kind,omitempty"`
	// Checked counts the states the check ran on (every command's with
	// CheckEvery 1).
	Checked int `json:"checked"`
	// Index is the last Raft index replayed (or the base's, with no entry
	// after it); AppliedIndex and Hash are the ledger's state there.
	Index        uint64 `json:"index"`
	AppliedIndex uint64 `json:"applied_index"`
	Hash         string `json:"hash"`
	// Violation is nil when every check held.
	Violation *Violation `json:"violation,omitempty"`
	// Notes say what the replay could not establish (e.g. an uncommitted
	// tail).
	Notes []string `json:"notes,omitempty"`
}

// OK says no violation was found.
func (r *Report) OK() bool { return r.Violation == nil }

// Invariants is the default check: ledger.CheckInvariants, then PI_i ≤
// Lim_i for every organisation and Σ user energy = Σ owner energy, from
// the ledger's public view (a second, independent reading of the two
// properties issue 7 names).
func Invariants(l *ledger.Ledger) error {
	if err := l.CheckInvariants(); err != nil {
		return err
	}
	var user, owner int64
	for _, o := range l.Orgs() {
		if o.PIMilliW > o.LimitMilliW {
			return fmt.Errorf("organisation %s: PI %d mW over its limit %d mW", o.Name, o.PIMilliW, o.LimitMilliW)
		}
		user += o.Energy.UserMilliJ
		owner += o.Energy.OwnerSelfMilliJ + o.Energy.OwnerOthersMilliJ
	}
	if user != owner {
		return fmt.Errorf("energy: %d mJ credited to users, %d mJ to owners", user, owner)
	}
	return nil
}

// ErrInUse is returned when raft.db is locked by a running peer.
var ErrInUse = errors.New("the Raft log is in use (is the peer running? stop it first)")

// VerifyDataDir is Verify on DATA/raft.
func VerifyDataDir(ctx context.Context, dataDir string, opt Options) (*Report, error) {
	return Verify(ctx, filepath.Join(dataDir, "raft"), opt)
}

// Verify replays the log in raftDir (raft.db and snapshots/). The error is
// for what prevented the audit (no log, locked, unreadable store); what
// the audit found is in Report.Violation.
func Verify(ctx context.Context, raftDir string, opt Options) (*Report, error) {
	if opt.Check == nil {
		opt.Check = Invariants
	}
	if opt.CheckEvery <= 0 {
		opt.CheckEvery = 1
	}
	if opt.LockTimeout <= 0 {
		opt.LockTimeout = time.Second
	}
	rep := &Report{RaftDir: raftDir, UpTo: opt.UpTo, RejectedByCode: map[string]int{}, RejectedByKind: map[string]int{}}
	dbPath := filepath.Join(raftDir, consensus.RaftDBFile)
	if _, err := os.Stat(dbPath); err != nil {
		return nil, fmt.Errorf("verify %s: no Raft log (is it a peer's data directory?): %w", raftDir, err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: dbPath, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: opt.LockTimeout}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("verify %s: %w", dbPath, ErrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("verify: open %s read-only: %w", dbPath, err)
	}
	defer store.Close()
	if rep.FirstIndex, err = store.FirstIndex(); err != nil {
		return nil, fmt.Errorf("verify: %s: first index: %w", dbPath, err)
	}
	if rep.LastIndex, err = store.LastIndex(); err != nil {
		return nil, fmt.Errorf("verify: %s: last index: %w", dbPath, err)
	}
	snaps, err := listSnapshots(filepath.Join(raftDir, consensus.SnapshotDir))
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}

	// The end of the replay.
	end := rep.LastIndex
	if opt.UpTo > 0 {
		known := rep.LastIndex
		if n := len(snaps); n > 0 {
			known = max(known, snaps[n-1].meta.Index)
		}
		if opt.UpTo > known {
			return nil, fmt.Errorf("verify %s: --upto %d is past what this peer holds (log %d-%d, newest snapshot at %d)", raftDir, opt.UpTo, rep.FirstIndex, rep.LastIndex, known)
		}
		end = opt.UpTo
	}
	// The base: the empty ledger when the log starts at 1 (or is empty
	// and no snapshot exists), else the oldest snapshot from which the log
	// continues without a gap, at or before end.
	l := ledger.New()
	from := uint64(1)
	var base *diskSnapshot
	if rep.LastIndex == 0 && len(snaps) > 0 {
		// A log compacted whole (peer recover leaves one snapshot and no
		// entry): the newest snapshot at or before end is the state.
		if opt.UpTo == 0 {
			end = snaps[len(snaps)-1].meta.Index
		}
		for i := len(snaps) - 1; i >= 0; i-- {
			if snaps[i].meta.Index <= end {
				base = &snaps[i]
				break
			}
		}
		if base == nil {
			return nil, fmt.Errorf("verify %s: the log is empty and no snapshot at or before %d is readable; cannot replay", raftDir, end)
		}
	} else if rep.FirstIndex > 1 {
		for i := range snaps {
			s := &snaps[i]
			if s.meta.Index+1 >= rep.FirstIndex && s.meta.Index <= end {
				base = s
				break
			}
		}
		if base == nil {
			return nil, fmt.Errorf("verify %s: the log starts at index %d and no snapshot at or after index %d and at or before %d is readable; cannot replay",
				raftDir, rep.FirstIndex, rep.FirstIndex-1, end)
		}
	}
	for _, s := range snaps {
		rep.Snapshots = append(rep.Snapshots, SnapshotCheck{ID: s.meta.ID, Index: s.meta.Index, Term: s.meta.Term, Base: base != nil && s.meta.ID == base.meta.ID})
	}
	check := func(i int) *SnapshotCheck { return &rep.Snapshots[i] }
	// Every snapshot is read and restored (CRC, strict decode, recorded
	// hash, invariants) whether or not the replay uses it.
	restored := make([]*ledger.Ledger, len(snaps))
	for i, s := range snaps {
		sl, err := s.restore()
		if err != nil {
			rep.Violation = &Violation{Index: s.meta.Index, Kind: KindSnapshot, Message: fmt.Sprintf("snapshot %s: %v", s.meta.ID, err)}
			return rep, nil
		}
		restored[i] = sl
		check(i).Applied, check(i).Hash = sl.AppliedIndex(), sl.Hash()
	}
	if base != nil {
		for i := range snaps {
			if snaps[i].meta.ID == base.meta.ID {
				l = restored[i]
			}
		}
		from = base.meta.Index + 1
		rep.BaseIndex = base.meta.Index
		rep.Index = base.meta.Index
		if err := opt.Check(l); err != nil {
			rep.Violation = &Violation{Index: base.meta.Index, Kind: KindInvariant, Message: fmt.Sprintf("base snapshot %s: %v", base.meta.ID, err)}
			return rep, nil
		}
	}
	// Snapshots taken at the base index or later are compared when the
	// replay reaches them.
	compare := func(idx uint64) *Violation {
		for i, s := range snaps {
			if s.meta.Index != idx || check(i).Base {
				continue
			}
			sl := restored[i]
			if sl.AppliedIndex() != l.AppliedIndex() || sl.Hash() != l.Hash() {
				return &Violation{Index: idx, Kind: KindSnapshot, Message: fmt.Sprintf("snapshot %s records applied index %d, state hash %s; the replay reached applied index %d, hash %s",
					s.meta.ID, sl.AppliedIndex(), sl.Hash(), l.AppliedIndex(), l.Hash())}
			}
			check(i).Matched = true
		}
		return nil
	}
	// unchecked is the first command index not checked yet (0: none);
	// since counts the commands since the last check.
	var unchecked uint64
	since := 0
	due := func(n int) bool {
		if opt.Paced {
			return n*PaceRatio >= l.Size()
		}
		return n >= opt.CheckEvery
	}
	runCheck := func(idx uint64, kind string) *Violation {
		from := unchecked
		unchecked = 0
		rep.Checked++
		if err := opt.Check(l); err != nil {
			v := &Violation{Index: idx, Kind: KindInvariant, Command: kind, Message: err.Error()}
			if from != idx {
				v.Message = fmt.Sprintf("%v (%s: broken by one of the entries %d-%d)", err, pace(opt), from, idx)
			}
			return v
		}
		return nil
	}
	var prevTerm uint64
	if base != nil {
		prevTerm = base.meta.Term
		if v := compare(base.meta.Index); v != nil {
			rep.Violation = v
			return rep, nil
		}
	}
	for idx := from; idx <= end; idx++ {
		if idx%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("verify: at index %d: %w", idx, err)
			}
		}
		var e raft.Log
		if err := store.GetLog(idx, &e); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				rep.Violation = &Violation{Index: idx, Kind: KindLog, Message: fmt.Sprintf("entry %d is missing (log %d-%d)", idx, rep.FirstIndex, rep.LastIndex)}
				return rep, nil
			}
			return nil, fmt.Errorf("verify: read entry %d: %w", idx, err)
		}
		rep.Entries++
		if e.Index != idx {
			rep.Violation = &Violation{Index: idx, Kind: KindLog, Message: fmt.Sprintf("the entry stored at %d says index %d", idx, e.Index)}
			return rep, nil
		}
		if e.Term < prevTerm {
			rep.Violation = &Violation{Index: idx, Kind: KindLog, Message: fmt.Sprintf("term %d after term %d: a log's terms never go down", e.Term, prevTerm)}
			return rep, nil
		}
		prevTerm = e.Term
		rep.Index = idx
		if e.Type == raft.LogCommand {
			rep.Commands++
			res, newer := l.ApplyKnown(e.Index, e.Data)
			if newer != nil {
				// An entry of a newer build: skipping it would report
				// the states of a replica that diverged.
				return rep, fmt.Errorf("%w: this binary cannot replay past it; verify with a build that applies it", newer)
			}
			if res.Err != nil {
				rep.Rejected++
				rep.RejectedByCode[string(res.Err.Code)]++
				rep.RejectedByKind[string(res.Kind)+" "+string(res.Err.Code)]++
			}
			for _, d := range res.Decisions {
				if d.Err != nil {
					rep.RefusedDecisions++
				}
			}
			if unchecked == 0 {
				unchecked = idx
			}
			since++
			if due(since) {
				since = 0
				if v := runCheck(idx, string(res.Kind)); v != nil {
					rep.Violation = v
					return rep, nil
				}
			}
		}
		if v := compare(idx); v != nil {
			rep.Violation = v
			return rep, nil
		}
	}
	if unchecked != 0 {
		if v := runCheck(rep.Index, ""); v != nil {
			rep.Violation = v
			return rep, nil
		}
	}
	rep.AppliedIndex, rep.Hash = l.AppliedIndex(), l.Hash()
	switch {
	case opt.UpTo == 0 && rep.LastIndex > 0:
		rep.Notes = append(rep.Notes, "hashicorp/raft does not persist the commit index: the last entries of this log may never have been committed (a follower's or a deposed leader's tail); pass --upto with an index known committed (the applied index the live peer reported) to compare states across peers")
	case opt.UpTo > 0 && rep.Index < opt.UpTo:
		rep.Notes = append(rep.Notes, fmt.Sprintf("the replay ended at index %d, before --upto %d", rep.Index, opt.UpTo))
	}
	for _, s := range rep.Snapshots {
		if !s.Base && !s.Matched {
			rep.Notes = append(rep.Notes, fmt.Sprintf("snapshot %s (index %d) was outside the replay and was only checked on its own", s.ID, s.Index))
		}
	}
	if len(rep.RejectedByCode) == 0 {
		rep.RejectedByCode, rep.RejectedByKind = nil, nil
	}
	return rep, nil
}

// diskSnapshot is one snapshot of raft's FileSnapshotStore, read without
// the store (which writes a permission-test file when created).
type diskSnapshot struct {
	dir  string
	meta fileSnapshotMeta
}

// fileSnapshotMeta mirrors raft's meta.json: the SnapshotMeta fields and
// the CRC64 (ECMA) of state.bin.
type fileSnapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// listSnapshots reads every complete snapshot's metadata, oldest first.
func listSnapshots(dir string) ([]diskSnapshot, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	var out []diskSnapshot
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue // raft's snapshots in progress end in .tmp
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(p, "meta.json"))
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", e.Name(), err)
		}
		var m fileSnapshotMeta
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("snapshot %s: meta.json: %w", e.Name(), err)
		}
		out = append(out, diskSnapshot{dir: p, meta: m})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].meta, out[j].meta
		if a.Index != b.Index {
			return a.Index < b.Index
		}
		if a.Term != b.Term {
			return a.Term < b.Term
		}
		return a.ID < b.ID
	})
	return out, nil
}

// restore checks state.bin against its CRC and size and restores it into
// a fresh ledger (strict decode, recorded hash, invariants).
func (s *diskSnapshot) restore() (*ledger.Ledger, error) {
	f, err := os.Open(filepath.Join(s.dir, "state.bin"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	var buf bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(f, ledger.MaxSnapshotBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read state.bin: %w", err)
	}
	if n != s.meta.Size {
		return nil, fmt.Errorf("state.bin holds %d bytes, meta.json says %d", n, s.meta.Size)
	}
	if !bytes.Equal(h.Sum(nil), s.meta.CRC) {
		return nil, fmt.Errorf("state.bin does not match the CRC in meta.json (damaged)")
	}
	l := ledger.New()
	if err := l.Restore(&buf); err != nil {
		return nil, err
	}
	return l, nil
}

// pace says how often the check ran, for a violation's message.
func pace(opt Options) string {
	if opt.Paced {
		return fmt.Sprintf("the check runs once the commands since the last one reach the state's size / %d", PaceRatio)
	}
	return fmt.Sprintf("the check runs every %d commands", opt.CheckEvery)
}
