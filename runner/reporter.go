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
// as one `reports` log entry (docs/LEDGER.md, "The reports batch"). There is
// no timer: a lone report goes out at once, as a command of its own, and
// batches grow only when reports arrive faster than the log commits them,
// which is exactly when one entry per report would be the bottleneck (one
// Raft round trip, one fsync, and on a follower one forwarded request,
// each).
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

	mu   sync.Mutex
	q    []*pendingReport
	wake chan struct{}
	// Counters for tests and diagnostics: commands proposed, reports sent.
	commands atomic.Uint64
	sent     atomic.Uint64
}

type pendingReport struct {
	item ledger.Report
	size int // encoded size as a command of its own
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

func newReporter(cfg Config) *reporter {
	return &reporter{org: cfg.Org, self: cfg.Self.String(), now: cfg.Now, propose: cfg.Propose, log: cfg.Logger, wake: make(chan struct{}, 1)}
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
	p := &pendingReport{item: item, size: len(data), done: make(chan struct{})}
	r.mu.Lock()
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
			batch := r.take()
			if len(batch) == 0 {
				break
			}
			r.send(ctx, batch)
		}
	}
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
