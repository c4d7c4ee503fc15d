package executor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The run journal is the process executor's own durable record of the
// runs it starts and ends (docs/EXECUTOR.md, "Run journal"): one JSON
// object per line, appended and fsync'd before the daemon can report the
// event to anyone. It is what an auditor compares with the ledger: the
// ledger says what the federation believed, the journal what this host
// actually ran, and when.

// RunJournalFile is the journal's name in a peer's data directory.
const RunJournalFile = "runs.jsonl"

// JournalVersion is the record format written.
const JournalVersion = 1

// Journal events.
const (
	// JournalBoot: an executor opened the journal (a daemon started).
	JournalBoot = "boot"
	// JournalStart: a run's process was spawned. It is held at the gate
	// until this record is durable, so the task's own code never runs
	// without it.
	JournalStart = "start"
	// JournalEnd: a run's process group is gone (leader reaped, no live
	// process left in the group, or SIGKILL failed to clear it: Survivors).
	JournalEnd = "end"
	// JournalNoProcess: an accepted run ended before any process was
	// spawned (refused spec, executable not allowed, stopped first, …).
	JournalNoProcess = "no_process"
	// JournalAbandoned: written at boot for every run a previous daemon
	// started and never recorded the end of (it died: kill -9, crash,
	// power loss). The leader died with that daemon (PDEATHSIG); At is an
	// upper bound of that moment, not the moment itself.
	JournalAbandoned = "abandoned"
	// JournalRotate: first record of a new file after a rotation; the
	// start records of the runs still open follow it (Carried).
	JournalRotate = "rotate"
)

// ErrJournal is returned by Start when the run's first journal record
// could not be made durable: nothing of the task ran and no Result will
// come.
var ErrJournal = errors.New("run journal unavailable")

// JournalRecord is one line of the run journal. Times are wall-clock unix
// microseconds of the host that wrote them.
type JournalRecord struct {
	V     int    `json:"v"`
	Event string `json:"ev"`
	// Run numbers the runs of this journal, from 1, across restarts.
	Run     uint64 `json:"run,omitempty"`
	Task    string `json:"task,omitempty"`
	Machine string `json:"machine,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// PID is the run's process group leader (start): its task, held
	// before its first instruction when the record is written (before
	// issue 22, the run's own supervisor); or the daemon's process (boot).
	PID int `json:"pid,omitempty"`
	// AtUs is when the event happened: for start, just before the spawn;
	// for end, once the group was found empty; for abandoned, the boot
	// that noticed it.
	AtUs int64 `json:"at_us"`
	// ExitUs (end) is when the group leader was reaped.
	ExitUs    int64  `json:"exit_us,omitempty"`
	Reason    string `json:"reason,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Survivors bool   `json:"survivors,omitempty"`
	// NotRun (end) says the run's gate never opened (TaskSpec.Gate):
	// the supervisor was spawned, but nothing of the task ran.
	NotRun bool `json:"not_run,omitempty"`
	// Carried marks a start record copied into a new file at rotation.
	Carried bool `json:"carried,omitempty"`
	// Marker (start) is the run's end marker, relative to the tasks
	// directory (its machine's, supervise.SlotMarker); empty in records
	// written before issue 22: the attempt's own supervisor.end.
	Marker string `json:"marker,omitempty"`
}

// JournalOptions bound the journal's growth.
type JournalOptions struct {
	// MaxBytes is the size past which the file is rotated (default
	// DefaultJournalMaxBytes). The rotation happens before the record
	// that would cross it, so a file may exceed it by one record plus the
	// carried start records.
	MaxBytes int64
	// Keep is how many rotated generations (runs.jsonl.1 … .Keep) are kept
	// (default DefaultJournalKeep); the oldest is deleted.
	Keep int
}

// Journal defaults: about 64 MiB × 4 files, some 800,000 runs at ~300 bytes
// for their two records.
const (
	DefaultJournalMaxBytes = 64 << 20
	DefaultJournalKeep     = 3
)

