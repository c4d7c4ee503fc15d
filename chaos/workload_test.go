package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coopgrid/coopgrid/api"
)

// history records client operations with call and return times on one
// monotonic clock (nanoseconds since the workload began).
type history struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
	// submitted maps each ID a submit returned to its client; requests
	// holds every logical submission by request ID (its tasks are named
	// "<request ID>-t<i>", so the final listing tells which submission
	// queued each task).
	submitted map[string]int
	requests  map[string]*logicalSubmit
	cancelled map[string]bool // IDs some cancel was sent for (answered or not)
	counts    map[string]int  // op kind/outcome → count, for the report
	// catchUp holds, per peer, the windows from a kill to the moment the
	// restarted peer had applied what the leader had when it came back.
	catchUp map[string][][2]int64
}

func newHistory() *history {
	return &history{start: time.Now(), submitted: map[string]int{}, requests: map[string]*logicalSubmit{},
		cancelled: map[string]bool{}, counts: map[string]int{}, catchUp: map[string][][2]int64{}}
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(op porcupine.Operation, count string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
	h.counts[count]++
}

// outcome classifies an API error for the model: a definite refusal the
// model knows, or no answer (ambiguous). A refusal the model does not know
// is returned as "" with the error so the caller fails the run.
func outcome(err error) string {
	switch api.CodeOf(err) {
	case "":
		if err == nil {
			return outOK
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return outAmbiguous
		}
		return ""
	case api.CodeNotFound:
		return outNotFound
	case api.CodeConflict:
		return outConflict
	case api.CodeUnreachable, api.CodeUnavailable, api.CodeInternal, api.CodeNoQuorum:
		// Internal covers a proposal the node gave up on (no leader, lost
		// leadership mid-commit): it may still commit. So may a submission
		// answered no_quorum after an attempt whose outcome was unknown.
		return outAmbiguous
	}
	return ""
}

// workClient is one concurrent client, bound to its organisation's peer
// (only that peer may act for the organisation).
type workClient struct {
	id   int
	peer *peer
	rng  *rand.Rand
	h    *history
	mine []string // IDs this client submitted
	seq  int      // submissions made, for request IDs
	// maxTasks bounds what the client submits (0: no bound), so that the
	// queue drains quickly after the faults.
	maxTasks int
	errs     []error // unexpected answers
}

// taskSpec is the process executor's work: a short shell run with one
// output, so that a run's outcome is real (exit code, returned file). The
// name ties the task to its submission's request ID.
func taskSpec(rng *rand.Rand, requestID string, i int) api.SubmitTask {
	sleep := fmt.Sprintf("0.%d", 2+rng.Intn(8))
	return api.SubmitTask{
		Name:        fmt.Sprintf("%s-t%d", requestID, i),
		Argv:        []string{"/bin/sh", "-c", "sleep " + sleep + "; echo ok > out.txt"},
		SizeMFlop:   int64(1000 + rng.Intn(4000)),
		WallLimitMs: 120_000,
		Outputs:     []string{"out.txt"},
	}
}

// A submission whose outcome stays unknown is sent again with the same
// request ID, up to submitAttempts times with a doubling pause: faults
// last 1-8 s, the pauses 0.5+1+2+4 s.
const (
	submitAttempts = 5
	submitBackoff  = 500 * time.Millisecond
)

// logicalSubmit is one submission and what became of it over its
// attempts.
type logicalSubmit struct {
	client int
	n      int // tasks
	// attempts sent, the first one's call time, and the IDs the answer
	// named (nil while no attempt was answered).
	attempts int
	call     int64
	ids      []string
	replayed bool // the answer was a replay of an earlier attempt
}

// submit sends one submission, resending it with the same request ID while
// no answer says what became of it. Every attempt is recorded (opSubmit in
// its request's partition of the model); the IDs of an answer are created
// (opCreate) between the first attempt's call and the answer.
func (w *workClient) submit() {
	n := 1 + w.rng.Intn(3)
	w.seq++
	key := fmt.Sprintf("c%d-s%d", w.id, w.seq)
	req := api.SubmitRequest{Job: fmt.Sprintf("c%d", w.id), RequestID: key}
	for i := 0; i < n; i++ {
		req.Tasks = append(req.Tasks, taskSpec(w.rng, key, i))
	}
	ls := &logicalSubmit{client: w.id, n: n, call: w.h.now()}
	w.h.mu.Lock()
	w.h.requests[key] = ls
	w.h.mu.Unlock()
	pause := submitBackoff
	for attempt := 1; attempt <= submitAttempts; attempt++ {
		// This workload resends by itself and records every attempt: the
		// client sends each once.
		c := *w.peer.client
		c.SubmitAttempts = 1
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		call := w.h.now()
		resp, err := c.Submit(ctx, req)
		ret := w.h.now()
		cancel()
		w.h.mu.Lock()
		ls.attempts = attempt
		w.h.mu.Unlock()
		op := porcupine.Operation{ClientId: w.id, Input: opInput{Kind: opSubmit, Key: key, N: n, Peer: w.peer.name}, Call: call, Return: ret}
		switch out := outcome(err); out {
		case outOK:
			if len(resp.TaskIDs) != n || resp.RequestID != key {
				w.errs = append(w.errs, fmt.Errorf("client %d: submit %s of %d tasks returned IDs %v, request ID %q", w.id, key, n, resp.TaskIDs, resp.RequestID))
				return
			}
			op.Output = strings.Join(resp.TaskIDs, ",")
			w.h.add(op, fmt.Sprintf("submit ok (attempt %d)", attempt))
			w.h.mu.Lock()
			ls.ids, ls.replayed = resp.TaskIDs, resp.Replayed
			for _, id := range resp.TaskIDs {
				if prev, dup := w.h.submitted[id]; dup {
					w.errs = append(w.errs, fmt.Errorf("client %d: submit returned %s, already returned to client %d", w.id, id, prev))
				}
				w.h.submitted[id] = w.id
			}
			if resp.Replayed {
				w.h.counts["submit answered as a replay"]++
			}
			w.h.mu.Unlock()
			for _, id := range resp.TaskIDs {
				w.h.add(porcupine.Operation{ClientId: w.id, Input: opInput{Kind: opCreate, ID: id}, Call: ls.call, Output: outOK, Return: ret}, "task created")
			}
			w.mine = append(w.mine, resp.TaskIDs...)
			return
		case outAmbiguous:
			// It may still take effect at any time: pending until the end.
			op.Output, op.Return = outAmbiguous, -1
			w.h.add(op, "submit attempt unanswered")
		default:
			w.errs = append(w.errs, fmt.Errorf("client %d: submit %s via %s: %w", w.id, key, w.peer.name, err))
			return
		}
		if attempt < submitAttempts {
			time.Sleep(pause)
			pause *= 2
		}
	}
	w.h.mu.Lock()
	w.h.counts["submit unanswered after every attempt"]++
	w.h.mu.Unlock()
}

// checkSubmits is check 2's half about submissions, on the final listing:
// every task belongs to a submission of the workload (by its name); a
// submission holds exactly the tasks its answer named — never a second
// set from a resend — or, if no attempt was answered, none or one set. It
// returns the IDs no answer named (created at an unknown time).
func (h *history) checkSubmits(t *testing.T, final []api.TaskView) (orphans []string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	byKey := map[string][]string{}
	for _, tk := range final {
		key, _, ok := strings.Cut(tk.Name, "-t")
		if ls := h.requests[key]; !ok || ls == nil {
			t.Errorf("task %s (%q) of %s is in the ledger but belongs to no submission of the workload", tk.ID, tk.Name, tk.Org)
			continue
		}
		byKey[key] = append(byKey[key], tk.ID)
	}
	var retried, replayed, unanswered int
	for key, ls := range h.requests {
		got := byKey[key]
		if ls.attempts > 1 {
			retried++
		}
		if ls.replayed {
			replayed++
		}
		switch {
		case ls.ids != nil:
			if !slices.Equal(got, ls.ids) {
				t.Errorf("submission %s (client %d, %d attempts): the ledger holds %v, its answer named %v", key, ls.client, ls.attempts, got, ls.ids)
			}
		case len(got) != 0 && len(got) != ls.n:
			t.Errorf("submission %s of %d tasks (client %d, %d attempts, none answered): the ledger holds %v", key, ls.n, ls.client, ls.attempts, got)
		default:
			unanswered++
			orphans = append(orphans, got...)
		}
	}
	t.Logf("submissions: %d, %d sent more than once, %d answered as a replay, %d never answered (%d of their tasks queued)",
		len(h.requests), retried, replayed, unanswered, len(orphans))
	return orphans
}

// listingOps closes each submission's partition of the model with what
// the healed ledger holds for it.
func (h *history) listingOps(final []api.TaskView, client int, at int64) []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	byKey := map[string][]string{}
	for _, tk := range final {
		if key, _, ok := strings.Cut(tk.Name, "-t"); ok {
			byKey[key] = append(byKey[key], tk.ID)
		}
	}
	var ops []porcupine.Operation
	for key, ls := range h.requests {
		ops = append(ops, porcupine.Operation{ClientId: client, Input: opInput{Kind: opListing, Key: key, N: ls.n},
			Call: at, Output: strings.Join(byKey[key], ","), Return: at + 1})
	}
	return ops
}

