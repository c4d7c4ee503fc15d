package runner

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// The reporter group-commits this peer's reports on its runs (task_started,
// task_stopped, task_ended, checkpoint): while one batch is being committed,
// the reports that arrive queue up, and the next batch carries all of them
// as one `reports` log entry (docs/LEDGER.md, "The reports batch"). Each
// entry costs one Raft round trip, an fsync on every peer, an Apply on
// every peer and, on a follower, one request forwarded to the leader, so
// fewer entries per report is what a busy peer saves.
//
// A short linger lets reports that arrive close together share an entry
// even when none is in flight. When a report arrives less than
// lingerBusyWindow (100 ms) after the previous one, the peer is reporting
// steadily and the batch the report heads waits, from the report's
// arrival, for about the time between this peer's recent reports (a moving
// average of the gaps, so that one more report is likely to join), at most
// Config.ReportLinger (20 ms by default), and leaves early once full. A
// report that finds the peer quiet (no report in the last
// lingerBusyWindow) goes at once, and no report waits more than the linger
// beyond when it would have left without it: reports that queued behind an
// entry in flight are already older than that when it commits. A lone
// report is still proposed as a command of its own.
//
// Every caller gets its own report's result, as if it had proposed it
// alone: the batch's index, the item's verdict and notes. A batch whose
// outcome is unknown (leader change, timeout) gives every item that error;
// the bridge retries each, and a report that did commit is then refused as
// bad_state, as a single report resent is.
type reporter struct {
	org     string
	self    string
	now     func() time.Time
	propose ProposeFunc
	log     *slog.Logger
	// linger bounds how long a report that arrives on a busy peer waits
	// for company (0: never); busyWindow is how recent the previous report
	// must be for the peer to count as busy (lingerBusyWindow; tests
	// change both).
	linger, busyWindow time.Duration

	mu sync.Mutex
	q  []*pendingReport
	// lastArrival is when the latest report was queued (monotonic); gap
	// the moving average of the gaps between reports, each capped at
	// busyWindow (which it starts at).
	lastArrival time.Time
	gap         time.Duration
	wake        chan struct{}
	// Counters for tests and diagnostics: commands proposed, reports sent.
	commands atomic.Uint64
	sent     atomic.Uint64
}

type pendingReport struct {
	item ledger.Report
	size int // encoded size as a command of its own
	// at is when it was queued; wait how long a batch it heads lingers
	// after at (0 when it found the peer quiet).
	at   time.Time
	wait time.Duration
	done chan struct{}
	res  ledger.Result
	err  error
}

// Batch bounds: well inside the p2p message limit (4 MiB) for the command
// and for its result, and inside ledger.MaxReportsPerCommand.
const (
	maxReportsPerBatch = 512
	maxReportBatchSize = 1 << 20
)

// DefaultReportLinger is Config.ReportLinger's default. lingerBusyWindow is
// how recent the previous report must be for a new one to linger: a peer
// whose reports come further apart than that gains little from waiting.
const (
	DefaultReportLinger = 20 * time.Millisecond
	lingerBusyWindow    = 100 * time.Millisecond
)

func newReporter(cfg Config) *reporter {
	return &reporter{org: cfg.Org, self: cfg.Self.String(), now: cfg.Now, propose: cfg.Propose, log: cfg.Logger,
		linger: cfg.ReportLinger, busyWindow: lingerBusyWindow, gap: lingerBusyWindow, wake: make(chan struct{}, 1)}
}

// report queues body's report and waits for its result. body must set one
// of TaskStarted, TaskStopped, TaskEnded, Checkpoint. Like Config.Propose, it
// returns once the local ledger has applied the report's entry, and a
// report the ledger refused returns its *ledger.Error with the result.
func (r *reporter) report(ctx context.Context, body func(*ledger.Command)) (ledger.Result, error) {
	c := ledger.Command{Org: r.org, Peer: r.self, AtMs: r.now().UnixMilli()}
	body(&c)
	item, ok := ledger.ReportOf(c)
	if !ok {
		return ledger.Result{}, fmt.Errorf("report: a %q command is not a report", c.Kind())
	}
	// A malformed report fails alone, before it joins a batch.
	data, err := ledger.EncodeCommand(c)
	if err != nil {
		return ledger.Result{}, err
	}
	p := &pendingReport{item: item, size: len(data), at: time.Now(), done: make(chan struct{})}
	r.mu.Lock()
	p.wait = r.lingerFor(p.at)
	r.q = append(r.q, p)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		// The batch may still commit: the caller treats this as an
		// unknown outcome, as with any propose.
		return ledger.Result{}, ctx.Err()
	}
}

