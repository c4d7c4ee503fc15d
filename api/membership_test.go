package api_test

import (
	"context"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// inviting adds the membership routes to the test double: it refuses to
// invite uni-a (bound) and records what it was asked.
type inviting struct {
	api.Backend
	asked []api.InviteRequest
}

func (b *inviting) Invite(_ context.Context, req api.InviteRequest) (api.Invitation, error) {
	if req.Org == "uni-a" {
		return api.Invitation{}, api.ErrInvitationRefused("organisation %q is already bound", req.Org)
	}
	b.asked = append(b.asked, req)
	return api.Invitation{ID: "abc", Org: req.Org, Peer: req.Peer, Token: "cginv1.abc"}, nil
}

func (b *inviting) VoteRemoval(_ context.Context, req api.RemovalRequest) (api.RemovalView, error) {
	return api.RemovalView{Org: req.Org, Note: "vote recorded"}, nil
}

// TestMembershipRoutes: the invitation and removal routes, their client
// methods, their bounds and their error codes; a backend without them
// answers 404.
func TestMembershipRoutes(t *testing.T) {
	seeded, err := apitest.NewSeeded(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &inviting{Backend: seeded}
	srv := serveBackend(t, b, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, nil)
	ctx := context.Background()

	inv, err := c.Invite(ctx, api.InviteRequest{Org: "uni-z", TTLSeconds: 3600})
	if err != nil || inv.Token != "cginv1.abc" || len(b.asked) != 1 {
		t.Fatalf("invite: %+v, %v", inv, err)
	}
	if _, err := c.Invite(ctx, api.InviteRequest{Org: "uni-a"}); api.CodeOf(err) != api.CodeInvitationRefused {
		t.Fatalf("refused invitation: %v", err)
	}
	for _, req := range []api.InviteRequest{{Org: ""}, {Org: "../x"}, {Org: "uni-z", TTLSeconds: -1}, {Org: "uni-z", TTLSeconds: 31 * 24 * 3600}} {
		if _, err := c.Invite(ctx, req); api.CodeOf(err) != api.CodeBadRequest {
			t.Fatalf("invite %+v: %v, want bad_request", req, err)
		}
	}
	if len(b.asked) != 1 {
		t.Fatalf("bad requests reached the backend: %v", b.asked)
	}
	if r := call(t, srv, "POST", "/v1/invitations", `{"org":"uni-z","bogus":1}`); r.status != 400 {
		t.Fatalf("unknown field: %d", r.status)
	}
	v, err := c.VoteRemoval(ctx, api.RemovalRequest{Org: "uni-b"})
	if err != nil || v.Org != "uni-b" || v.Removed {
		t.Fatalf("vote: %+v, %v", v, err)
	}
	plain := serveBackend(t, seeded, api.ServerOptions{})
	if _, err := api.NewClient(plain.URL, token, nil).Invite(ctx, api.InviteRequest{Org: "uni-z"}); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("backend without membership: %v", err)
	}
}

// TestMembershipRoutesNeedTheToken: issuing an invitation or voting to
// remove a member acts for this peer's organisation; a caller without the
// API token (or with a wrong one) is refused and the backend never asked.
func TestMembershipRoutesNeedTheToken(t *testing.T) {
	seeded, err := apitest.NewSeeded(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &inviting{Backend: seeded}
	srv := serveBackend(t, b, api.ServerOptions{})
	for _, auth := range []string{"", "Bearer wrong-token"} {
		for _, route := range []struct{ path, body string }{
			{"/v1/invitations", `{"org":"uni-z"}`},
			{"/v1/removals", `{"org":"uni-b"}`},
		} {
			if r := call(t, srv, "POST", route.path, route.body, auth); r.status != 401 {
				t.Errorf("POST %s with authorization %q: status %d, want 401", route.path, auth, r.status)
			}
		}
	}
	if len(b.asked) != 0 {
		t.Fatalf("an unauthenticated invitation reached the backend: %v", b.asked)
	}
}
