package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/runner"
)

// The data directory's retention (docs/CONFIG.md, "Retention"): the files
// of finished tasks leave blobs/, outputs/ and tasks/ after the times of
// config.yaml's retention section. What a task that is not finished needs
// is never removed, nor the directory of a task whose outputs could not be
// delivered (its end reason says runner.OutputsNotDelivered). The first
// sweep, once the peer has caught up with the log, also removes every
// outputs' staging directory (tasks/<id>/outputs-N) of a finished task
// left behind by a previous run of the peer (the executor's removal after
// keep_task_dirs does not survive a restart).

// retainedTask is what a sweep knows of a task named on disk.
type retainedTask struct {
	// known: the ledger holds the task. A task the ledger no longer holds
	// left the state after it finished (the federation's retention of
	// terminal tasks).
	known bool
	// finished: terminal, with no segment open (a cancelled task's run
	// may still be stopping).
	finished    bool
	endedMs     int64
	undelivered bool
}

// retentionView is the part of the ledger a sweep reads, taken under one
// read lock.
type retentionView struct {
	tasks map[string]retainedTask
	// liveInputs are the input digests of every unfinished task.
	liveInputs map[string]bool
}

// newRetentionView reads what a sweep of the task IDs ids needs from l.
func newRetentionView(l *ledger.Ledger, ids []string) retentionView {
	v := retentionView{tasks: make(map[string]retainedTask, len(ids)), liveInputs: map[string]bool{}}
	for _, id := range ids {
		t, ok := l.Task(id)
		if !ok {
			v.tasks[id] = retainedTask{finished: true}
			continue
		}
		open := len(t.Segments) > 0 && t.Segments[len(t.Segments)-1].EndMs == 0
		v.tasks[id] = retainedTask{known: true, finished: t.State.Terminal() && !open, endedMs: t.EndedMs,
			undelivered: strings.Contains(t.Reason, runner.OutputsNotDelivered)}
	}
	for _, t := range l.Tasks(ledger.TaskFilter{States: []ledger.TaskState{ledger.TaskQueued, ledger.TaskAssigned, ledger.TaskRunning}}) {
		for _, d := range t.Spec.InputDigests {
			v.liveInputs[d] = true
		}
	}
	return v
}

// sweepResult counts what a sweep removed and what it could not.
type sweepResult struct {
	outputs, blobs, tasks, staging int
	failed                         []error
}

// retentionSweep is one sweep of the data directory dir.
type retentionSweep struct {
	dir string
	cfg config.RetentionConfig
	now time.Time
	// startup also removes the outputs' staging directories of finished
	// tasks, whatever their age.
	startup bool
}

// taskIDsOnDisk lists the task directories under outputs/ and tasks/.
func (s retentionSweep) taskIDsOnDisk() []string {
	var ids []string
	for _, sub := range []string{config.OutputsDir, config.TasksDir} {
		for _, e := range readDir(filepath.Join(s.dir, sub)) {
			if e.IsDir() {
				ids = append(ids, e.Name())
			}
		}
	}
	return ids
}

// run removes what the configuration lets go, given the ledger's view.
func (s retentionSweep) run(v retentionView) sweepResult {
	var r sweepResult
	if s.cfg.Outputs > 0 {
		r.outputs = s.sweepTaskDirs(config.OutputsDir, s.cfg.Outputs, v, &r)
	}
	if s.cfg.Tasks > 0 {
		r.tasks = s.sweepTaskDirs(config.TasksDir, s.cfg.Tasks, v, &r)
	}
	if s.startup {
		r.staging = s.sweepStaging(v, &r)
	}
	if s.cfg.Blobs > 0 {
		r.blobs = s.sweepBlobs(v, &r)
	}
	return r
}

// expired says whether a finished task's files are older than keep: by
// the task's end when the ledger knows it, else by the directory's time.
func (s retentionSweep) expired(t retainedTask, info fs.FileInfo, keep time.Duration) bool {
	end := info.ModTime()
	if t.known && t.endedMs > 0 {
		end = time.UnixMilli(t.endedMs)
	}
	return s.now.Sub(end) >= keep
}

// sweepTaskDirs removes sub/<task-id>/ of the finished tasks ended more
// than keep ago.
func (s retentionSweep) sweepTaskDirs(sub string, keep time.Duration, v retentionView, r *sweepResult) int {
	n := 0
	for _, e := range readDir(filepath.Join(s.dir, sub)) {
		t, ok := v.tasks[e.Name()]
		if !e.IsDir() || !ok || !t.finished || t.undelivered {
			continue
		}
		info, err := e.Info()
		if err != nil || !s.expired(t, info, keep) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, sub, e.Name())); err != nil {
			r.failed = append(r.failed, err)
			continue
		}
		n++
	}
	return n
}

// sweepStaging removes tasks/<id>/outputs-N of the finished tasks whose
// outputs were delivered.
func (s retentionSweep) sweepStaging(v retentionView, r *sweepResult) int {
	n := 0
	for _, e := range readDir(filepath.Join(s.dir, config.TasksDir)) {
		t, ok := v.tasks[e.Name()]
		if !e.IsDir() || !ok || !t.finished || t.undelivered {
			continue
		}
		taskDir := filepath.Join(s.dir, config.TasksDir, e.Name())
		for _, se := range readDir(taskDir) {
			if !se.IsDir() || !strings.HasPrefix(se.Name(), "outputs-") {
				continue
			}
			if err := os.RemoveAll(filepath.Join(taskDir, se.Name())); err != nil {
				r.failed = append(r.failed, err)
				continue
			}
			n++
		}
	}
	return n
}

// sweepBlobs removes blobs/<sha256> unchanged for cfg.Blobs that no
// unfinished task names. A blob uploaded for a submit still on its way is
// recent, so it stays.
func (s retentionSweep) sweepBlobs(v retentionView, r *sweepResult) int {
	n := 0
	for _, e := range readDir(filepath.Join(s.dir, config.BlobsDir)) {
		if !e.Type().IsRegular() || !ledger.ValidDigest(e.Name()) || v.liveInputs[e.Name()] {
			continue
		}
		info, err := e.Info()
		if err != nil || s.now.Sub(info.ModTime()) < s.cfg.Blobs {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, config.BlobsDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.failed = append(r.failed, err)
			continue
		}
		n++
	}
	return n
}

// readDir lists dir, nothing when it cannot be read.
func readDir(dir string) []fs.DirEntry {
	es, _ := os.ReadDir(dir)
	return es
}

// keepRetention sweeps the data directory once the peer is ready, then
// every retention.interval, until the node closes.
func (n *Node) keepRetention(ctx context.Context) {
	startup := true
	every := n.cfg.Retention.Interval
	if every <= 0 {
		every = config.DefaultRetentionInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n.sweepDataDir(startup)
		startup = false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweepDataDir runs one sweep and logs what it removed (one line a sweep).
func (n *Node) sweepDataDir(startup bool) {
	s := retentionSweep{dir: n.dir, cfg: n.cfg.Retention, now: n.now(), startup: startup}
	ids := s.taskIDsOnDisk()
	var v retentionView
	n.cons.View(func(l *ledger.Ledger) { v = newRetentionView(l, ids) })
	r := s.run(v)
	if r.outputs+r.blobs+r.tasks+r.staging > 0 {
		n.log.Info("retention: removed the files of finished tasks", "outputs", r.outputs, "tasks", r.tasks, "staging", r.staging, "blobs", r.blobs)
	}
	if len(r.failed) > 0 {
		n.log.Warn("retention: could not remove some files", "count", len(r.failed), "first", r.failed[0])
	}
}