func (w *workClient) cancel(ctx context.Context) {
	if len(w.mine) == 0 {
		return
	}
	id := w.mine[w.rng.Intn(len(w.mine))]
	w.h.mu.Lock()
	w.h.cancelled[id] = true
	w.h.mu.Unlock()
	call := w.h.now()
	err := w.peer.client.Cancel(ctx, id)
	ret := w.h.now()
	out := outcome(err)
	if out == "" {
		w.errs = append(w.errs, fmt.Errorf("client %d: cancel %s via %s: %w", w.id, id, w.peer.name, err))
		return
	}
	if out == outAmbiguous {
		ret = -1 // pending: set to the end of the history before checking
	}
	w.h.add(porcupine.Operation{ClientId: w.id, Input: opInput{Kind: opCancel, ID: id, Peer: w.peer.name}, Call: call, Output: out, Return: ret}, "cancel "+out)
}

func (w *workClient) read(ctx context.Context) {
	if len(w.mine) == 0 {
		return
	}
	id := w.mine[w.rng.Intn(len(w.mine))]
	call := w.h.now()
	td, err := w.peer.client.Task(ctx, id)
	ret := w.h.now()
	out := outcome(err)
	switch out {
	case outOK:
		out = td.State
	case outNotFound:
	case outAmbiguous:
		// A read without an answer observed nothing.
		w.h.mu.Lock()
		w.h.counts["read unanswered"]++
		w.h.mu.Unlock()
		return
	default:
		w.errs = append(w.errs, fmt.Errorf("client %d: read %s via %s: %w", w.id, id, w.peer.name, err))
		return
	}
	w.h.add(porcupine.Operation{ClientId: w.id, Input: opInput{Kind: opRead, ID: id, Peer: w.peer.name}, Call: call, Output: out, Return: ret}, "read")
}

// run issues operations until ctx ends: mostly reads, submits, some
// cancels, with short random pauses.
func (w *workClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		opCtx, cancel := context.WithTimeout(context.Background(), callTimeout)
		switch r := w.rng.Intn(10); {
		case r < 3 && (w.maxTasks == 0 || len(w.mine) < w.maxTasks):
			w.submit() // its own timeout per attempt
		case r < 4:
			w.cancel(opCtx)
		default:
			w.read(opCtx)
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50+w.rng.Intn(200)) * time.Millisecond):
		}
	}
}
