package consensus

import (
	"time"

	"github.com/hashicorp/raft"
)

// slowStore delays every write to the Raft log and stable store by
// delay() before doing it: a slow disk (slow fsync) for fault injection.
// Reads are not delayed — the log cache serves most of them anyway.
type slowStore struct {
	logs   raft.LogStore
	stable raft.StableStore
	delay  func() time.Duration
}

func (s *slowStore) wait() {
	if d := s.delay(); d > 0 {
		time.Sleep(d)
	}
}

func (s *slowStore) FirstIndex() (uint64, error)            { return s.logs.FirstIndex() }
func (s *slowStore) LastIndex() (uint64, error)             { return s.logs.LastIndex() }
func (s *slowStore) GetLog(index uint64, l *raft.Log) error { return s.logs.GetLog(index, l) }

func (s *slowStore) StoreLog(l *raft.Log) error {
	s.wait()
	return s.logs.StoreLog(l)
}

func (s *slowStore) StoreLogs(ls []*raft.Log) error {
	s.wait()
	return s.logs.StoreLogs(ls)
}

func (s *slowStore) DeleteRange(lo, hi uint64) error {
	s.wait()
	return s.logs.DeleteRange(lo, hi)
}

func (s *slowStore) Set(k, v []byte) error {
	s.wait()
	return s.stable.Set(k, v)
}

func (s *slowStore) Get(k []byte) ([]byte, error) { return s.stable.Get(k) }

func (s *slowStore) SetUint64(k []byte, v uint64) error {
	s.wait()
	return s.stable.SetUint64(k, v)
}

func (s *slowStore) GetUint64(k []byte) (uint64, error) { return s.stable.GetUint64(k) }

var (
	_ raft.LogStore    = (*slowStore)(nil)
	_ raft.StableStore = (*slowStore)(nil)
)
