package api_test

import (
	"context"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// listing adds the members routes to the test double: it refuses to
// remove "self" and records what it was asked to remove.
type listing struct {
	api.Backend
	removed []string
}

const selfID = "12D3KooWSe1f"

func (b *listing) Members(context.Context) (api.MembersView, error) {
	return api.MembersView{Leader: "12D3KooWLead", Observer: "12D3KooWLead", Voters: 1, VotersReachable: 1,
		Members: []api.MemberView{{ID: "12D3KooWLead", Org: "uni-a", Suffrage: api.SuffrageVoter, Leader: true, Reachable: true}}}, nil
}

func (b *listing) RemoveMember(_ context.Context, id string) (api.MemberRemoval, error) {
	if id == selfID {
		return api.MemberRemoval{}, api.Errorf(api.CodeConflict, "this peer: use peer leave")
	}
	b.removed = append(b.removed, id)
	return api.MemberRemoval{ID: id, Note: "1 of 2 votes"}, nil
}

// TestMembersRoutes: the members routes, their client methods, their
// bounds and error codes; a caller without the token is refused before
// the backend is asked; a backend without them answers 404.
func TestMembersRoutes(t *testing.T) {
	seeded, err := apitest.NewSeeded(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &listing{Backend: seeded}
	srv := serveBackend(t, b, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, nil)
	ctx := context.Background()

	v, err := c.Members(ctx)
	if err != nil || len(v.Members) != 1 || v.Members[0].Org != "uni-a" || v.Voters != 1 {
		t.Fatalf("members: %+v, %v", v, err)
	}
	r, err := c.RemoveMember(ctx, "12D3KooWOther")
	if err == nil {
		t.Fatalf("an ID with O (not base58) was accepted: %+v", r)
	}
	if api.CodeOf(err) != api.CodeBadRequest {
		t.Fatalf("bad ID: %v", err)
	}
	r, err = c.RemoveMember(ctx, "12D3KooWAnother")
	if err != nil || r.Removed || r.ID != "12D3KooWAnother" {
		t.Fatalf("remove: %+v, %v", r, err)
	}
	if _, err := c.RemoveMember(ctx, selfID); api.CodeOf(err) != api.CodeConflict {
		t.Fatalf("removing this peer: %v, want conflict", err)
	}
	for _, bad := range []string{"/v1/members/has%20space", "/v1/members/x!"} {
		if r := call(t, srv, "DELETE", bad, ""); r.status != 400 {
			t.Fatalf("DELETE %s: %d, want 400", bad, r.status)
		}
	}
	for _, auth := range []string{"", "Bearer wrong-token"} {
		if r := call(t, srv, "DELETE", "/v1/members/12D3KooWThird", "", auth); r.status != 401 {
			t.Fatalf("unauthenticated DELETE: %d", r.status)
		}
		if r := call(t, srv, "GET", "/v1/members", "", auth); r.status != 401 {
			t.Fatalf("unauthenticated GET: %d", r.status)
		}
	}
	if len(b.removed) != 1 {
		t.Fatalf("the backend was asked to remove %v, want only the one good request", b.removed)
	}
	plain := serveBackend(t, seeded, api.ServerOptions{})
	if _, err := api.NewClient(plain.URL, token, nil).Members(ctx); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("backend without members: %v", err)
	}
}
