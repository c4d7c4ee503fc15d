package executor

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultDiskCheckInterval paces the disk-use check of each run.
const DefaultDiskCheckInterval = time.Second

// watchDisk kills the run once its directories use more than max bytes of
// disk (0: no limit). It measures allocated blocks, as du does, so a
// sparse file counts for what it takes. It is a watch, not a quota: a run
// can go over by what it writes in one interval.
func (e *ProcessExecutor) watchDisk(run *procRun, d taskDirs, max int64) (stop func()) {
	if max <= 0 {
		return func() {}
	}
	roots := []string{d.root}
	if d.checkpoint != "" {
		roots = append(roots, d.checkpoint)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(e.cfg.DiskCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var used int64
			for _, r := range roots {
				used += diskUsage(r)
			}
			if used > max {
				run.requestStop(ReasonDiskLimit, fmt.Sprintf("the run uses %d bytes of disk, the machine owner's limit is %d", used, max), 0)
				return
			}
		}
	}()
	return func() { close(done) }
}

// diskUsage is the disk allocated to the files under root, without
// following links, over at most maxWalkEntries entries.
func diskUsage(root string) int64 {
	var total int64
	n := 0
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > maxWalkEntries {
			return fs.SkipAll
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total
}
