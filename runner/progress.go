package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// Progress monitoring (seed 004 §4.1.3; issue 20 item 4; docs/JOBS.md,
// "Progress reports").
//
// A running task may write its progress to the file $COOPGRID_PROGRESS
// (in its work directory), one report per line: a fraction ("0.42") or
// done/total ("42/100"). The peer that runs a soft-deadline task reads the
// file's last valid line every Progress.Interval, keeps the first and the
// latest report of the run, and predicts the run's end from the rate
// between them. When that end, with the seed's 10 % margin
// (ledger.MissesDeadline), is after the task's deadline, the peer sends
// ledger.MigrateTask: the ledger moves the task to a machine that can
// still meet the deadline (the run is stopped with a checkpoint, as a
// preemption), or records that none can.

// ProgressConfig paces the progress monitoring of soft-deadline runs.
type ProgressConfig struct {
	// Interval is how often a run's progress file is read (default 10 s).
	Interval time.Duration
	// MinWindow is how long the reports of a run must span before its end
	// is predicted from them (default three intervals): a rate measured
	// over a moment is noise.
	MinWindow time.Duration
	// Recheck is how long after a report the ledger kept running (no
	// machine could meet the deadline) the run may be reported again
	// (default 30 intervals, 5 minutes by default): machines free up.
	Recheck time.Duration
}

func (c *ProgressConfig) defaults() {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.MinWindow <= 0 {
		c.MinWindow = 3 * c.Interval
	}
	if c.Recheck <= 0 {
		c.Recheck = 30 * c.Interval
	}
}

const (
	// ppm is a whole task in parts per million: progress is kept as an
	// integer fraction.
	ppm = 1_000_000
	// maxProgressRead is how much of the end of a progress file is read:
	// the last valid line is all that counts, and a task may append.
	maxProgressRead = 4 << 10
	// progressWarnEvery rate-limits the warning about a bad progress file,
	// per run: the task writes it as often as it likes.
	progressWarnEvery = time.Minute
)

// errNoReport: the file holds no valid report (yet).
var errNoReport = errors.New("no valid progress line")

// parseProgress returns the last valid report of data in parts per
// million, and how many non-empty lines it ignored as invalid. A valid
// line is a fraction in [0, 1] ("0.42", "1") or done/total with integers
// 0 ≤ done ≤ total, total > 0 ("42/100"); surrounding blanks are ignored.
// A last line without its newline is left out when lines come before it
// (it may be half written by a task appending); a file of one line
// without a newline (rewritten whole each time) is read as it is.
func parseProgress(data []byte) (int64, int, error) {
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 && i < len(data)-1 {
		data = data[:i]
	}
	var (
		last int64 = -1
		bad  int
	)
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		s := string(bytes.TrimSpace(line))
		if s == "" {
			continue
		}
		v, err := parseProgressLine(s)
		if err != nil {
			bad++
			continue
		}
		last = v
	}
	if last < 0 {
		return 0, bad, errNoReport
	}
	return last, bad, nil
}

func parseProgressLine(s string) (int64, error) {
	if done, total, ok := bytesCut(s, '/'); ok {
		d, err1 := strconv.ParseInt(done, 10, 64)
		t, err2 := strconv.ParseInt(total, 10, 64)
		if err1 != nil || err2 != nil || t <= 0 || d < 0 || d > t {
			return 0, fmt.Errorf("%q: want done/total, 0 ≤ done ≤ total, total > 0", s)
		}
		// d·ppm/t without overflow for any int64 d ≤ t.
		return int64(float64(d) / float64(t) * ppm), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0 && f <= 1) {
		return 0, fmt.Errorf("%q: want a fraction in [0, 1] or done/total", s)
	}
	return int64(f * ppm), nil
}

