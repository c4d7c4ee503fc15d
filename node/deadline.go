package node

import (
	"context"
	"slices"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// asNice is what a submission's on_miss: nice fallback did: the tasks
// (by index) queued as nice because no machine could finish them in time,
// and why. Never nil.
type asNice struct {
	tasks []int
	why   string
}

// fallBackToNice applies on_miss: nice before proposing: while this peer's
// committed state (ledger.CheckDeadlines, the leader's admission rule)
// refuses a soft-deadline task whose submitter asked for the fallback,
// that task becomes nice in cmd. A task with on_miss: refuse stays as it
// is: the leader refuses the submission. A resend of a remembered request
// is left alone (the ledger answers it).
func (n *Node) fallBackToNice(cmd ledger.Command, req api.SubmitRequest) *asNice {
	b := cmd.SubmitTasks
	out := &asNice{}
	if !slices.ContainsFunc(req.Tasks, func(t api.SubmitTask) bool { return t.OnMiss == "nice" }) {
		return out
	}
	n.cons.View(func(l *ledger.Ledger) {
		if _, ok := l.SubmitRequest(cmd.Org, b.RequestID); ok {
			return
		}
		for {
			r := l.CheckDeadlines(cmd.Org, cmd.AtMs, b.Tasks)
			if r == nil || !apiconv.AcceptAsNice(b, req, r.Index) {
				return
			}
			if out.why == "" {
				out.why = r.Error()
			}
			out.tasks = append(out.tasks, r.Index)
		}
	})
	return out
}

// retryAsNice answers a submission the leader refused for a deadline
// (refusal) although this peer's state had admitted it (the two states
// differed): if some soft-deadline task asked for on_miss: nice, every
// such task becomes nice and the submission is proposed again; otherwise
// the refusal stands.
func (n *Node) retryAsNice(ctx context.Context, cmd ledger.Command, req api.SubmitRequest, key string, refusal error, nice *asNice) (ledger.Result, error) {
	var more []int
	for i := range cmd.SubmitTasks.Tasks {
		if apiconv.AcceptAsNice(cmd.SubmitTasks, req, i) {
			more = append(more, i)
		}
	}
	if len(more) == 0 {
		return ledger.Result{}, refusal
	}
	encoded, err := n.encode(cmd)
	if err != nil {
		return ledger.Result{}, err
	}
	if nice.why == "" {
		nice.why = p2pMessage(refusal)
	}
	nice.tasks = append(nice.tasks, more...)
	return n.proposeSubmit(ctx, encoded, key)
}

// response adds the fallback to a submission's answer.
func (a *asNice) response(r api.SubmitResponse) api.SubmitResponse {
	if len(a.tasks) == 0 {
		return r
	}
	for _, i := range a.tasks {
		if i < len(r.TaskIDs) {
			r.AcceptedAsNice = append(r.AcceptedAsNice, r.TaskIDs[i])
		}
	}
	r.Note = "accepted as nice (on_miss: nice): " + a.why
	return r
}
