package node

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/history"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
	"github.com/libp2p/go-libp2p/core/peer"
)

// retentionRule is the retention a new federation's first peer registers
// from config.yaml's consensus section; nil when both figures are 0.
func retentionRule(c config.ConsensusConfig) *ledger.Retention {
	if c.RetentionAfter <= 0 && c.RetentionKeep <= 0 {
		return nil
	}
	return &ledger.Retention{AfterMs: c.RetentionAfter.Milliseconds(), Keep: c.RetentionKeep}
}

// openHistory opens DATA/history.db, where this peer keeps the tasks
// that left the replicated state, and serves its records to the members
// that skipped them (history.ProtoHistory), filling its own gaps from them.
func (n *Node) openHistory() (err error) {
	n.history, err = history.Open(filepath.Join(n.dir, history.FileName), time.Second)
	if err != nil {
		return err
	}
	n.historyReplica = history.NewReplica(history.ReplicaConfig{Host: n.host, Members: historyMembers{n}, Store: n.history,
		Logger: n.log.With("component", "history")})
	return nil
}

func (n *Node) closeHistory() error {
	if n.history == nil {
		return nil
	}
	if n.historyReplica != nil {
		n.historyReplica.Close()
	}
	return n.history.Close()
}

// historyMembers is the membership the history replica checks and asks;
// empty until consensus is up (the replica starts before it, so that the
// snapshot restored at start-up finds it).
type historyMembers struct{ n *Node }

func (m historyMembers) cons() *consensus.Node {
	select {
	case <-m.n.consUp:
		return m.n.cons
	default:
		return nil
	}
}

func (m historyMembers) IsMember(p peer.ID) bool {
	c := m.cons()
	return c != nil && c.IsMember(p)
}

func (m historyMembers) Others() []peer.ID {
	c := m.cons()
	if c == nil {
		return nil
	}
	members, err := c.Members()
	if err != nil {
		return nil
	}
	var out []peer.ID
	for _, mb := range members {
		switch {
		case mb.ID == m.n.host.ID():
		case mb.Leader:
			out = append([]peer.ID{mb.ID}, out...)
		default:
			out = append(out, mb.ID)
		}
	}
	return out
}

// historyRestored is the OnRestore hook's share for the history: a
// snapshot skipped the entries it covers, so the records of the tasks
// forgotten there are fetched from another member.
func (n *Node) historyRestored(index uint64) {
	if n.history == nil {
		return
	}
	if err := n.history.Restored(index); err != nil {
		n.log.Error("history: the range a snapshot skipped is not noted; its records will be missing", "index", index, "err", err)
	}
	if n.historyReplica != nil {
		n.historyReplica.Kick()
	}
}

// keepForgotten is the OnApply hook's share for the history: the records
// of every task a forget_tasks removed go to the store before the state
// machine applies the next entry (the hook runs on its goroutine, and Put
// syncs), so a snapshot taken later never covers a forgotten task the
// store lacks. Every organisation's are kept, not only this one's: a
// member that skipped them by installing a snapshot fetches them from
// another (historyRestored; docs/HISTORY.md).
func (n *Node) keepForgotten(res *ledger.Result) {
	if n.history == nil {
		return
	}
	if res.Kind == ledger.KindForgetTasks && res.Applied() {
		if err := n.history.Put(res.Index, res.Forgotten); err != nil {
			// The store noted the index as a gap: the replica fetches its
			// records from another member, retrying with backoff.
			n.log.Error("history: forgotten tasks not kept here; fetching them from another member", "index", res.Index, "tasks", len(res.Forgotten), "err", err)
			if n.historyReplica != nil {
				n.historyReplica.Kick()
			}
		}
	}
	n.history.Applied(res.Index)
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
