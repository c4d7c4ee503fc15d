package history

import (
	"time"

	"go.etcd.io/bbolt"
)

// Memory (issue 17: RSS within 2× from 10,000 to 1,000,000 finished
// tasks). bbolt reads the file through a shared read-only memory map, and
// every page a transaction reads stays mapped into the process, counted in
// its RSS as file-backed memory, until the kernel needs the memory back. A
// history store only appends: each write reads the path to the newest leaf
// of each bucket, which copy-on-write has moved to new pages since the
// previous write, so the pages touched, and the RSS, grew with the file
// (about 1.1 KiB a finished task) although none of them is used again.
// After each write and each listing the store drops its mapping of the
// pages (releaseMapped): the file and the kernel's page cache are
// unchanged, and a page read again is mapped again from the cache (a minor
// fault), so what stays in the RSS is what one operation touches.

// releaseEvery bounds how often the mapping is dropped: a burst of writes
// (a replica filling a gap) pays the system call once.
const releaseEvery = time.Second

// releaseMapped drops the process's mapping of the file's pages, at most
// once every releaseEvery. It runs inside a read transaction, which keeps
// bbolt from remapping the file meanwhile: the range is the one mapped.
func (s *Store) releaseMapped() {
	now := time.Now().UnixNano()
	last := s.released.Load()
	if now-last < int64(releaseEvery) || !s.released.CompareAndSwap(last, now) {
		return
	}
	_ = s.db.View(func(tx *bbolt.Tx) error {
		return dropMapping(s.db.Info().Data, tx.Size())
	})
}
