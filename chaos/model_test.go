package chaos

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The sequential model of the task table, one task at a time: operations
// on different task IDs commute, so the history is partitioned by ID
// (porcupine checks each partition alone). A task's state is whether it
// exists, its coarse status, and whether some cancel may have reached it.
//
// Status changes that no client makes (the scheduler starting, finishing
// or failing a task) are folded into reads: a read may observe a live task
// done or failed at any point, but never back to live, never gone, and
// cancelled only after a cancel.
//
// Submissions have partitions of their own, one per request ID: each
// attempt (the first send and every resend with the same request ID) and,
// at the end, the set of tasks the healed ledger holds for that request.
// A request is applied at most once: every answered attempt names the
// same task IDs, and the ledger holds exactly those — a resend never
// produces a second set of tasks.

const (
	opCreate = "create" // a submit that returned this ID (or, for an ID no answer named, an ambiguous one)
	opRead   = "read"   // GET /v1/tasks/{id}
	opCancel = "cancel" // POST /v1/tasks/{id}/cancel
	// In a request's partition (opInput.Key): one attempt of a submission,
	// output the IDs it answered (comma-separated) or outAmbiguous; and the
	// final listing, output the IDs the ledger holds for the request ("" for
	// none).
	opSubmit  = "submit"
	opListing = "listing"
)

// Outputs of reads and cancels, besides a task status.
const (
	outOK        = "ok"
	outNotFound  = "not_found"
	outConflict  = "conflict"
	outAmbiguous = "ambiguous" // no answer: the call may or may not have taken effect
)

const (
	stLive      = "live" // queued, assigned or running
	stDone      = "done"
	stFailed    = "failed"
	stCancelled = "cancelled"
)

type opInput struct {
	Kind string
	ID   string
	Peer string // the peer that served a read, cancel or submit (for the report)
	// Key is the request ID of opSubmit and opListing, N the submission's
	// task count.
	Key string
	N   int
}

// taskState is the state of a task's partition (Exists, Status) or of a
// request's (Applied, IDs).
type taskState struct {
	Exists bool
	// Status is stLive, stDone, stFailed, stCancelled, or stEnded: done or
	// failed, known only from a refused cancel, not yet read.
	Status string
	// Applied: the request queued its tasks, IDs (comma-separated), or
	// idsUnknown while only an unanswered attempt can have applied it.
	Applied bool
	IDs     string
}

const idsUnknown = "?"

// partitionKey puts a request's operations apart from any task's.
func partitionKey(in opInput) string {
	if in.Kind == opSubmit || in.Kind == opListing {
		return "request " + in.Key
	}
	return in.ID
}

// stepRequest is stepTask for a request's partition.
func stepRequest(s taskState, in opInput, out string) []any {
	count := 0
	if out != "" {
		count = len(strings.Split(out, ","))
	}
	switch in.Kind {
	case opSubmit:
		if out == outAmbiguous {
			// Applied or not: both futures stay possible.
			if !s.Applied {
				return []any{s, taskState{Applied: true, IDs: idsUnknown}}
			}
			return []any{s}
		}
		if count != in.N {
			return nil
		}
		// The first answer names the IDs (whether this attempt or an
		// unanswered earlier one applied the request); every later answer
		// must name the same.
		if !s.Applied || s.IDs == idsUnknown || s.IDs == out {
			return []any{taskState{Applied: true, IDs: out}}
		}
		return nil
	case opListing:
		switch {
		case !s.Applied:
			if out == "" {
				return []any{s}
			}
		case s.IDs == idsUnknown:
			if count == in.N {
				return []any{taskState{Applied: true, IDs: out}}
			}
		case out == s.IDs:
			return []any{s}
		}
	}
	return nil
}

const stEnded = "ended"

// coarse maps an API task state to the model's.
func coarse(s string) string {
	switch s {
	case "queued", "assigned", "running":
		return stLive
	}
	return s
}

