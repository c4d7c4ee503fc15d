package node

import (
	"fmt"
	"slices"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
	"github.com/coopgrid/coopgrid/policy"
)

// chooseRequests is SA_s at submission (docs/POLICY.md, "SA live"): for
// every task of req with alternatives, in order, the alternative that this
// peer's committed state predicts ends first (policy.SAChooseLive, on
// ledger.SAView at nowMs) becomes the task's request (Nodes, CPUs,
// WallLimitMs in req), and the chosen request joins the tasks ahead of the
// next moldable task of the submission. The view may lag the leader's by
// the entries this peer has not applied yet.
func (n *Node) chooseRequests(req *api.SubmitRequest, nowMs int64) ([]api.MoldableChoice, error) {
	if !slices.ContainsFunc(req.Tasks, func(t api.SubmitTask) bool { return len(t.Alternatives) > 0 }) {
		return nil, nil
	}
	var out []api.MoldableChoice
	var err error
	n.cons.View(func(l *ledger.Ledger) {
		s, vm, jobPolicy := l.SAView(nowMs)
		for i := range req.Tasks {
			t := &req.Tasks[i]
			if len(t.Alternatives) == 0 {
				continue
			}
			spec := apiconv.SubmitTasks(api.SubmitRequest{Job: req.Job, Tasks: []api.SubmitTask{*t}}, "").Tasks[0]
			cand, ok := vm.SATask(fmt.Sprintf("\x00sa-%d", i), n.org, spec)
			if !ok {
				err = api.Errorf(api.CodeUnavailable, "organisation %q is not in this peer's ledger yet: cannot choose among tasks[%d]'s alternatives", n.org, i)
				return
			}
			alts := make([]policy.SARequest, len(t.Alternatives))
			for k, a := range t.Alternatives {
				alts[k] = policy.SARequest{Nodes: a.Nodes, CPUs: a.CPUs, WallLimitMs: a.WallLimitMs}
			}
			chosen, preds, e := policy.SAChooseLive(policy.SAInput{State: s, JobPolicy: jobPolicy, Task: cand, Alternatives: alts})
			if e != nil {
				err = api.Errorf(api.CodeInternal, "tasks[%d]: choosing among its alternatives: %v", i, e)
				return
			}
			out = append(out, moldableChoice(i, t.Alternatives, chosen, preds, nowMs))
			c := alts[chosen]
			t.Nodes, t.CPUs, t.WallLimitMs = c.Nodes, c.CPUs, c.WallLimitMs
			if t.Nodes == 1 {
				t.Nodes = 0
			}
			// The chosen request waits ahead of the next moldable task.
			cand.Request.CPUs, cand.WallLimitMs, cand.Seq = c.CPUs, c.WallLimitMs, policy.MaxSeq(s)+1
			if c.Nodes >= 2 {
				s.Gangs = append(s.Gangs, policy.SAGangOf(cand, c.Nodes))
			} else {
				s.Queued = append(s.Queued, cand)
			}
		}
	})
	return out, err
}

// moldableChoice is the API's record of one choice: predictions in ms from
// nowMs become Unix ms (0: never).
func moldableChoice(task int, alts []api.SubmitAlternative, chosen int, preds []policy.SAPrediction, nowMs int64) api.MoldableChoice {
	c := api.MoldableChoice{Task: task, MoldableView: api.MoldableView{Chosen: chosen}}
	for k, a := range alts {
		v := api.AlternativeView{Nodes: a.Nodes, CPUs: a.CPUs, WallLimitMs: a.WallLimitMs}
		if p := preds[k]; p.EndMs != policy.Unbounded {
			v.PredictedStartMs, v.PredictedEndMs = nowMs+p.StartMs, nowMs+p.EndMs
		}
		c.Alternatives = append(c.Alternatives, v)
	}
	return c
}