// runJournal appends records. Safe for concurrent use.
type runJournal struct {
	path string
	opt  JournalOptions
	lock *os.File // flock'd: one executor per journal

	mu   sync.Mutex
	f    *os.File
	size int64
	next uint64                   // next run number
	open map[uint64]JournalRecord // start records of runs not ended
	// pending are end records the disk refused (full, failing): they go
	// out, with their own times, ahead of the next append that succeeds,
	// or at close.
	pending []JournalRecord
	closed  bool

	// Group commit: appends that arrive while a write and fsync are in
	// progress queue here, and the next write carries all of them with
	// one fsync. Each caller still returns only once its own records are
	// durable (or with the error of the write that carried them).
	qmu      sync.Mutex
	queue    []*journalWaiter
	flushing bool   // a leader is writing; later appends queue
	groups   uint64 // groups written (guarded by mu; for tests)
}

// journalWaiter is one append waiting for its group's write.
type journalWaiter struct {
	recs []JournalRecord
	end  bool // an end record: kept for a later write if the disk refuses it
	done chan journalTurn
}

// journalTurn answers a waiter: its group's outcome, or that it leads the
// next group.
type journalTurn struct {
	err  error
	lead bool
}

// openRunJournal opens (or creates) the journal at path, takes its lock,
// records every run a previous daemon left open as abandoned, and appends
// a boot record.
//
// An abandoned run's time is the one its supervisor recorded once the run
// was over (its end marker under tasksDir), when there is one: the run was
// dead by then. Otherwise it is the boot, taken once no supervisor of
// those runs lives any more.
func openRunJournal(path string, opt JournalOptions, tasksDir string) (*runJournal, error) {
	if opt.MaxBytes < 0 || opt.Keep < 0 {
		return nil, fmt.Errorf("run journal %s: negative limit (max %d bytes, keep %d)", path, opt.MaxBytes, opt.Keep)
	}
	if opt.MaxBytes == 0 {
		opt.MaxBytes = DefaultJournalMaxBytes
	}
	if opt.Keep == 0 {
		opt.Keep = DefaultJournalKeep
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("run journal %s: %w", path, err)
	}
	path = abs
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("run journal: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("run journal lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("run journal %s is in use by another process: %w", path, err)
	}
	j := &runJournal{path: path, opt: opt, lock: lock, next: 1, open: map[uint64]JournalRecord{}}
	fail := func(err error) (*runJournal, error) {
		if j.f != nil {
			j.f.Close()
		}
		lock.Close()
		return nil, fmt.Errorf("run journal %s: %w", path, err)
	}
	if err := trimTornTail(path); err != nil {
		return fail(err)
	}
	recs, err := ReadRunJournal(path)
	if err != nil {
		return fail(err)
	}
	for _, r := range recs {
		if r.Run >= j.next {
			j.next = r.Run + 1
		}
		switch r.Event {
		case JournalStart:
			j.open[r.Run] = r
		case JournalEnd, JournalAbandoned:
			delete(j.open, r.Run)
		}
	}
	j.f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fail(err)
	}
	fi, err := j.f.Stat()
	if err != nil {
		return fail(err)
	}
	j.size = fi.Size()
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fail(err)
	}
	open := sortedRuns(j.open)
	ends := abandonedEnds(tasksDir, open, j.open)
	now := time.Now().UnixMicro()
	var batch []JournalRecord
	for i, run := range open {
		s := j.open[run]
		at := now
		if m := ends[i]; m >= s.AtUs && m <= now {
			at = m
		}
		batch = append(batch, JournalRecord{Event: JournalAbandoned, Run: run, Task: s.Task, Machine: s.Machine, PID: s.PID, AtUs: at})
	}
	batch = append(batch, JournalRecord{Event: JournalBoot, PID: os.Getpid(), AtUs: now})
	j.mu.Lock()
	err = j.appendLocked(batch...)
	j.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	return j, nil
}

// MarkerWait bounds how long a boot waits for the supervisors of the runs
// a dead daemon left open to end them (it does at once when the daemon
// dies; a stopped one is then killed with the run). Each also needs its
// SIGKILL to take effect, for as long again at most.
const MarkerWait = 10 * time.Second

