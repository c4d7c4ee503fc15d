package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// measurement is what one run of n tasks gives.
type measurement struct {
	Tasks int
	// Start is taken just before the first submission is sent.
	Start time.Time
	// Submitted is when the last submission was answered (its tasks are
	// in the local ledger of the submitting peer).
	Submitted time.Time
	// Detected is when the driver learnt that every task finished: the
	// arrival of the last task's end on the first peer's event stream (GET
	// /v1/events), or, if the stream failed, the first poll that saw them
	// all (the resolution is then the poll period; Polled says so).
	Detected time.Time
	Polled   bool
	// LastEndedMs is the latest task's end in the ledger (the TaskEnded
	// command's time, proposer's clock, ms): exact up to the commit of
	// that one command.
	LastEndedMs int64
	// Polls counts the Orgs calls made while waiting (0 when the events
	// told).
	Polls int
}

// Elapsed is from submission until every task was seen finished.
func (m measurement) Elapsed() time.Duration { return m.Detected.Sub(m.Start) }

// LedgerElapsed is from submission until the last task's end report.
func (m measurement) LedgerElapsed() time.Duration {
	return time.UnixMilli(m.LastEndedMs).Sub(m.Start)
}

// trivialTasks are n tasks running `true` (1 MFlop each, a minute's
// wall-clock limit).
func trivialTasks(n int) []api.SubmitTask {
	ts := make([]api.SubmitTask, n)
	for i := range ts {
		ts[i] = api.SubmitTask{Argv: []string{"true"}, SizeMFlop: 1, WallLimitMs: 60_000}
	}
	return ts
}

