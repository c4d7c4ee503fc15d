package node

import (
	"context"
	"strings"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// VoteJobPolicy casts this organisation's vote for the federation's job
// policy (api.JobPolicyVoter): the ledger's job_policy command, which any
// member organisation may propose and which changes the policy once more
// than half of them agree.
func (n *Node) VoteJobPolicy(ctx context.Context, req api.JobPolicyRequest) (api.JobPolicyView, error) {
	if err := n.requireReady(); err != nil {
		return api.JobPolicyView{}, err
	}
	if err := api.ValidateJobPolicy(req); err != nil {
		return api.JobPolicyView{}, err
	}
	res, err := n.propose(ctx, func(c *ledger.Command) { c.JobPolicy = &ledger.JobPolicyVote{Policy: req.Policy} })
	if err != nil {
		return api.JobPolicyView{}, apiError(err)
	}
	var v *api.JobPolicyView
	n.cons.View(func(l *ledger.Ledger) { v = apiconv.JobPolicy(l.JobPolicy(), l.JobPolicyVotes()) })
	v.Note = strings.Join(res.Notes, "; ")
	return *v, nil
}

var _ api.JobPolicyVoter = (*Node)(nil)
