package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// WithMoldable records SA_s's choices in b, the command that queues req:
// every spec of a chosen task (each part of a parallel job) carries its
// alternatives, predictions and choice (ledger.Spec.Moldable). req holds
// the chosen requests already.
func WithMoldable(b *ledger.SubmitTasks, req api.SubmitRequest, choices []api.MoldableChoice) {
	first := make([]int, len(req.Tasks)) // each task's first spec in b
	n := 0
	for i, t := range req.Tasks {
		first[i] = n
		n += max(1, t.Nodes)
	}
	for _, c := range choices {
		m := &ledger.Moldable{Chosen: c.Chosen}
		for _, a := range c.Alternatives {
			m.Alternatives = append(m.Alternatives, ledger.Alternative{Nodes: a.Nodes, CPUs: a.CPUs, WallLimitMs: a.WallLimitMs,
				PredictedStartMs: a.PredictedStartMs, PredictedEndMs: a.PredictedEndMs})
		}
		for p := range max(1, req.Tasks[c.Task].Nodes) {
			b.Tasks[first[c.Task]+p].Spec.Moldable = m.Clone()
		}
	}
}

// MoldableView is the API's view of a moldable task's record (nil when
// the task is not moldable).
func MoldableView(m *ledger.Moldable) *api.MoldableView {
	if m == nil {
		return nil
	}
	v := &api.MoldableView{Chosen: m.Chosen}
	for _, a := range m.Alternatives {
		v.Alternatives = append(v.Alternatives, api.AlternativeView{Nodes: a.Nodes, CPUs: a.CPUs, WallLimitMs: a.WallLimitMs,
			PredictedStartMs: a.PredictedStartMs, PredictedEndMs: a.PredictedEndMs})
	}
	return v
}
