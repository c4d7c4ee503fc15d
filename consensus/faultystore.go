package consensus

import (
	"time"

	"github.com/hashicorp/raft"
)

// faultyStore is the Raft log and stable store under injected faults:
// every write first waits delay() (a slow disk, slow fsync); a log write
// then fails with fail() when that returns an error (a log store that
// refuses writes, as on a full disk; tests only — a failed stable-store
// write makes Raft panic, which the chaos harness's real full disk
// covers). Reads are left alone: the log cache serves most of them.
type faultyStore struct {
	logs   raft.LogStore
	stable raft.StableStore
	delay  func() time.Duration // nil: no delay
	fail   func() error         // nil: no failure
}

func (s *faultyStore) wait() {
	if s.delay != nil {
		if d := s.delay(); d > 0 {
			time.Sleep(d)
		}
	}
}

// before runs before a log write.
func (s *faultyStore) before() error {
	s.wait()
	if s.fail != nil {
		return s.fail()
	}
	return nil
}

func (s *faultyStore) FirstIndex() (uint64, error)            { return s.logs.FirstIndex() }
func (s *faultyStore) LastIndex() (uint64, error)             { return s.logs.LastIndex() }
func (s *faultyStore) GetLog(index uint64, l *raft.Log) error { return s.logs.GetLog(index, l) }

func (s *faultyStore) StoreLog(l *raft.Log) error {
	if err := s.before(); err != nil {
		return err
	}
	return s.logs.StoreLog(l)
}

func (s *faultyStore) StoreLogs(ls []*raft.Log) error {
	if err := s.before(); err != nil {
		return err
	}
	return s.logs.StoreLogs(ls)
}

func (s *faultyStore) DeleteRange(lo, hi uint64) error {
	if err := s.before(); err != nil {
		return err
	}
	return s.logs.DeleteRange(lo, hi)
}

func (s *faultyStore) Set(k, v []byte) error {
	s.wait()
	return s.stable.Set(k, v)
}

func (s *faultyStore) Get(k []byte) ([]byte, error) { return s.stable.Get(k) }

func (s *faultyStore) SetUint64(k []byte, v uint64) error {
	s.wait()
	return s.stable.SetUint64(k, v)
}

func (s *faultyStore) GetUint64(k []byte) (uint64, error) { return s.stable.GetUint64(k) }

var (
	_ raft.LogStore    = (*faultyStore)(nil)
	_ raft.StableStore = (*faultyStore)(nil)
)
