package supervise

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The end marker is how a run's end reaches the journal when the peer
// died before journaling it (kill -9, crash): the supervisor creates it
// when the peer opens the run, before it starts the task, holds an
// exclusive flock on it until the run is over, and writes into it when
// the run was over — every process of it gone — before it reports the
// end to the peer. The peer's next
// boot waits for the lock of every run the journal left open (so that a
// supervisor still killing its run is not overtaken) and journals the
// run as ended at the marker's time. A marker with no time (its
// supervisor was killed before it could write) leaves the boot's time,
// an upper bound.
//
// The lock, not a pid, says whether the supervisor still holds the run:
// it goes with the run (or the process), and a pid can be reused.

// EndMarkerFile is where the supervisor of attempt's run wrote its marker
// before issue 22: a journal start record that names no marker
// (JournalRecord.Marker) had it there.
func EndMarkerFile(tasksDir, task string, attempt int) string {
	return filepath.Join(tasksDir, task, "attempt-"+strconv.Itoa(attempt), "supervisor.end")
}

// MarkersDir, under the tasks directory, holds one end marker per machine
// (SlotMarker), reused by each of its runs in turn: a machine runs one
// task at a time, and a run's supervisor releases the marker before it
// reports the end, so the next run on the machine finds it free. Reusing
// the file saves creating (and later removing) an inode per run. A task
// ID starts with a letter or digit: no task directory is named so.
const MarkersDir = ".markers"

// SlotMarker is the marker of the machine numbered slot, relative to the
// tasks directory (as the journal records it).
func SlotMarker(slot int) string {
	return filepath.Join(MarkersDir, strconv.Itoa(slot)+".end")
}

// SlotRunMarker is the marker of the k-th run in progress at once on the
// machine numbered slot (k from 0: SlotMarker); a machine with several
// CPUs runs several tasks at once, each needing a marker of its own.
func SlotRunMarker(slot, k int) string {
	if k == 0 {
		return SlotMarker(slot)
	}
	return filepath.Join(MarkersDir, strconv.Itoa(slot)+"."+strconv.Itoa(k)+".end")
}

// endMarker is the supervisor's open, locked marker; nil when the peer
// named none or it could not be created (the boot then journals its own
// time, an upper bound).
type endMarker struct {
	f       *os.File
	written bool
	// kept, when set, takes the file back at close, for the marker's
	// next run.
	kept *markerFiles
	path string
}

// markerFiles keeps the markers' files open between their runs: each
// machine's runs reuse the same few markers, and an open and a close per
// run were a good part of the supervisor's file work (issue 22). A file is
// held by one run at a time; a marker asked for while its file is held
// is opened anew (and then finds the lock taken, as before).
type markerFiles struct {
	mu   sync.Mutex
	free map[string]*os.File
}

// markerFilesMax bounds the files kept; all are closed when it is reached.
const markerFilesMax = 1024

// open is openEndMarker, with a kept file when there is one.
func (k *markerFiles) open(path string) *endMarker {
	if path == "" {
		return nil
	}
	k.mu.Lock()
	f := k.free[path]
	delete(k.free, path)
	k.mu.Unlock()
	if f != nil {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink == 0 {
			f.Close() // removed meanwhile: make it again
			f = nil
		}
	}
	m := lockEndMarker(path, f)
	if m != nil {
		m.kept, m.path = k, path
	}
	return m
}

func (k *markerFiles) put(path string, f *os.File) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.free == nil || len(k.free) >= markerFilesMax {
		for p, g := range k.free {
			g.Close()
			delete(k.free, p)
		}
		k.free = map[string]*os.File{}
	}
	if old := k.free[path]; old != nil {
		old.Close()
	}
	k.free[path] = f
}

// openEndMarker opens path (created if missing), locks it, and empties
// it: a reused marker (SlotMarker) still holds the previous run's time,
// which the boot would otherwise read (after a power loss cut the
// truncation, it still may: the boot takes no time from before the run's
// start). It is emptied only once locked, so that a holder is never
// disturbed. The descriptor is close-on-exec: the task never holds the
// lock.
func openEndMarker(path string) *endMarker {
	if path == "" {
		return nil
	}
	return lockEndMarker(path, nil)
}