// abandonedEnds is, for each of the open runs (numbers into starts), the
// time its supervisor's end marker holds, 0 for none; it returns once
// none of those supervisors lives (supervise.AwaitEndMarkers), so that a
// run is never journaled as ended while its supervisor may still be
// killing it.
func abandonedEnds(tasksDir string, runs []uint64, starts map[uint64]JournalRecord) []int64 {
	waits := make([]supervise.OpenRun, len(runs))
	for i, run := range runs {
		s := starts[run]
		switch {
		case tasksDir == "":
		case s.Marker != "":
			if supervise.LocalPath(s.Marker) == nil {
				waits[i] = supervise.OpenRun{Marker: filepath.Join(tasksDir, s.Marker), PGID: s.PID}
			}
		case s.Attempt > 0 && validIdent(s.Task, maxTaskIDLen):
			waits[i] = supervise.OpenRun{Marker: supervise.EndMarkerFile(tasksDir, s.Task, s.Attempt), PGID: s.PID}
		}
	}
	return supervise.AwaitEndMarkers(waits, MarkerWait)
}

func sortedRuns(m map[uint64]JournalRecord) []uint64 {
	out := make([]uint64, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, k int) bool { return out[i] < out[k] })
	return out
}

// newRun hands out the next run number.
func (j *runJournal) newRun() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := j.next
	j.next++
	return n
}

// append writes records and syncs them to disk before returning.
func (j *runJournal) append(recs ...JournalRecord) error {
	return j.commit(false, recs)
}

// appendEnd writes a run's end record; if the disk refuses it, the
// record is kept and written ahead of the next append that succeeds.
func (j *runJournal) appendEnd(rec JournalRecord) error {
	return j.commit(true, []JournalRecord{rec})
}

// commit is the group commit: the first caller leads and writes every
// append queued by then with one write and one fsync; appends arriving
// meanwhile queue, and the first of them leads the next group. Many runs
// starting and ending together thus share fsyncs instead of waiting in
// line for one each, and every record is still durable before its
// caller returns.
func (j *runJournal) commit(end bool, recs []JournalRecord) error {
	w := &journalWaiter{recs: recs, end: end, done: make(chan journalTurn, 1)}
	j.qmu.Lock()
	j.queue = append(j.queue, w)
	lead := !j.flushing
	j.flushing = true
	j.qmu.Unlock()
	for {
		if lead {
			j.flushGroup()
		}
		t := <-w.done
		if !t.lead {
			return t.err
		}
		lead = true
	}
}

// flushGroup writes the queued appends as one group, answers them, and
// hands the lead to the first append queued meanwhile.
func (j *runJournal) flushGroup() {
	j.qmu.Lock()
	group := j.queue
	j.queue = nil
	j.qmu.Unlock()
	err := j.writeGroup(group)
	for _, w := range group {
		w.done <- journalTurn{err: err}
	}
	j.qmu.Lock()
	if len(j.queue) > 0 {
		j.queue[0].done <- journalTurn{lead: true}
	} else {
		j.flushing = false
	}
	j.qmu.Unlock()
}

func (j *runJournal) writeGroup(group []*journalWaiter) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return fmt.Errorf("append to run journal %s: %w", j.path, os.ErrClosed)
	}
	j.groups++
	var recs []JournalRecord
	for _, w := range group {
		recs = append(recs, w.recs...)
	}
	err := j.appendLocked(recs...)
	if err != nil {
		for _, w := range group {
			if w.end {
				j.pending = append(j.pending, w.recs...)
			}
		}
	}
	return err
}

