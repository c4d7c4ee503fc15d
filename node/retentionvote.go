package node

import (
	"context"
	"strings"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// Retention implements api.RetentionVoter: the federation's retention
// rule in force and the votes pending, from the local state.
func (n *Node) Retention(ctx context.Context) (api.RetentionView, error) {
	if err := n.requireReady(); err != nil {
		return api.RetentionView{}, err
	}
	var v api.RetentionView
	n.cons.View(func(l *ledger.Ledger) { v = retentionRuleView(l) })
	return v, nil
}

// VoteRetention casts this organisation's vote for the federation's
// retention rule (the ledger's retention_vote command, which any member
// organisation may propose and which changes the rule once more than half
// of them agree).
func (n *Node) VoteRetention(ctx context.Context, req api.RetentionRequest) (api.RetentionView, error) {
	if err := n.requireReady(); err != nil {
		return api.RetentionView{}, err
	}
	if err := api.ValidateRetention(req); err != nil {
		return api.RetentionView{}, err
	}
	res, err := n.propose(ctx, func(c *ledger.Command) {
		c.RetentionVote = &ledger.RetentionVote{AfterMs: req.AfterMs, Keep: req.Keep}
	})
	if err != nil {
		return api.RetentionView{}, apiError(err)
	}
	var v api.RetentionView
	n.cons.View(func(l *ledger.Ledger) { v = retentionRuleView(l) })
	v.Note = strings.Join(res.Notes, "; ")
	return v, nil
}

func retentionRuleView(l *ledger.Ledger) api.RetentionView {
	var v api.RetentionView
	if r, ok := l.Rules(); ok && r.Retention != nil {
		v.AfterMs, v.Keep = r.Retention.AfterMs, r.Retention.Keep
	}
	for _, p := range l.RetentionVotes() {
		v.Votes = append(v.Votes, api.RetentionVoteView{Org: p.Voter, AfterMs: p.AfterMs, Keep: p.Keep, Index: p.Index})
	}
	return v
}

var _ api.RetentionVoter = (*Node)(nil)
