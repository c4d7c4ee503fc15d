package consensus

import (
	"reflect"
	"time"
	"unsafe"

	"github.com/coopgrid/coopgrid/internal/bboltmap"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Memory (issue 17: RSS within 2× from 10,000 to 1,000,000 finished
// tasks). Raft's log in raft.db is append-mostly: bbolt keeps every page a
// read or an append touched mapped into the process, so the file-backed
// RSS grew towards the file's size (140 MiB in the 1M run) although only
// the newest pages are read again. The node drops that mapping every
// logMapRelease and after each snapshot the pacer takes (internal/bboltmap).
const logMapRelease = time.Minute

// raftDB is raft.db's bbolt handle inside raft-boltdb's store, which does
// not export it (raft-boltdb/v2 v2.3.1: BoltStore.conn). nil when the
// field is not there or not a *bbolt.DB (another version of raft-boltdb):
// then the map is not released, and TestRaftDBIsFound fails.
func raftDB(s *raftboltdb.BoltStore) *bbolt.DB {
	if s == nil {
		return nil
	}
	f := reflect.ValueOf(s).Elem().FieldByName("conn")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*bbolt.DB]() {
		return nil
	}
	return *(**bbolt.DB)(unsafe.Pointer(f.UnsafeAddr()))
}

// releaseLogMap drops this process's mapping of raft.db's pages.
func (n *Node) releaseLogMap() {
	if db := raftDB(n.store); db != nil {
		if err := bboltmap.Release(db); err != nil {
			n.log.Debug("consensus: releasing raft.db's memory map", "err", err)
		}
	}
}