func bytesCut(s string, sep byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// readProgress reads the last valid report of the progress file at path:
// a regular file (a link, FIFO or device is refused), of which at most
// the last maxProgressRead bytes are read. fs.ErrNotExist when the task
// has written none.
func readProgress(path string) (int64, int, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, 0, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	from := max(fi.Size()-maxProgressRead, 0)
	buf := make([]byte, maxProgressRead)
	n, err := f.ReadAt(buf, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, err
	}
	data := buf[:n]
	if from > 0 {
		// The first line read may be cut: skip it.
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return parseProgress(data)
}

// progressTrack is what a run's reports say: the first and the latest.
type progressTrack struct {
	firstAt, lastAt   time.Time
	firstPPM, lastPPM int64
	seen              bool
}

// add records a report read at at. A report below the latest (the task
// started again, or wrote garbage that parsed) restarts the track.
func (p *progressTrack) add(at time.Time, v int64) {
	if !p.seen || v < p.lastPPM {
		*p = progressTrack{firstAt: at, lastAt: at, firstPPM: v, lastPPM: v, seen: true}
		return
	}
	p.lastAt, p.lastPPM = at, v
}

// predict is the run's predicted end: the rest (ppm − latest) at the rate
// between the first and the latest report, from the latest. ok is false
// until the reports span minWindow and show progress, and once the run
// reports itself complete.
func (p *progressTrack) predict(minWindow time.Duration) (time.Time, bool) {
	span := p.lastAt.Sub(p.firstAt)
	gained := p.lastPPM - p.firstPPM
	if !p.seen || span < minWindow || span <= 0 || gained <= 0 || p.lastPPM >= ppm {
		return time.Time{}, false
	}
	rest := float64(ppm-p.lastPPM) / float64(gained) * float64(span)
	if rest > float64(ledger.MaxTimeMs)*float64(time.Millisecond) {
		rest = float64(ledger.MaxTimeMs) * float64(time.Millisecond)
	}
	return p.lastAt.Add(time.Duration(rest)), true
}

// progressPather is an executor that tells where a run writes its
// progress (*executor.ProcessExecutor: $COOPGRID_PROGRESS).
type progressPather interface {
	ProgressPath(task string) (string, bool)
}

// watchProgress follows the progress of r, a soft-deadline run, until it
// ends, and reports it with MigrateTask when it will miss its deadline.
func (b *bridge) watchProgress(ctx context.Context, r *run, src progressPather) {
	cfg := b.cfg.Progress
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	var (
		track              progressTrack
		lastWarn, lastSent time.Time
	)
	warn := func(msg string, args ...any) {
		if now := time.Now(); now.Sub(lastWarn) >= progressWarnEvery {
			lastWarn = now
			b.log.Warn(msg, append([]any{"task", r.task.ID}, args...)...)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.ended:
			return
		case <-tick.C:
		}
		path, ok := src.ProgressPath(r.task.ID)
		if !ok {
			continue
		}
		v, bad, err := readProgress(path)
		if bad > 0 {
			warn("progress file: invalid lines ignored (want a fraction in [0, 1] or done/total per line)", "file", path, "invalid", bad)
		}
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errNoReport) {
				warn("progress file not read", "file", path, "err", err)
			}
			continue
		}
		now := b.cfg.Now()
		track.add(now, v)
		finish, ok := track.predict(cfg.MinWindow)
		if !ok || !ledger.MissesDeadline(now.UnixMilli(), finish.UnixMilli(), r.task.Spec.DeadlineMs) {
			continue
		}
		if !lastSent.IsZero() && now.Sub(lastSent) < cfg.Recheck {
			continue
		}
		lastSent = now
		done := v * r.task.SizeMFlop / ppm
		if r.task.SizeMFlop > ledger.MaxSizeMFlop/ppm {
			done = int64(float64(v) / ppm * float64(r.task.SizeMFlop))
		}
		mt := &ledger.MigrateTask{Task: r.task.ID, Machine: r.machine, Attempt: r.attempt, DoneMFlop: min(done, r.task.SizeMFlop),
			PredictedFinishMs: min(max(finish.UnixMilli(), 1), ledger.MaxTimeMs)}
		b.log.Info("run will miss its deadline: asking the ledger to move it", "task", r.task.ID, "machine", r.machine,
			"progress_ppm", v, "predicted_finish", finish.UTC().Format(time.RFC3339), "deadline", time.UnixMilli(r.task.Spec.DeadlineMs).UTC().Format(time.RFC3339))
		res, err := b.proposeRetry(ctx, func(c *ledger.Command) { m := *mt; c.MigrateTask = &m })
		switch {
		case err != nil && ledger.CodeOf(err) == ledger.CodeBadState:
			// The run is no longer the ledger's (it ends here soon), or the
			// ledger's clock at the commit saw the prediction in time: look
			// again after Recheck.
			b.log.Info("migration refused", "task", r.task.ID, "err", err)
		case err != nil:
			b.log.Warn("migration not recorded", "task", r.task.ID, "err", err)
		case len(res.Changes) > 0:
			b.log.Info("task migrated: its run stops with a checkpoint and it is placed again", "task", r.task.ID, "machine", r.machine)
			return
		default:
			for _, n := range res.Notes {
				b.log.Info("ledger note", "task", r.task.ID, "note", n)
			}
		}
	}
}
