package api_test

import (
	"context"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// voting adds the job policy route to the test double and records what it
// was asked.
type voting struct {
	api.Backend
	asked []api.JobPolicyRequest
}

func (b *voting) VoteJobPolicy(_ context.Context, req api.JobPolicyRequest) (api.JobPolicyView, error) {
	b.asked = append(b.asked, req)
	return api.JobPolicyView{Policy: "ehosep", Votes: []api.JobPolicyVoteView{{Org: "uni-a", Policy: req.Policy, Index: 9}}, Note: "vote recorded"}, nil
}

// TestJobPolicyRoute: POST /v1/job-policy reaches the backend with the
// vote and answers its view; a malformed vote, an unknown field and a
// caller without the API token are refused before the backend is asked;
// a backend without the route answers 404.
func TestJobPolicyRoute(t *testing.T) {
	seeded, err := apitest.NewSeeded(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &voting{Backend: seeded}
	srv := serveBackend(t, b, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, nil)
	ctx := context.Background()

	v, err := c.VoteJobPolicy(ctx, api.JobPolicyRequest{Policy: "easy"})
	if err != nil || len(v.Votes) != 1 || v.Votes[0].Policy != "easy" || v.Note == "" || len(b.asked) != 1 {
		t.Fatalf("vote: %+v, %v (asked %v)", v, err, b.asked)
	}
	if _, err := c.VoteJobPolicy(ctx, api.JobPolicyRequest{}); api.CodeOf(err) != api.CodeBadRequest {
		t.Fatalf("empty policy: %v, want bad_request", err)
	}
	if r := call(t, srv, "POST", "/v1/job-policy", `{"policy":"easy","bogus":1}`); r.status != 400 {
		t.Fatalf("unknown field: %d", r.status)
	}
	for _, auth := range []string{"", "Bearer wrong-token"} {
		if r := call(t, srv, "POST", "/v1/job-policy", `{"policy":"easy"}`, auth); r.status != 401 {
			t.Errorf("authorization %q: status %d, want 401", auth, r.status)
		}
	}
	if len(b.asked) != 1 {
		t.Fatalf("refused requests reached the backend: %v", b.asked)
	}
	plain := serveBackend(t, seeded, api.ServerOptions{})
	if _, err := api.NewClient(plain.URL, token, nil).VoteJobPolicy(ctx, api.JobPolicyRequest{Policy: "easy"}); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("backend without the route: %v", err)
	}
}
