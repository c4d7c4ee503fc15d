package history

import (
	"time"

	"github.com/coopgrid/coopgrid/internal/bboltmap"
)

// Memory (issue 17: RSS within 2× from 10,000 to 1,000,000 finished
// tasks). A history store only appends: each write reads the path to the
// newest leaf of each bucket, which copy-on-write has moved to new pages
// since the previous write, so the pages bbolt kept mapped, and the RSS,
// grew with the file (about 1.1 KiB a finished task) although none of them
// is used again. After each write and each listing the store drops its
// mapping of the pages (internal/bboltmap), so what stays in the RSS is
// what one operation touches.

// releaseEvery bounds how often the mapping is dropped: a burst of writes
// (a replica filling a gap) pays the system call once.
const releaseEvery = time.Second

// releaseMapped drops the process's mapping of the file's pages, at most
// once every releaseEvery.
func (s *Store) releaseMapped() {
	now := time.Now().UnixNano()
	last := s.released.Load()
	if now-last < int64(releaseEvery) || !s.released.CompareAndSwap(last, now) {
		return
	}
	_ = bboltmap.Release(s.db)
}
