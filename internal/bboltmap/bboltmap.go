// Package bboltmap drops the pages of a bbolt file's memory map from the
// process (issue 17: a peer's RSS within 2× from 10,000 to 1,000,000
// finished tasks). bbolt reads its file through a shared read-only map,
// and every page a transaction reads stays mapped, counted in the RSS as
// file-backed memory, until the kernel wants the memory back: an
// append-mostly file (the history store, Raft's log) read at its newest
// pages after each write made the RSS grow with the file although those
// pages are not read again. Release unmaps them from the process only: the
// file and the kernel's page cache are unchanged, and a page read again is
// mapped again from the cache (a minor fault).
package bboltmap

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.etcd.io/bbolt"
)

// Release drops the process's mapping of db's pages. It runs inside a read
// transaction, which keeps bbolt from remapping the file meanwhile, so the
// range dropped is the one mapped.
func Release(db *bbolt.DB) error {
	return db.View(func(tx *bbolt.Tx) error {
		return dropMapping(db.Info().Data, tx.Size())
	})
}

// MappedKiB is the resident size, in KiB, of this process's mappings of
// the file at path (the Rss lines of /proc/self/smaps for them): what
// Release drops. It fails where there is no /proc.
func MappedKiB(path string) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// A mapping's header line starts with its address range; its
		// sixth field, when there is one, is the mapped file.
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[5] == path
			continue
		}
		if in && len(fields) == 3 && fields[0] == "Rss:" {
			n, err := strconv.Atoi(fields[1])
			if err != nil {
				return 0, fmt.Errorf("smaps: %q: %w", sc.Text(), err)
			}
			total += n
		}
	}
	return total, sc.Err()
}
