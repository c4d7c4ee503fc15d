package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
	"github.com/coopgrid/coopgrid/ledger"
)

// withMembers is the seeded backend with a membership of its own, so that
// GET /v1/members has something to page.
type withMembers struct {
	*apitest.Backend
	view api.MembersView
}

func (b withMembers) Members(context.Context) (api.MembersView, error) {
	v := b.view
	v.Members = slices.Clone(v.Members)
	return v, nil
}

func (withMembers) RemoveMember(context.Context, string) (api.MemberRemoval, error) {
	return api.MemberRemoval{}, api.Errorf(api.CodeConflict, "not in this test")
}

func membership(n int) api.MembersView {
	v := api.MembersView{Leader: "12D3KooWpeer0", Observer: "12D3KooWpeer0", Voters: n, VotersReachable: n}
	for i := range n {
		v.Members = append(v.Members, api.MemberView{ID: fmt.Sprintf("12D3KooWpeer%d", i), Suffrage: api.SuffrageVoter, Leader: i == 0, Reachable: true})
	}
	return v
}

// TestListPages: GET /v1/orgs, /v1/machines, /v1/members and /v1/tasks
// page with ?limit=&after= (the cursor is the last item's key): following
// the pages two at a time yields exactly the whole list, in its order, no
// page longer than its limit; a members page keeps the whole membership's
// figures.
func TestListPages(t *testing.T) {
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
	if err != nil {
		t.Fatal(err)
	}
	for _, org := range []string{"gamma", "delta"} {
		if err := b.Register(org, "peer"+org, 1_000_000, ledger.MachineSpec{Name: "x1", MFLOPS: 1000, BusyMilliW: 1000}, ledger.MachineSpec{Name: "x2", MFLOPS: 1000, BusyMilliW: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	srv := serveBackend(t, withMembers{b, membership(5)}, api.ServerOptions{})

	// keys decodes one answer of a route into its items' cursors.
	type route struct {
		path string
		keys func(t *testing.T, r response) []string
	}
	list := func(field func(json.RawMessage) ([]string, error)) func(t *testing.T, r response) []string {
		return func(t *testing.T, r response) []string {
			t.Helper()
			ks, err := field(r.body)
			if err != nil {
				t.Fatalf("decode %s: %v", r.body, err)
			}
			return ks
		}
	}
	byKey := func(key string) func(json.RawMessage) ([]string, error) {
		return func(b json.RawMessage) ([]string, error) {
			var items []map[string]any
			if err := json.Unmarshal(b, &items); err != nil {
				return nil, err
			}
			var out []string
			for _, it := range items {
				out = append(out, fmt.Sprint(it[key]))
			}
			return out, nil
		}
	}
	members := func(b json.RawMessage) ([]string, error) {
		var v api.MembersView
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, err
		}
		if v.Voters != 5 || v.VotersReachable != 5 || v.Leader != "12D3KooWpeer0" {
			return nil, fmt.Errorf("a page lost the membership's figures: %+v", v)
		}
		var out []string
		for _, m := range v.Members {
			out = append(out, m.ID)
		}
		return out, nil
	}
	for _, c := range []route{
		{"/v1/orgs", list(byKey("name"))},
		{"/v1/machines", list(byKey("id"))},
		{"/v1/members", list(members)},
		{"/v1/tasks", list(byKey("seq"))},
	} {
		t.Run(c.path, func(t *testing.T) {
			all := call(t, srv, http.MethodGet, c.path, "")
			if all.status != http.StatusOK {
				t.Fatalf("%d %s", all.status, all.body)
			}
			want := c.keys(t, all)
			if len(want) < 4 {
				t.Fatalf("only %d items: the test pages nothing", len(want))
			}
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				if pages > len(want) {
					t.Fatalf("more pages than items: %v", got)
				}
				path := c.path + "?limit=2"
				if after != "" {
					path += "&after=" + after
				}
				r := call(t, srv, http.MethodGet, path, "")
				if r.status != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, r.status, r.body)
				}
				ks := c.keys(t, r)
				if len(ks) > 2 {
					t.Fatalf("GET %s: %d items, more than the limit", path, len(ks))
				}
				got = append(got, ks...)
				if len(ks) < 2 {
					break
				}
				after = ks[len(ks)-1]
			}
			if !slices.Equal(got, want) {
				t.Fatalf("pages give %v, want %v", got, want)
			}
		})
	}
}