// appendLocked writes the pending end records, then recs, as one write.
func (j *runJournal) appendLocked(recs ...JournalRecord) error {
	if len(j.pending) > 0 {
		recs = append(append([]JournalRecord(nil), j.pending...), recs...)
	}
	var buf bytes.Buffer
	for i := range recs {
		recs[i].V = JournalVersion
		b, err := json.Marshal(recs[i])
		if err != nil {
			return fmt.Errorf("encode journal record: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if j.f == nil {
		// A failed rotation left no file open: try again.
		if err := j.reopenLocked(); err != nil {
			return err
		}
	}
	if j.size > 0 && j.size+int64(buf.Len()) > j.opt.MaxBytes {
		if err := j.rotateLocked(); err != nil {
			if rerr := j.reopenLocked(); rerr != nil {
				return errors.Join(err, rerr)
			}
			return err
		}
	}
	_, err := j.f.Write(buf.Bytes())
	if err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		// A write cut short (disk full) must not leave half a line for
		// the next record to be glued to: cut back to the last whole one.
		if terr := j.f.Truncate(j.size); terr != nil {
			err = errors.Join(err, fmt.Errorf("cut back: %w", terr))
		}
		return fmt.Errorf("append to run journal %s: %w", j.path, err)
	}
	j.size += int64(buf.Len())
	j.pending = nil
	for _, r := range recs {
		switch r.Event {
		case JournalStart:
			j.open[r.Run] = r
		case JournalEnd, JournalAbandoned:
			delete(j.open, r.Run)
		}
	}
	return nil
}

// rotateLocked shifts runs.jsonl → .1 → .2 … (dropping the oldest past
// Keep) and starts a new file with a rotate record and the start records
// of the runs still open, so that the newest file alone shows every run in
// progress.
func (j *runJournal) rotateLocked() error {
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("rotate run journal %s: %w", j.path, err)
	}
	j.f = nil
	_ = os.Remove(generation(j.path, j.opt.Keep))
	for g := j.opt.Keep - 1; g >= 0; g-- {
		err := os.Rename(generation(j.path, g), generation(j.path, g+1))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate run journal %s: %w", j.path, err)
		}
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("rotate run journal %s: %w", j.path, err)
	}
	j.f, j.size = f, 0
	if err := syncDir(filepath.Dir(j.path)); err != nil {
		return fmt.Errorf("rotate run journal %s: %w", j.path, err)
	}
	var buf bytes.Buffer
	head := []JournalRecord{{Event: JournalRotate, Run: j.next - 1, AtUs: time.Now().UnixMicro()}}
	for _, run := range sortedRuns(j.open) {
		s := j.open[run]
		s.Carried = true
		head = append(head, s)
	}
	for i := range head {
		head[i].V = JournalVersion
		b, err := json.Marshal(head[i])
		if err != nil {
			return fmt.Errorf("encode journal record: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if _, err := j.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write run journal %s: %w", j.path, err)
	}
	j.size = int64(buf.Len())
	return nil
}

// reopenLocked opens the current file for appending after a failed
// rotation (whatever state the renames left: the reader copes with gaps).
func (j *runJournal) reopenLocked() error {
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
	if err := trimTornTail(j.path); err != nil {
		return fmt.Errorf("reopen run journal %s: %w", j.path, err)
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("reopen run journal %s: %w", j.path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("reopen run journal %s: %w", j.path, err)
	}
	j.f, j.size = f, fi.Size()
	return nil
}

// close closes the file and releases the lock; later appends fail.
func (j *runJournal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	var err error
	if len(j.pending) > 0 {
		// Last chance; failing that, the next boot marks them abandoned.
		err = j.appendLocked()
	}
	j.closed = true
	if j.f != nil {
		err = errors.Join(err, j.f.Close())
	}
	j.lock.Close()
	return err
}

// generation is path for g = 0, else path.g.
func generation(path string, g int) string {
	if g == 0 {
		return path
	}
	return path + "." + strconv.Itoa(g)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// ReadRunJournal reads the journal at path with its rotated generations
// (path.N … path.1, oldest first) and returns its records in order,
// without the start records that rotation carries over. A missing journal
// is empty. A last line cut short (a crash in the middle of a write, before
// its fsync returned) is ignored; any other malformed line is an error.
func ReadRunJournal(path string) ([]JournalRecord, error) {
	olds, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, fmt.Errorf("read run journal: %w", err)
	}
	gens := map[int]string{}
	var nums []int
	for _, p := range olds {
		g, err := strconv.Atoi(p[len(path)+1:])
		if err != nil || g < 1 {
			continue // runs.jsonl.lock and the like
		}
		gens[g] = p
		nums = append(nums, g)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(nums)))
	var files []string
	for _, g := range nums {
		files = append(files, gens[g])
	}
	files = append(files, path)
	var out []JournalRecord
	seenStart := map[uint64]bool{}
	for _, p := range files {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read run journal: %w", err)
		}
		recs, err := readJournalFile(f, p)
		f.Close()
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.Event == JournalStart {
				if seenStart[r.Run] {
					continue // carried over by a rotation
				}
				seenStart[r.Run] = true
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// MaxJournalLine bounds one record.
const MaxJournalLine = 64 << 10

func readJournalFile(r io.Reader, name string) ([]JournalRecord, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []JournalRecord
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("run journal %s:%d: line longer than %d bytes", name, line, MaxJournalLine)
		}
		if errors.Is(err, io.EOF) {
			// A last line without its newline was never acknowledged.
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read run journal %s: %w", name, err)
		}
		var rec JournalRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("run journal %s:%d: %w", name, line, err)
		}
		if rec.V != JournalVersion {
			return nil, fmt.Errorf("run journal %s:%d: version %d, this build reads %d", name, line, rec.V, JournalVersion)
		}
		switch rec.Event {
		case JournalBoot, JournalRotate:
		case JournalStart, JournalEnd, JournalNoProcess, JournalAbandoned:
			if rec.Run == 0 || rec.Task == "" || rec.Machine == "" {
				return nil, fmt.Errorf("run journal %s:%d: %s record without run, task or machine", name, line, rec.Event)
			}
		default:
			return nil, fmt.Errorf("run journal %s:%d: unknown event %q", name, line, rec.Event)
		}
		out = append(out, rec)
	}
}

