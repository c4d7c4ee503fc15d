package chaos

import (
	"fmt"
	"sort"
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

const (
	opCreate = "create" // a submit that returned this ID (or, for an ID no answer named, an ambiguous one)
	opRead   = "read"   // GET /v1/tasks/{id}
	opCancel = "cancel" // POST /v1/tasks/{id}/cancel
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
	Peer string // the peer that served a read or cancel (for the report)
}

type taskState struct {
	Exists bool
	// Status is stLive, stDone, stFailed, stCancelled, or stEnded: done or
	// failed, known only from a refused cancel, not yet read.
	Status string
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
			id := op.Input.(opInput).ID
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(taskModel, tc.h); got != tc.want {
				t.Fatalf("linearizable = %v, want %v", got, tc.want)
			}
		})
	}
}
