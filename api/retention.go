package api

import (
	"context"
	"net/http"
)

// The federation's retention rule (issue 17; docs/HISTORY.md): when a
// finished task leaves the replicated state. GET /v1/retention shows the
// rule in force and the votes pending; POST /v1/retention casts this
// organisation's vote for a rule. The rule changes when more than half of
// the organisations that are not removed vote for the same one; any member
// organisation may vote (the holder of its peer's API token), and the
// ledger refuses a removed organisation's vote (403 forbidden).

// RetentionView is the retention rule in force and the votes pending.
type RetentionView struct {
	// AfterMs and Keep are the rule in force (both 0: none, every task is
	// kept).
	AfterMs int64 `json:"after_ms"`
	Keep    int64 `json:"keep"`
	// Votes are the pending votes, in log order.
	Votes []RetentionVoteView `json:"votes,omitempty"`
	// Note is the ledger's note on a vote just cast (POST only).
	Note string `json:"note,omitempty"`
}

// RetentionVoteView is one organisation's pending vote.
type RetentionVoteView struct {
	Org     string `json:"org"`
	AfterMs int64  `json:"after_ms"`
	Keep    int64  `json:"keep"`
	Index   uint64 `json:"index"`
}

// RetentionRequest is POST /v1/retention: this organisation's vote (both
// 0: no rule).
type RetentionRequest struct {
	AfterMs int64 `json:"after_ms"`
	Keep    int64 `json:"keep"`
}

// RetentionVoter is an optional interface of a Backend whose organisation
// votes for the federation's retention rule; the server answers 404 for
// one without it.
type RetentionVoter interface {
	Retention(ctx context.Context) (RetentionView, error)
	VoteRetention(ctx context.Context, req RetentionRequest) (RetentionView, error)
}

// ValidateRetention checks a vote's figures (400 bad_request).
func ValidateRetention(req RetentionRequest) error {
	const maxAfterMs, maxKeep = 100 * 365 * 24 * 3600 * 1000, 10_000_000
	if req.AfterMs < 0 || req.AfterMs > maxAfterMs || req.Keep < 0 || req.Keep > maxKeep {
		return Errorf(CodeBadRequest, "retention after_ms %d, keep %d: want 0 to %d and 0 to %d (both 0: no rule)", req.AfterMs, req.Keep, int64(maxAfterMs), maxKeep)
	}
	return nil
}

func (s *Server) retentionVoter() (RetentionVoter, error) {
	v, ok := s.b.(RetentionVoter)
	if !ok {
		return nil, Errorf(CodeNotFound, "this peer does not vote on the retention rule")
	}
	return v, nil
}

func (s *Server) retention(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	v, err := s.retentionVoter()
	if err != nil {
		return err
	}
	view, err := v.Retention(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

func (s *Server) voteRetention(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	v, err := s.retentionVoter()
	if err != nil {
		return err
	}
	var req RetentionRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if err := ValidateRetention(req); err != nil {
		return err
	}
	view, err := v.VoteRetention(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

// Retention calls GET /v1/retention.
func (c *Client) Retention(ctx context.Context) (RetentionView, error) {
	var v RetentionView
	_, err := c.do(ctx, http.MethodGet, "/v1/retention", nil, nil, &v, true)
	return v, err
}

// VoteRetention calls POST /v1/retention.
func (c *Client) VoteRetention(ctx context.Context, req RetentionRequest) (RetentionView, error) {
	var v RetentionView
	_, err := c.do(ctx, http.MethodPost, "/v1/retention", nil, req, &v, true)
	return v, err
}