// share splits n tasks among k organisations: n/k each, the remainder to
// the first ones.
func share(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

// measure submits n trivial tasks, split among the organisations (each
// submits its share, all at once, in one submission each), and waits
// until the first peer has applied every task's end: it follows that
// peer's event stream, opened before the submissions, and polls every
// period only if the stream fails. It fails if a task did not end done.
func (f *federation) measure(ctx context.Context, n int, period, timeout time.Duration) (measurement, error) {
	m := measurement{Tasks: n}
	watch := f.peers[0].client
	ends, err := watchEnds(ctx, watch, n)
	if err != nil {
		return m, err
	}
	shares := share(n, len(f.peers))
	errs := make([]error, len(f.peers))
	var wg sync.WaitGroup
	m.Start = time.Now()
	for i, p := range f.peers {
		if shares[i] == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.client.Submit(ctx, api.SubmitRequest{Job: "bench", Tasks: trivialTasks(shares[i])})
			if err == nil && len(res.TaskIDs) != shares[i] {
				err = fmt.Errorf("%d task IDs for %d tasks", len(res.TaskIDs), shares[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s submits %d tasks: %w", p.org, shares[i], err)
			}
		}()
	}
	wg.Wait()
	m.Submitted = time.Now()
	for _, err := range errs {
		if err != nil {
			return m, err
		}
	}
	deadline := m.Start.Add(timeout)
	select {
	case r := <-ends:
		if r.err == nil {
			m.Detected = r.at
			if r.failed > 0 {
				return m, fmt.Errorf("%d of %d tasks did not end done", r.failed, n)
			}
			return m.withLastEnded(ctx, watch, n)
		}
		// The stream failed: poll instead.
		m.Polled = true
	case <-time.After(time.Until(deadline)):
		return m, fmt.Errorf("not finished after %v", timeout)
	case <-ctx.Done():
		return m, ctx.Err()
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		finished, failed, seen, err := countFinished(ctx, watch)
		m.Polls++
		if err == nil && finished == n {
			m.Detected = time.Now()
			if failed > 0 {
				return m, fmt.Errorf("%d of %d tasks did not end done: %s", failed, n, seen)
			}
			break
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("not finished after %v: %s (last error %v)", timeout, seen, err)
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-tick.C:
		}
	}
	return m.withLastEnded(ctx, watch, n)
}

// withLastEnded checks the n tasks and records the last end.
func (m measurement) withLastEnded(ctx context.Context, c *api.Client, n int) (measurement, error) {
	last, err := lastEnded(ctx, c, n)
	if err != nil {
		return m, err
	}
	m.LastEndedMs = last
	return m, nil
}

// endsSeen is what the event stream told: when the n-th task ended and
// how many of them not done, or why the stream failed.
type endsSeen struct {
	at     time.Time
	failed int
	err    error
}

// watchEnds opens c's event stream from the present and returns once it
// is open; the channel then gives the arrival of the n-th task's end (the
// federation runs nothing else), or the stream's failure.
func watchEnds(ctx context.Context, c *api.Client, n int) (<-chan endsSeen, error) {
	out := make(chan endsSeen, 1)
	opened := make(chan struct{})
	var once sync.Once
	errDone := errors.New("every task ended")
	go func() {
		var ended, failed int
		seen := map[string]bool{}
		_, err := api.Follow(ctx, []*api.Client{c}, api.EventQuery{OnOpen: func(string) { once.Do(func() { close(opened) }) }}, func(e api.TaskEvent) error {
			if !e.Terminal() || seen[e.Task] {
				return nil
			}
			seen[e.Task] = true
			ended++
			if e.To != "done" {
				failed++
			}
			if ended == n {
				out <- endsSeen{at: time.Now(), failed: failed}
				return errDone
			}
			return nil
		})
		if !errors.Is(err, errDone) {
			once.Do(func() { close(opened) })
			out <- endsSeen{err: fmt.Errorf("event stream: %w", err)}
		}
	}()
	select {
	case <-opened:
		return out, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// countFinished sums the organisations' finished tasks (done, failed,
// cancelled) and the unsuccessful ones.
func countFinished(ctx context.Context, c *api.Client) (finished, failed int, seen string, err error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	orgs, err := c.Orgs(cctx)
	if err != nil {
		return 0, 0, "", err
	}
	for _, o := range orgs {
		finished += o.Done + o.Failed + o.Cancelled
		failed += o.Failed + o.Cancelled
		seen += fmt.Sprintf("%s queued %d running %d done %d failed %d; ", o.Name, o.Queued, o.Running, o.Done, o.Failed)
	}
	return finished, failed, seen, nil
}

// lastEnded checks that the n tasks are all done with exit code 0 and
// returns the latest end time.
func lastEnded(ctx context.Context, c *api.Client, n int) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ts, err := c.Tasks(cctx, api.TaskQuery{})
	if err != nil {
		return 0, fmt.Errorf("list tasks: %w", err)
	}
	if len(ts) != n {
		return 0, fmt.Errorf("the ledger holds %d tasks, want %d", len(ts), n)
	}
	var last int64
	for _, t := range ts {
		if t.State != "done" || t.ExitCode != 0 {
			return 0, fmt.Errorf("task %s ended %s (exit %d): %s", t.ID, t.State, t.ExitCode, t.Reason)
		}
		last = max(last, t.EndedMs)
	}
	return last, nil
}

// converged waits until every peer has applied the same index with the
// same state hash, and returns them.
func (f *federation) converged(ctx context.Context) (uint64, string, error) {
	var (
		index uint64
		hash  string
	)
	err := eventually(ctx, 60*time.Second, 200*time.Millisecond, "every peer to reach the same ledger state", func(ctx context.Context) (bool, string) {
		seen := ""
		var first api.LedgerView
		for i, p := range f.peers {
			lv, err := p.client.Ledger(ctx)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", p.org, err)
			}
			seen += fmt.Sprintf("%s@%d %.12s ", p.org, lv.AppliedIndex, lv.StateHash)
			if i == 0 {
				first = lv
			} else if lv.AppliedIndex != first.AppliedIndex || lv.StateHash != first.StateHash {
				return false, seen
			}
		}
		index, hash = first.AppliedIndex, first.StateHash
		return true, seen
	})
	return index, hash, err
}
