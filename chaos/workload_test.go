package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
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
	// submitted maps each ID a submit returned to its client; ambiguous
	// counts submits per organisation that got no answer (their IDs, if
	// any, appear only in the final listing).
	submitted map[string]int
	ambiguous map[string]int
	cancelled map[string]bool // IDs some cancel was sent for (answered or not)
	counts    map[string]int  // op kind/outcome → count, for the report
	// catchUp holds, per peer, the windows from a kill to the moment the
	// restarted peer had applied what the leader had when it came back.
	catchUp map[string][][2]int64
}

func newHistory() *history {
	return &history{start: time.Now(), submitted: map[string]int{}, ambiguous: map[string]int{},
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
	case api.CodeUnreachable, api.CodeUnavailable, api.CodeInternal:
		// Internal covers a proposal the node gave up on (no leader, lost
		// leadership mid-commit): it may still commit.
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
	// maxTasks bounds what the client submits (0: no bound), so that the
	// queue drains quickly after the faults.
	maxTasks int
	errs     []error // unexpected answers
}

// taskSpec is the process executor's work: a short shell run with one
// output, so that a run's outcome is real (exit code, returned file).
func taskSpec(rng *rand.Rand, i int) api.SubmitTask {
	sleep := fmt.Sprintf("0.%d", 2+rng.Intn(8))
	return api.SubmitTask{
		Name:        fmt.Sprintf("chaos-%d", i),
		Argv:        []string{"/bin/sh", "-c", "sleep " + sleep + "; echo ok > out.txt"},
		SizeMFlop:   int64(1000 + rng.Intn(4000)),
		WallLimitMs: 120_000,
		Outputs:     []string{"out.txt"},
	}
}

func (w *workClient) submit(ctx context.Context) {
	n := 1 + w.rng.Intn(3)
	req := api.SubmitRequest{Job: fmt.Sprintf("c%d", w.id)}
	for i := 0; i < n; i++ {
		req.Tasks = append(req.Tasks, taskSpec(w.rng, i))
	}
	call := w.h.now()
	resp, err := w.peer.client.Submit(ctx, req)
	ret := w.h.now()
	switch out := outcome(err); out {
	case outOK:
		if len(resp.TaskIDs) != n {
			w.errs = append(w.errs, fmt.Errorf("client %d: submit of %d tasks returned IDs %v", w.id, n, resp.TaskIDs))
			return
		}
		w.h.mu.Lock()
		for _, id := range resp.TaskIDs {
			if prev, dup := w.h.submitted[id]; dup {
				w.errs = append(w.errs, fmt.Errorf("client %d: submit returned %s, already returned to client %d", w.id, id, prev))
			}
			w.h.submitted[id] = w.id
		}
		w.h.mu.Unlock()
		for _, id := range resp.TaskIDs {
			w.h.add(porcupine.Operation{ClientId: w.id, Input: opInput{Kind: opCreate, ID: id}, Call: call, Output: outOK, Return: ret}, "submit ok")
		}
		w.mine = append(w.mine, resp.TaskIDs...)
	case outAmbiguous:
		w.h.mu.Lock()
		w.h.ambiguous[w.peer.name]++
		w.h.counts["submit unanswered"]++
		w.h.mu.Unlock()
	default:
		w.errs = append(w.errs, fmt.Errorf("client %d: submit via %s: %w", w.id, w.peer.name, err))
	}
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
			w.submit(opCtx)
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