// loop sends the queued reports, one batch at a time, until ctx ends.
func (r *reporter) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			r.failAll(errClosed)
			return
		case <-r.wake:
		}
		for {
			if !r.waitLinger(ctx) {
				r.failAll(errClosed)
				return
			}
			batch := r.take()
			if len(batch) == 0 {
				break
			}
			r.send(ctx, batch)
		}
	}
}

// lingerFor records a report arriving at and returns how long a batch it
// heads waits for company. Called under mu.
func (r *reporter) lingerFor(at time.Time) time.Duration {
	first := r.lastArrival.IsZero()
	gap := min(at.Sub(r.lastArrival), r.busyWindow)
	r.lastArrival = at
	if first || gap >= r.busyWindow {
		r.gap = r.busyWindow
		return 0
	}
	r.gap = (3*r.gap + gap) / 4
	return min(r.gap, r.linger)
}

// waitLinger waits while the queue's next batch lingers (lingerUntil). It
// reports false when ctx ended first.
func (r *reporter) waitLinger(ctx context.Context) bool {
	for {
		d := time.Until(r.lingerUntil())
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		case <-r.wake:
			// Another report: the batch may be full now.
			t.Stop()
		}
	}
}

// lingerUntil is when the queue's next batch may leave: the zero time when
// it may leave now (empty queue, a head that found the peer quiet, no
// linger, or a full batch), else the linger after its head's arrival.
func (r *reporter) lingerUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.q) == 0 || r.q[0].wait <= 0 || len(r.q) >= maxReportsPerBatch {
		return time.Time{}
	}
	size := 0
	for _, p := range r.q {
		if size += p.size; size >= maxReportBatchSize {
			return time.Time{}
		}
	}
	return r.q[0].at.Add(r.q[0].wait)
}

// take removes the next batch from the queue.
func (r *reporter) take() []*pendingReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, size := 0, 0
	for n < len(r.q) && n < maxReportsPerBatch {
		if n > 0 && size+r.q[n].size > maxReportBatchSize {
			break
		}
		size += r.q[n].size
		n++
	}
	batch := r.q[:n:n]
	r.q = append([]*pendingReport(nil), r.q[n:]...)
	return batch
}

func (r *reporter) failAll(err error) {
	r.mu.Lock()
	q := r.q
	r.q = nil
	r.mu.Unlock()
	for _, p := range q {
		p.err = err
		close(p.done)
	}
}

// send commits one batch and hands each report its result. A lone report
// is proposed as a command of its own, exactly as before batching existed.
func (r *reporter) send(ctx context.Context, batch []*pendingReport) {
	r.commands.Add(1)
	r.sent.Add(uint64(len(batch)))
	if len(batch) == 1 {
		p := batch[0]
		p.res, p.err = r.propose(ctx, func(c *ledger.Command) {
			cmd := p.item.Command(*c)
			*c = cmd
		})
		close(p.done)
		return
	}
	items := make([]ledger.Report, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	res, err := r.propose(ctx, func(c *ledger.Command) { c.Reports = &ledger.Reports{Items: items} })
	for i, p := range batch {
		switch {
		case err != nil && res.Err == nil:
			// Not committed, or outcome unknown: every report shares it.
			p.res, p.err = res, err
		default:
			p.res = res.ItemResult(i)
			if p.res.Err != nil {
				p.err = p.res.Err
			}
		}
		close(p.done)
	}
	if err == nil && len(batch) > 1 {
		r.log.Debug("reports committed as one entry", "index", res.Index, "reports", len(batch), "accepted", res.AcceptedReports())
	}
}