// JournalRun is one run assembled from its records.
type JournalRun struct {
	Run     uint64
	Task    string
	Machine string
	Attempt int
	PID     int
	// Process: a process was spawned (a start record). Without one the
	// run ended before anything ran (no_process) and StartUs = EndUs.
	Process bool
	StartUs int64
	// EndUs: when the process group was gone (end), the boot that found
	// the run abandoned (an upper bound), or 0 while the run is open.
	EndUs int64
	// Ending is JournalEnd, JournalAbandoned, JournalNoProcess, or ""
	// (open: the daemon still runs it, or its end record was lost).
	Ending    string
	ExitUs    int64
	Reason    string
	ExitCode  int
	Survivors bool
	// NotRun: the run's gate never opened; nothing of the task ran, so
	// the run has no interval although a process was spawned.
	NotRun bool
}

// Open says the journal holds no end of the run.
func (r JournalRun) Open() bool { return r.Ending == "" }

// JournalRuns assembles records (as ReadRunJournal returns them) into runs,
// in the order they started. An end or abandoned record without its start
// (its file rotated away) gives a run with StartUs 0.
func JournalRuns(recs []JournalRecord) []JournalRun {
	byRun := map[uint64]*JournalRun{}
	var order []uint64
	get := func(r JournalRecord) *JournalRun {
		jr := byRun[r.Run]
		if jr == nil {
			jr = &JournalRun{Run: r.Run, Task: r.Task, Machine: r.Machine, ExitCode: -1}
			byRun[r.Run] = jr
			order = append(order, r.Run)
		}
		return jr
	}
	for _, r := range recs {
		switch r.Event {
		case JournalStart:
			jr := get(r)
			jr.Process, jr.StartUs, jr.PID, jr.Attempt = true, r.AtUs, r.PID, r.Attempt
		case JournalNoProcess:
			jr := get(r)
			jr.StartUs, jr.EndUs, jr.Ending, jr.Reason, jr.Attempt = r.AtUs, r.AtUs, JournalNoProcess, r.Reason, r.Attempt
		case JournalEnd:
			jr := get(r)
			jr.EndUs, jr.ExitUs, jr.Ending, jr.Reason, jr.Survivors, jr.NotRun = r.AtUs, r.ExitUs, JournalEnd, r.Reason, r.Survivors, r.NotRun
			if r.ExitCode != nil {
				jr.ExitCode = *r.ExitCode
			}
		case JournalAbandoned:
			jr := get(r)
			if jr.Ending == "" {
				jr.EndUs, jr.Ending = r.AtUs, JournalAbandoned
			}
		}
	}
	out := make([]JournalRun, 0, len(order))
	for _, n := range order {
		out = append(out, *byRun[n])
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].StartUs < out[k].StartUs })
	return out
}

// globEscape quotes the pattern characters of a literal path.
func globEscape(p string) string {
	var b bytes.Buffer
	for _, c := range p {
		switch c {
		case '*', '?', '[', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// trimTornTail cuts a last line that lacks its newline: a write the
// previous daemon never finished (and so never acknowledged). Appending
// after it would glue the next record to it.
func trimTornTail(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	// Look back for the last newline, a block at a time.
	const block = 4096
	end := size
	for end > 0 {
		start := max(end-block, 0)
		buf := make([]byte, end-start)
		if _, err := f.ReadAt(buf, start); err != nil {
			return err
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return nil
			}
			return truncSync(f, keep)
		}
		end = start
	}
	return truncSync(f, 0)
}

func truncSync(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}