// stepTask is the nondeterministic step: every state the task may be in
// after the operation with this output, none if the output is impossible.
// The ledger cancels at once (cancel_task makes the task cancelled, its
// run winding down in a "cancelling" segment) and refuses to cancel a
// terminal task (bad_state, HTTP 409).
func stepTask(state, input, output any) []any {
	s := state.(taskState)
	in := input.(opInput)
	out := output.(string)
	if in.Kind == opSubmit || in.Kind == opListing {
		return stepRequest(s, in, out)
	}
	one := func(ok bool, next taskState) []any {
		if !ok {
			return nil
		}
		return []any{next}
	}
	switch in.Kind {
	case opCreate:
		return one(!s.Exists, taskState{Exists: true, Status: stLive})
	case opRead:
		if out == outNotFound {
			return one(!s.Exists, s)
		}
		if !s.Exists {
			return nil
		}
		switch got := coarse(out); got {
		case stLive:
			return one(s.Status == stLive, s)
		case stDone, stFailed:
			// The scheduler ends a live task whenever it likes.
			return one(s.Status == stLive || s.Status == stEnded || s.Status == got, taskState{Exists: true, Status: got})
		case stCancelled:
			return one(s.Status == stCancelled, s)
		}
		return nil
	case opCancel:
		switch out {
		case outOK:
			return one(s.Exists && s.Status == stLive, taskState{Exists: true, Status: stCancelled})
		case outNotFound:
			return one(!s.Exists, s)
		case outConflict:
			if !s.Exists {
				return nil
			}
			if s.Status == stLive {
				// It ended on its own just before.
				return []any{taskState{Exists: true, Status: stEnded}}
			}
			return []any{s}
		case outAmbiguous:
			// Applied or not: both futures stay possible.
			if s.Exists && s.Status == stLive {
				return []any{s, taskState{Exists: true, Status: stCancelled}}
			}
			return []any{s}
		}
	}
	return nil
}

// taskModel is the porcupine model, partitioned by task ID.
var taskModel = (&porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			id := partitionKey(op.Input.(opInput))
			by[id] = append(by[id], op)
		}
		ids := make([]string, 0, len(by))
		for id := range by {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		out := make([][]porcupine.Operation, 0, len(ids))
		for _, id := range ids {
			out = append(out, by[id])
		}
		return out
	},
	Init:  func() []any { return []any{taskState{}} },
	Step:  stepTask,
	Equal: func(a, b any) bool { return a.(taskState) == b.(taskState) },
	DescribeOperation: func(input, output any) string {
		in := input.(opInput)
		if in.Kind == opSubmit || in.Kind == opListing {
			return fmt.Sprintf("%s(%s, %d tasks) via %s → %q", in.Kind, in.Key, in.N, in.Peer, output)
		}
		if in.Peer != "" {
			return fmt.Sprintf("%s(%s) via %s → %v", in.Kind, in.ID, in.Peer, output)
		}
		return fmt.Sprintf("%s(%s) → %v", in.Kind, in.ID, output)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(taskState)) },
}).ToModel()

