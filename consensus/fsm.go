package consensus

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
)

// fsm adapts a *ledger.Ledger to raft.BatchingFSM. The ledger is not safe
// for concurrent use: Apply and Restore take the write lock, readers the
// read lock. Raft calls Apply, ApplyBatch, Snapshot and Restore from one
// goroutine, so the notifications after an apply go out in log order.
type fsm struct {
	mu sync.RWMutex
	l  *ledger.Ledger

	checkInvariants bool
	log             *slog.Logger
	// invErr is the first invariant violation seen (guarded by mu).
	invErr error
	// halted is set when an entry of a newer command version than this
	// ledger applies reached the FSM (guarded by mu): from there on no
	// entry is applied and no snapshot taken, so that this replica stops
	// at a true state instead of skipping the entry and diverging. A
	// restored snapshot clears it (the state is then the snapshot's).
	halted error
	// applied is closed and replaced after every batch and restore (guarded
	// by mu): waitApplied sleeps on it.
	applied chan struct{}
	// seen is the last Raft index given to the FSM, of any type, or the
	// restored ledger's index (guarded by mu): the leader's dry run waits
	// on it.
	seen uint64

	// afterApply is called for each applied command entry, outside the lock,
	// in log order. afterRestore is called after a snapshot replaced the
	// state.
	afterApply   func(res *ledger.Result)
	afterRestore func(index uint64)
	// afterConfiguration is called, outside the lock, after a batch that
	// held a configuration entry.
	afterConfiguration func()
	// afterBatch is called, outside the lock, after every batch: on the
	// leader a batch follows an advance of the commit index.
	afterBatch func()

	// replay counts the command entries applied since the state the
	// newest snapshot holds (snapshotpace.go).
	replay replayCost
	// catchUp times the start's replay of the log after the snapshot
	// (snapshotpace.go); nil when there is none to time (guarded by mu).
	catchUp *catchUp
}

var _ raft.BatchingFSM = (*fsm)(nil)

func newFSM(checkInvariants bool, log *slog.Logger) *fsm {
	return &fsm{l: ledger.New(), checkInvariants: checkInvariants, log: log, applied: make(chan struct{})}
}

// Apply is raft.FSM.Apply; it returns a ledger.Result for command entries.
func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies a batch under one write lock. Configuration entries
// (which raft also passes here) get a nil response.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	results := make([]*ledger.Result, 0, len(logs))
	f.mu.Lock()
	configuration := false
	for i, e := range logs {
		f.seen = max(f.seen, e.Index)
		if e.Type != raft.LogCommand {
			configuration = configuration || e.Type == raft.LogConfiguration
			continue
		}
		if f.halted != nil {
			out[i] = ledger.Result{Index: e.Index, Err: &ledger.Error{Code: ledger.CodeBadVersion, Msg: f.halted.Error()}}
			continue
		}
		f.replay.add(len(e.Data))
		res, newer := f.l.ApplyKnown(e.Index, e.Data)
		out[i] = res
		if newer != nil {
			f.halt(newer)
			continue
		}
		results = append(results, &res)
		if f.checkInvariants && f.invErr == nil {
			if err := f.l.CheckInvariants(); err != nil {
				f.invErr = fmt.Errorf("after entry %d (%s): %w", e.Index, res.Kind, err)
				f.log.Error("consensus: ledger invariant broken", "index", e.Index, "err", err)
			}
		}
	}
	if len(logs) > 0 {
		f.catchUp = f.catchUp.note(logs[0].Index, f.seen, f.log)
	}
	f.signalLocked()
	f.mu.Unlock()
	if f.afterApply != nil {
		for _, r := range results {
			f.afterApply(r)
		}
	}
	if configuration && f.afterConfiguration != nil {
		f.afterConfiguration()
	}
	if f.afterBatch != nil {
		f.afterBatch()
	}
	return out
}

// halt stops the FSM at an entry of a command version above this ledger's:
// a command of a newer build, which the peers that know it applied.
// Skipping it would leave this replica's state different from theirs at
// every later index.
func (f *fsm) halt(newer error) {
	f.halted = fmt.Errorf("%w: this peer stopped applying the log so that its state does not diverge; upgrade its binary and restart it (docs/LEDGER.md, versions and upgrades)", newer)
	f.log.Error("consensus: stopped applying the log at an entry of a newer command version", "err", f.halted)
}

// haltedError is why the FSM stopped applying the log, nil while it
// applies.
func (f *fsm) haltedError() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halted
}

// Snapshot serialises the ledger under the read lock. Raft may call Persist
// concurrently with later Applies, and the ledger has no copy-on-write, so
// the bytes are taken now; Persist only writes them out.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	var buf bytes.Buffer
	f.mu.RLock()
	err := f.halted
	if err == nil {
		err = f.l.WriteSnapshot(&buf)
	}
	f.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("snapshot ledger: %w", err)
	}
	f.replay.reset()
	return &fsmSnapshot{data: buf.Bytes()}, nil
}

// Restore replaces the state with a snapshot. The new ledger is built aside
// and swapped in only if the snapshot restores cleanly, so a bad snapshot
// leaves the current state in place.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	nl := ledger.New()
	if err := nl.Restore(rc); err != nil {
		return fmt.Errorf("restore ledger: %w", err)
	}
	f.mu.Lock()
	f.l = nl
	f.halted = nil
	f.replay.reset()
	idx := nl.AppliedIndex()
	f.seen = max(f.seen, idx)
	if f.checkInvariants && f.invErr == nil {
		if err := nl.CheckInvariants(); err != nil {
			f.invErr = fmt.Errorf("after restore at %d: %w", idx, err)
		}
	}
	f.signalLocked()
	f.mu.Unlock()
	if f.afterRestore != nil {
		f.afterRestore(idx)
	}
	return nil
}

func (f *fsm) signalLocked() {
	close(f.applied)
	f.applied = make(chan struct{})
}

// appliedIndex is the ledger's applied index: the last command entry it was
// given (non-command raft entries never reach it).
func (f *fsm) appliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.l.AppliedIndex()
}

// waitApplied blocks until the ledger has applied index idx.
func (f *fsm) waitApplied(ctx context.Context, idx uint64) error {
	for {
		f.mu.RLock()
		at, ch, halted := f.l.AppliedIndex(), f.applied, f.halted
		f.mu.RUnlock()
		if at >= idx {
			return nil
		}
		if halted != nil {
			return errorf(CodeHalted, "waiting for index %d: %v", idx, halted)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return errorf(CodeTimeout, "waiting for index %d (applied %d): %v", idx, at, ctx.Err())
		}
	}
}

// seenIndex is the last Raft index given to the FSM, and the channel closed
// at the next batch or restore.
func (f *fsm) seenIndex() (uint64, <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.seen, f.applied
}

func (f *fsm) view(fn func(*ledger.Ledger)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.l)
}

func (f *fsm) invariantError() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.invErr
}

type fsmSnapshot struct{ data []byte }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