// lockEndMarker is openEndMarker with f, path's file already open (nil:
// open it).
func lockEndMarker(path string, f *os.File) *endMarker {
	if f == nil {
		var err error
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "%s: end marker: %v\n", SupervisorArg0, err)
			return nil
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "%s: end marker: lock: %v\n", SupervisorArg0, err)
		f.Close()
		return nil
	}
	if err := f.Truncate(0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: end marker: %v\n", SupervisorArg0, err)
		f.Close()
		return nil
	}
	return &endMarker{f: f}
}

// mark records that the run was over at atUs; the first call counts.
// sync makes it durable: needed only when it may outlive the host, not
// the peer (a peer killed with kill -9 reads it from the page cache);
// without the sync, a power loss leaves the marker empty or cut short,
// which the boot reads as no time (the newline ends a time).
func (m *endMarker) mark(atUs int64, sync bool) {
	if m == nil || m.written {
		return
	}
	m.written = true
	if _, err := m.f.WriteAt([]byte(strconv.FormatInt(atUs, 10)+"\n"), 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: end marker: %v\n", SupervisorArg0, err)
		return
	}
	if sync {
		_ = m.f.Sync()
	}
}

// close releases the marker's lock: the run is over. The lock is released
// explicitly, not by the close: a task forked meanwhile holds a copy of
// the descriptor until its execve, and with it the lock, which the next
// run on the machine (SlotMarker) would find taken.
func (m *endMarker) close() {
	if m == nil {
		return
	}
	if err := unix.Flock(int(m.f.Fd()), unix.LOCK_UN); err == nil && m.kept != nil {
		m.kept.put(m.path, m.f)
		return
	}
	m.f.Close()
}

// ReadEndMarker is the time a marker holds, if it holds a whole one.
func ReadEndMarker(path string) (int64, bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return readMarker(f)
}

func readMarker(f *os.File) (int64, bool) {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	s, ok := strings.CutSuffix(string(b[:n]), "\n")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v > 0
}

// OpenRun is a run a dead peer left open: its marker and its process
// group (its task's pid, which the journal holds).
type OpenRun struct {
	Marker string
	PGID   int
}

// AwaitEndMarkers waits until no supervisor holds the marker of any of
// runs, and returns the time each marker holds (0: none). A supervisor
// still holding its marker after wait is stuck (stopped, or unable to
// kill its run): the lock proves it is alive with its journaled pid, so
// its process group is killed, and its run ends when the lock is free —
// the time then returned is 0 and the caller journals its own, later,
// time. A missing marker (a run started by an older build, or its
// directory removed) is no time.
func AwaitEndMarkers(runs []OpenRun, wait time.Duration) []int64 {
	out := make([]int64, len(runs))
	files := make([]*os.File, len(runs))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	pending := 0
	for i, r := range runs {
		f, err := os.OpenFile(r.Marker, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		files[i] = f
		pending++
	}
	deadline := time.Now().Add(wait)
	killed := make([]bool, len(runs))
	for pending > 0 {
		for i, f := range files {
			if f == nil || out[i] != 0 {
				continue
			}
			err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
			if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR) {
				if time.Now().After(deadline) && !killed[i] && runs[i].PGID > 0 {
					killed[i] = true
					// The supervisor holds the lock; the run's group is
					// the task's. Both go.
					if sup := supervisorOf(runs[i].PGID); sup > 0 {
						_ = unix.Kill(sup, unix.SIGKILL)
					}
					_ = unix.Kill(-runs[i].PGID, unix.SIGKILL)
				}
				continue
			}
			pending--
			if v, ok := readMarker(f); ok && !killed[i] {
				out[i] = v
			} else {
				out[i] = -1
			}
			f.Close()
			files[i] = nil
		}
		if pending > 0 {
			if time.Now().After(deadline.Add(wait)) {
				break // a supervisor SIGKILL did not end: no time
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i := range out {
		if out[i] < 0 {
			out[i] = 0
		}
	}
	return out
}

// supervisorOf is the supervisor whose task leads process group pgid: the
// leader's parent, if that is a run supervisor; 0 otherwise.
func supervisorOf(pgid int) int {
	st, err := ReadProcStat(pgid)
	if err != nil || st.PPid <= 1 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(st.PPid) + "/cmdline")
	if err != nil {
		return 0
	}
	if a0, _, _ := strings.Cut(string(b), "\x00"); filepath.Base(a0) != SupervisorArg0 {
		return 0
	}
	return st.PPid
}