// TestTaskModel: the checker accepts histories a correct federation can
// produce and rejects each kind of anomaly the chaos runs look for.
func TestTaskModel(t *testing.T) {
	op := func(client int, kind, id string, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: opInput{Kind: kind, ID: id}, Call: call, Output: out, Return: ret}
	}
	const id = "uni-1-1"
	// A submission's attempts and the final listing of its tasks.
	const key = "c0-s1"
	sub := func(client int, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: opInput{Kind: opSubmit, Key: key, N: 2}, Call: call, Output: out, Return: ret}
	}
	list := func(at int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: 9, Input: opInput{Kind: opListing, Key: key, N: 2}, Call: at, Output: out, Return: at + 1}
	}
	const ids, others = "uni-1-1,uni-1-2", "uni-1-3,uni-1-4"
	cases := []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"submit, run, done", []porcupine.Operation{
			op(0, opCreate, id, 0, 10, outOK), op(0, opRead, id, 11, 12, "queued"),
			op(0, opRead, id, 13, 14, "running"), op(0, opRead, id, 15, 16, "done")}, true},
		{"a read concurrent with the submit sees nothing", []porcupine.Operation{
			op(0, opCreate, id, 0, 10, outOK), op(1, opRead, id, 1, 2, outNotFound)}, true},
		{"a task vanishes after its submit returned", []porcupine.Operation{
			op(0, opCreate, id, 0, 10, outOK), op(1, opRead, id, 11, 12, outNotFound)}, false},
		{"a done task is read running again", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(0, opRead, id, 2, 3, "done"), op(1, opRead, id, 4, 5, "running")}, false},
		{"cancelled without any cancel", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(0, opRead, id, 2, 3, "cancelled")}, false},
		{"cancelled by a concurrent cancel", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(1, opCancel, id, 2, 9, outOK), op(0, opRead, id, 3, 4, "cancelled")}, true},
		{"an unanswered cancel may have taken effect", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(1, opCancel, id, 2, 1000, outAmbiguous), op(0, opRead, id, 3, 4, "cancelled")}, true},
		{"cancel accepted on a task already done", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(0, opRead, id, 2, 3, "done"), op(1, opCancel, id, 4, 5, outOK)}, false},
		{"cancel refused: the task had just ended", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(0, opRead, id, 2, 3, "queued"), op(1, opCancel, id, 4, 5, outConflict), op(0, opRead, id, 6, 7, "done")}, true},
		{"cancel refused, then the task is read live", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(1, opCancel, id, 4, 5, outConflict), op(0, opRead, id, 6, 7, "running")}, false},
		{"cancel accepted, then the task is read done", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(1, opCancel, id, 2, 3, outOK), op(0, opRead, id, 4, 5, "done")}, false},
		{"an unanswered cancel may not have taken effect", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(1, opCancel, id, 2, 1000, outAmbiguous), op(0, opRead, id, 3, 4, "done")}, true},
		{"two submits return the same ID", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(1, opCreate, id, 2, 3, outOK)}, false},
		{"other IDs are independent", []porcupine.Operation{
			op(0, opCreate, id, 0, 1, outOK), op(1, opRead, "uni-2-1", 2, 3, outNotFound), op(0, opRead, id, 4, 5, "failed")}, true},

		// Submissions resent with the same request ID.
		{"a submit answered at once holds its tasks", []porcupine.Operation{
			sub(0, 0, 10, ids), list(100, ids)}, true},
		{"unanswered, then the resend is answered", []porcupine.Operation{
			sub(0, 0, 100, outAmbiguous), sub(0, 20, 30, ids), list(100, ids),
			op(0, opCreate, id, 0, 30, outOK), op(0, opRead, id, 40, 41, "queued")}, true},
		{"never answered, never queued", []porcupine.Operation{
			sub(0, 0, 100, outAmbiguous), sub(0, 20, 100, outAmbiguous), list(100, "")}, true},
		{"never answered, queued once", []porcupine.Operation{
			sub(0, 0, 100, outAmbiguous), sub(0, 20, 100, outAmbiguous), list(100, ids)}, true},
		{"an answered request resent: the same IDs again", []porcupine.Operation{
			sub(0, 0, 10, ids), sub(1, 20, 30, ids), list(100, ids)}, true},
		{"a resend answered with other IDs", []porcupine.Operation{
			sub(0, 0, 10, ids), sub(0, 20, 30, others), list(100, ids)}, false},
		{"two sets: the unanswered attempt and the answered resend both queued", []porcupine.Operation{
			sub(0, 0, 100, outAmbiguous), sub(0, 20, 30, others), list(100, ids+","+others)}, false},
		{"two sets from two unanswered attempts", []porcupine.Operation{
			sub(0, 0, 100, outAmbiguous), sub(0, 20, 100, outAmbiguous), list(100, ids+","+others)}, false},
		{"an answered request's tasks are not in the ledger", []porcupine.Operation{
			sub(0, 0, 10, ids), list(100, "")}, false},
		{"an answer naming fewer tasks than were sent", []porcupine.Operation{
			sub(0, 0, 10, "uni-1-1"), list(100, "uni-1-1")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(taskModel, tc.h); got != tc.want {
				t.Fatalf("linearizable = %v, want %v", got, tc.want)
			}
		})
	}
}