// TestListPagesBadInput: a bad limit or cursor is a 400 bad_request that
// says what is wrong; the list is not answered.
func TestListPagesBadInput(t *testing.T) {
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
	if err != nil {
		t.Fatal(err)
	}
	srv := serveBackend(t, withMembers{b, membership(3)}, api.ServerOptions{})
	for _, c := range []struct{ path, want string }{
		{"/v1/orgs?limit=-1", "limit -1"},
		{"/v1/machines?limit=10001", "limit 10001"},
		{"/v1/members?limit=two", `limit "two"`},
		{"/v1/orgs?after=nosuch", `after "nosuch": no such item`},
		{"/v1/members?after=12D3KooWgone", `after "12D3KooWgone": no such item`},
		{"/v1/machines?after=" + strings.Repeat("x", 300), "cursor of 300 bytes"},
		{"/v1/orgs?page=2", `unknown query parameter "page"`},
	} {
		r := call(t, srv, http.MethodGet, c.path, "")
		e := apiError(t, r)
		if r.status != http.StatusBadRequest || e.Code != api.CodeBadRequest || !strings.Contains(e.Message, c.want) {
			t.Errorf("GET %s: %d %s %q, want 400 bad_request saying %q", c.path, r.status, e.Code, e.Message, c.want)
		}
	}
	// A machine cursor that left the list still pages: the list is sorted.
	r := call(t, srv, http.MethodGet, "/v1/machines?after=alpha/a1zzz", "")
	if ms := decode[[]api.MachineView](t, r); r.status != http.StatusOK || len(ms) == 0 || ms[0].ID != "alpha/a2" {
		t.Errorf("machines after a vanished ID: %d %s", r.status, r.body)
	}
}

// countingServer counts the list requests and their limits.
type countingServer struct {
	h      http.Handler
	mu     sync.Mutex
	limits map[string][]string
}

func (s *countingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.limits[r.URL.Path] = append(s.limits[r.URL.Path], r.URL.Query().Get("limit"))
	s.mu.Unlock()
	s.h.ServeHTTP(w, r)
}

// TestClientFollowsPages: the Client's Machines, Orgs, Members and Tasks
// (no limit) return every item, in order, from pages of ClientPageSize,
// so no single answer is the whole list; Tasks with a limit asks for that
// one page.
func TestClientFollowsPages(t *testing.T) {
	const machines, tasks = 2*api.ClientPageSize + 500, api.ClientPageSize + 1
	b := apitest.New("big", "peerbig", nil)
	specs := make([]ledger.MachineSpec, machines)
	for i := range specs {
		specs[i] = ledger.MachineSpec{Name: fmt.Sprintf("m%05d", i), MFLOPS: 1000, BusyMilliW: 1000}
	}
	if err := b.Register("big", "peerbig", 1_000_000_000, specs...); err != nil {
		t.Fatal(err)
	}
	req := api.SubmitRequest{}
	for range tasks {
		req.Tasks = append(req.Tasks, api.SubmitTask{Argv: []string{"/bin/true"}, SizeMFlop: 1, WallLimitMs: 60_000})
	}
	if _, err := b.Submit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	cs := &countingServer{h: api.NewServer(withMembers{b, membership(3)}, api.ServerOptions{Token: token}), limits: map[string][]string{}}
	srv := httptest.NewServer(cs)
	defer srv.Close()
	c := api.NewClient(srv.URL, token, srv.Client())
	ctx := context.Background()

	ms, err := c.Machines(ctx)
	if err != nil || len(ms) != machines || ms[0].ID != "big/m00000" || ms[machines-1].ID != fmt.Sprintf("big/m%05d", machines-1) ||
		!slices.IsSortedFunc(ms, func(a, b api.MachineView) int { return strings.Compare(a.ID, b.ID) }) {
		t.Fatalf("Machines: %d machines, %v", len(ms), err)
	}
	ts, err := c.Tasks(ctx, api.TaskQuery{})
	if err != nil || len(ts) != tasks || ts[0].Seq != 1 || ts[tasks-1].Seq != tasks {
		t.Fatalf("Tasks: %d tasks, %v", len(ts), err)
	}
	if os, err := c.Orgs(ctx); err != nil || len(os) != 1 || os[0].Name != "big" {
		t.Fatalf("Orgs: %v %v", os, err)
	}
	if v, err := c.Members(ctx); err != nil || len(v.Members) != 3 || v.Voters != 3 {
		t.Fatalf("Members: %+v %v", v, err)
	}
	if page, err := c.Tasks(ctx, api.TaskQuery{Limit: 10, After: 5}); err != nil || len(page) != 10 || page[0].Seq != 6 {
		t.Fatalf("one page of tasks: %d, %v", len(page), err)
	}
	size := fmt.Sprint(api.ClientPageSize)
	for path, want := range map[string][]string{
		"/v1/machines": {size, size, size},
		"/v1/tasks":    {size, size, "10"},
		"/v1/orgs":     {size},
		"/v1/members":  {size},
	} {
		if got := cs.limits[path]; !slices.Equal(got, want) {
			t.Errorf("%s: requests with limits %v, want %v", path, got, want)
		}
	}
}
