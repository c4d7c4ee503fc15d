package api

import (
	"context"
	"net/http"
)

// The federation's job policy (issue 21; docs/POLICY.md §8): how its queue
// of parallel jobs is served. GET /v1/status shows it (Status.JobPolicy);
// POST /v1/job-policy casts this organisation's vote for one. It changes
// when more than half of the organisations that are not removed vote for
// the same policy; any member organisation may vote, and the ledger
// refuses a removed organisation's vote (403 forbidden).

// JobPolicyView is the job policy in force and the votes pending.
type JobPolicyView struct {
	// Policy is the policy in force: ehosep (the default), fcfs, easy or
	// conservative.
	Policy string `json:"policy"`
	// Index and AtMs are the log entry and time of the decision, Voters
	// the organisations whose votes made it (all empty for the default).
	Index  uint64   `json:"index,omitempty"`
	AtMs   int64    `json:"at_ms,omitempty"`
	Voters []string `json:"voters,omitempty"`
	// Votes are the pending votes, in log order.
	Votes []JobPolicyVoteView `json:"votes,omitempty"`
	// Note is the ledger's note on a vote just cast (POST only).
	Note string `json:"note,omitempty"`
}

// JobPolicyVoteView is one organisation's pending vote.
type JobPolicyVoteView struct {
	Org    string `json:"org"`
	Policy string `json:"policy"`
	Index  uint64 `json:"index"`
}

// JobPolicyRequest is POST /v1/job-policy: this organisation's vote.
type JobPolicyRequest struct {
	Policy string `json:"policy"`
}

// JobPolicyVoter is an optional interface of a Backend whose organisation
// votes for the federation's job policy; the server answers 404 for one
// without it.
type JobPolicyVoter interface {
	VoteJobPolicy(ctx context.Context, req JobPolicyRequest) (JobPolicyView, error)
}

// ValidateJobPolicy checks a vote's shape; which names are policies is
// the ledger's to say (400 bad_request naming them).
func ValidateJobPolicy(req JobPolicyRequest) error {
	if req.Policy == "" || len(req.Policy) > 64 {
		return Errorf(CodeBadRequest, "policy %q: want a job policy's name (ehosep, fcfs, easy, conservative, ehosep-easy)", req.Policy)
	}
	return nil
}

func (s *Server) voteJobPolicy(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	v, ok := s.b.(JobPolicyVoter)
	if !ok {
		return Errorf(CodeNotFound, "this peer does not vote on the job policy")
	}
	var req JobPolicyRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if err := ValidateJobPolicy(req); err != nil {
		return err
	}
	view, err := v.VoteJobPolicy(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

// VoteJobPolicy calls POST /v1/job-policy.
func (c *Client) VoteJobPolicy(ctx context.Context, req JobPolicyRequest) (JobPolicyView, error) {
	var v JobPolicyView
	_, err := c.do(ctx, http.MethodPost, "/v1/job-policy", nil, req, &v, true)
	return v, err
}
