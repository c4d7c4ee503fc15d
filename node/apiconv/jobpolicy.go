package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// JobPolicy is the federation's job policy and its pending votes.
func JobPolicy(s ledger.JobPolicySetting, votes []ledger.JobPolicyVoteRecord) *api.JobPolicyView {
	v := &api.JobPolicyView{Policy: s.Policy, Index: s.Index, AtMs: s.AtMs, Voters: s.Voters}
	for _, r := range votes {
		v.Votes = append(v.Votes, api.JobPolicyVoteView{Org: r.Voter, Policy: r.Policy, Index: r.Index})
	}
	return v
}
