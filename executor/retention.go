package executor

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultKeepTaskDirs is how long an attempt directory is kept after its
// run was delivered when the policy sets no keep_task_dirs: long enough
// for `peer logs` and a look at a failure.
const DefaultKeepTaskDirs = time.Hour

func (p Policy) keepTaskDirs() time.Duration {
	if p.KeepTaskDirs == 0 {
		return DefaultKeepTaskDirs
	}
	return p.KeepTaskDirs
}

// Discard removes a finished run's attempt directory (work directory,
// $TMPDIR, captured logs) and its outputs' staging directory once the
// caller has delivered what it needed from them, after the policy's
// keep_task_dirs. The task's checkpoint
// directory is kept: a later run restores it. A result that names no
// attempt directory of this executor is ignored. A peer that stops
// before the delay has passed leaves the directory behind.
func (e *ProcessExecutor) Discard(res Result) {
	dir, ok := e.attemptDir(res)
	if !ok {
		return
	}
	// outputs-N beside attempt-N (stagingDir).
	staging := filepath.Join(filepath.Dir(dir), "outputs-"+strings.TrimPrefix(filepath.Base(dir), "attempt-"))
	time.AfterFunc(e.cfg.Policy.keepTaskDirs(), func() {
		// RemoveAll does not follow symbolic links, and a run's
		// processes are all gone by the time its result exists.
		if err := os.RemoveAll(staging); err != nil {
			e.log.Warn("outputs staging directory: remove", "dir", staging, "err", err)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			e.log.Warn("task directory: remove", "dir", dir, "err", err)
			return
		}
		_ = os.Remove(filepath.Dir(dir)) // the task's own, if now empty
	})
}

// attemptDir is TasksDir/<id>/attempt-N of res, checked to be exactly that.
func (e *ProcessExecutor) attemptDir(res Result) (string, bool) {
	if res.WorkDir == "" || !validIdent(res.ID, maxTaskIDLen) {
		return "", false
	}
	dir := filepath.Dir(filepath.Clean(res.WorkDir))
	want := filepath.Join(e.cfg.TasksDir, res.ID)
	if filepath.Dir(dir) != want || !strings.HasPrefix(filepath.Base(dir), "attempt-") {
		return "", false
	}
	return dir, true
}
