package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/coopgrid/coopgrid/api"
)

// The CLI's uses of the watch API (GET /v1/events): `peer tasks --watch`
// and `peer submit --wait`. Both open the stream first and list the tasks
// once it is open, so that no change falls between the listing and the
// stream; when the peer no longer holds the events after the position
// reached (events_gone, too_slow), they list again and go on from the
// present.

// watchTasks prints the tasks q selects, then every change of state as it
// is applied, until ctx ends. With jsonOut it prints the events only, one
// JSON object per line.
func watchTasks(ctx context.Context, c *conn, w io.Writer, q api.TaskQuery, jsonOut bool) error {
	for {
		var listErr error
		_, err := api.Follow(ctx, []*api.Client{c.Client}, api.EventQuery{Org: q.Org, OnOpen: func(string) {
			if jsonOut {
				return
			}
			ts, err := c.Tasks(ctx, q)
			if err != nil {
				listErr = err
				return
			}
			_ = printTasks(w, ts)
			fmt.Fprintln(w, "watching; changes of state follow (Ctrl-C to stop)")
		}}, func(e api.TaskEvent) error {
			if listErr != nil {
				return listErr
			}
			if jsonOut {
				return printJSONLine(w, e)
			}
			return printEvent(w, e)
		})
		if listErr != nil {
			return c.fail("tasks", listErr)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case api.CodeOf(err) == api.CodeEventsGone || api.CodeOf(err) == api.CodeTooSlow:
			fmt.Fprintf(w, "fell behind the peer's events (%v): listing again\n", err)
			continue
		}
		return c.fail("watch tasks", err)
	}
}

func printEvent(w io.Writer, e api.TaskEvent) error {
	from := e.From
	if from == "" {
		from = "-"
	}
	_, err := fmt.Fprintf(w, "%s\t%s\t%s\t%s → %s\t%s\t%s\n", e.ID, e.Task, e.Org, from, e.To, orDash(e.Machine), e.Reason)
	return err
}

// printJSONLine writes v as one line of JSON.
func printJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// taskWaiter learns how tasks end from the event stream and from
// listings.
type taskWaiter struct {
	mu     sync.Mutex
	ended  map[string]string // task → terminal state, for every task seen
	wanted map[string]bool   // nil until the IDs are known
	left   int
	done   chan struct{}
}

func newTaskWaiter() *taskWaiter {
	return &taskWaiter{ended: map[string]string{}, done: make(chan struct{})}
}

func (tw *taskWaiter) saw(task, state string) {
	if state != "done" && state != "failed" && state != "cancelled" {
		return
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if _, ok := tw.ended[task]; ok {
		return
	}
	tw.ended[task] = state
	if tw.wanted[task] {
		tw.left--
		tw.check()
	}
}

// want sets the tasks to wait for.
func (tw *taskWaiter) want(ids []string) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.wanted = map[string]bool{}
	for _, id := range ids {
		if !tw.wanted[id] {
			tw.wanted[id] = true
			if _, ok := tw.ended[id]; !ok {
				tw.left++
			}
		}
	}
	tw.check()
}

func (tw *taskWaiter) check() {
	if tw.wanted != nil && tw.left == 0 {
		select {
		case <-tw.done:
		default:
			close(tw.done)
		}
	}
}

// states are the wanted tasks' end states.
func (tw *taskWaiter) states() map[string]string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	out := map[string]string{}
	for id := range tw.wanted {
		out[id] = tw.ended[id]
	}
	return out
}

// waitTasks watches the peer's events for the tasks ids (submitted by
// the caller after start returned) until each ended. start opens the
// stream; the caller submits once it returns, then calls wait with the IDs.
type waitTasks struct {
	c      *conn
	tw     *taskWaiter
	cancel context.CancelFunc
	errc   chan error
}

// startWaiting opens the event stream of org's tasks and returns once it
// is open.
func startWaiting(ctx context.Context, c *conn, org string) (*waitTasks, error) {
	ctx, cancel := context.WithCancel(ctx)
	wt := &waitTasks{c: c, tw: newTaskWaiter(), cancel: cancel, errc: make(chan error, 1)}
	opened := make(chan struct{})
	var once sync.Once
	go func() {
		wt.errc <- wt.follow(ctx, org, func() { once.Do(func() { close(opened) }) })
	}()
	select {
	case <-opened:
		return wt, nil
	case err := <-wt.errc:
		cancel()
		return nil, err
	}
}

// follow streams org's events into the waiter; after a stream the peer
// can no longer resume, it lists org's tasks again and goes on.
func (wt *waitTasks) follow(ctx context.Context, org string, opened func()) error {
	first := true
	for {
		_, err := api.Follow(ctx, []*api.Client{wt.c.Client}, api.EventQuery{Org: org, OnOpen: func(string) {
			opened()
			if !first {
				wt.relist(ctx, org)
			}
			first = false
		}}, func(e api.TaskEvent) error {
			wt.tw.saw(e.Task, e.To)
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		if c := api.CodeOf(err); c != api.CodeEventsGone && c != api.CodeTooSlow {
			return err
		}
		first = false
	}
}

func (wt *waitTasks) relist(ctx context.Context, org string) {
	ts, err := wt.c.Tasks(ctx, api.TaskQuery{Org: org})
	if err != nil {
		return // the next stream's listing, or the wait's own, catches up
	}
	for _, t := range ts {
		wt.tw.saw(t.ID, t.State)
	}
}

// wait waits until every task of ids ended, and returns their end states.
func (wt *waitTasks) wait(ctx context.Context, org string, ids []string) (map[string]string, error) {
	defer wt.cancel()
	wt.tw.want(ids)
	// The tasks may have ended before the IDs were known to the waiter,
	// but not before the stream opened: the events have them. A listing
	// once more costs little and covers a stream that restarted.
	wt.relist(ctx, org)
	select {
	case <-wt.tw.done:
		return wt.tw.states(), nil
	case err := <-wt.errc:
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// orgOfTask is the organisation part of a task ID ("<org>-<n>").
func orgOfTask(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return ""
}

// waitVerdict prints how the tasks ended and returns an exit error (code
// 3) unless all are done.
func waitVerdict(w io.Writer, states map[string]string, quiet bool) error {
	count := map[string]int{}
	var notDone []string
	for id, s := range states {
		count[s]++
		if s != "done" {
			notDone = append(notDone, id)
		}
	}
	sort.Strings(notDone)
	if !quiet {
		fmt.Fprintf(w, "ended: %d done, %d failed, %d cancelled\n", count["done"], count["failed"], count["cancelled"])
		if len(notDone) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE")
			for _, id := range notDone {
				fmt.Fprintf(tw, "%s\t%s\n", id, states[id])
			}
			_ = tw.Flush()
		}
	}
	if len(notDone) > 0 {
		return &exitError{code: 3, err: fmt.Errorf("%d of %d tasks did not end done", len(notDone), len(states))}
	}
	return nil
}
