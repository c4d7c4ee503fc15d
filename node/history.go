package node

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/history"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// retentionRule is the retention a new federation's first peer registers
// from config.yaml's consensus section; nil when both figures are 0.
func retentionRule(c config.ConsensusConfig) *ledger.Retention {
	if c.RetentionAfter <= 0 && c.RetentionKeep <= 0 {
		return nil
	}
	return &ledger.Retention{AfterMs: c.RetentionAfter.Milliseconds(), Keep: c.RetentionKeep}
}

// openHistory opens DATA/history.db, where this peer keeps its
// organisation's tasks once they leave the replicated state.
func (n *Node) openHistory() (err error) {
	n.history, err = history.Open(filepath.Join(n.dir, history.FileName), time.Second)
	return err
}

func (n *Node) closeHistory() error {
	if n.history == nil {
		return nil
	}
	return n.history.Close()
}

// keepForgotten is the OnApply hook's share for the history: the records
// of this organisation's tasks a forget_tasks removed go to the store
// before the state machine applies the next entry (the hook runs on its
// goroutine, and Put syncs), so a snapshot taken later never covers a
// forgotten task the store lacks. A peer that catches up by installing a
// snapshot skips the entries in between: it has no history of the tasks
// forgotten there (docs/HISTORY.md).
func (n *Node) keepForgotten(res *ledger.Result) {
	if res.Kind != ledger.KindForgetTasks || !res.Applied() || n.history == nil {
		return
	}
	var own []ledger.Task
	for _, t := range res.Forgotten {
		if t.Org == n.org {
			own = append(own, t)
		}
	}
	if err := n.history.Put(res.Index, own); err != nil {
		n.log.Error("history: forgotten tasks not kept", "index", res.Index, "tasks", len(own), "err", err)
	}
}

// History implements api.HistoryBackend: this organisation's forgotten
// tasks. Another organisation's history is not kept here (forbidden).
func (n *Node) History(ctx context.Context, q api.HistoryQuery) (api.HistoryPage, error) {
	if err := n.requireReady(); err != nil {
		return api.HistoryPage{}, err
	}
	if q.Org != "" && q.Org != n.org {
		return api.HistoryPage{}, api.Errorf(api.CodeForbidden, "this peer keeps the history of %q only; %q's is on its own peer", n.org, q.Org)
	}
	hq := history.Query{Org: n.org, Job: q.Job, EndedFromMs: q.FromMs, EndedToMs: q.ToMs, After: q.After, Limit: q.Limit}
	for _, s := range q.States {
		hq.States = append(hq.States, ledger.TaskState(s))
	}
	p, err := n.history.List(ctx, hq)
	if errors.Is(err, history.ErrBadQuery) {
		return api.HistoryPage{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	if err != nil {
		return api.HistoryPage{}, err
	}
	out := api.HistoryPage{Next: p.Next, Records: make([]api.HistoryRecord, len(p.Records))}
	for i := range p.Records {
		out.Records[i] = api.HistoryRecord{TaskDetail: apiconv.TaskDetail(&p.Records[i].Task), ForgottenIndex: p.Records[i].Index}
	}
	return out, nil
}
