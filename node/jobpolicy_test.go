package node

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// TestJobPolicyVoteOnRealPeers: on a federation of two real peers, one
// organisation's vote for a job policy is pending (one of two is no
// majority) and every peer's status shows it; a vote naming no policy is
// refused and changes nothing; the second organisation's vote puts the
// policy in force on both peers.
func TestJobPolicyVoteOnRealPeers(t *testing.T) {
	peers := federation(t, "sim", []string{"jp-a", "jp-b"}, map[string]string{"jp-a": simMachine("a1", 10, 100), "jp-b": simMachine("b1", 10, 100)}, nil)
	a, b := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	policyOf := func(tn *tnode) *api.JobPolicyView {
		st, err := tn.n.Status(ctx)
		if err != nil || st.JobPolicy == nil {
			t.Fatalf("status of %s: %+v, %v", tn.org, st.JobPolicy, err)
		}
		return st.JobPolicy
	}
	if p := policyOf(b); p.Policy != "ehosep" || p.Index != 0 {
		t.Fatalf("a new federation's job policy: %+v", p)
	}
	v, err := a.n.VoteJobPolicy(ctx, api.JobPolicyRequest{Policy: "easy"})
	if err != nil || v.Policy != "ehosep" || len(v.Votes) != 1 || v.Note == "" {
		t.Fatalf("first vote: %+v, %v", v, err)
	}
	waitFor(t, 10*time.Second, "jp-b sees the pending vote", func() bool {
		p := policyOf(b)
		return len(p.Votes) == 1 && p.Votes[0].Org == "jp-a" && p.Votes[0].Policy == "easy"
	})
	if _, err := b.n.VoteJobPolicy(ctx, api.JobPolicyRequest{Policy: "sjf"}); api.CodeOf(err) != api.CodeBadRequest {
		t.Fatalf("a vote for no policy: %v, want bad_request", err)
	}
	v, err = b.n.VoteJobPolicy(ctx, api.JobPolicyRequest{Policy: "easy"})
	if err != nil || v.Policy != "easy" || len(v.Voters) != 2 || len(v.Votes) != 0 {
		t.Fatalf("second vote: %+v, %v", v, err)
	}
	waitFor(t, 10*time.Second, "jp-a sees easy in force", func() bool { return policyOf(a).Policy == "easy" })
}
