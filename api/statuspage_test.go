package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
	"github.com/coopgrid/coopgrid/ledger"
)

// withNewcomer is a backend whose status lists one member that has not
// registered its organisation yet.
type withNewcomer struct{ *apitest.Backend }

const newcomer = "12D3KooWnewcomer"

func (b withNewcomer) Status(ctx context.Context) (api.Status, error) {
	st, err := b.Backend.Status(ctx)
	st.Peers = append(st.Peers, api.PeerView{ID: newcomer, Addrs: []string{}})
	return st, err
}

// manyOrgs is a seeded backend with n more organisations of one machine.
func manyOrgs(t *testing.T, n int) *apitest.Backend {
	t.Helper()
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		org := fmt.Sprintf("o%04d", i)
		if err := b.Register(org, "peer"+org, 1_000_000, ledger.MachineSpec{Name: "x", MFLOPS: 1000, BusyMilliW: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestStatusAndTimelinePages: GET /v1/status and /v1/timeline page by
// organisation with ?limit=&after= (cursor: the last organisation's
// name), as /v1/orgs does: the pages two at a time give every
// organisation once, in the whole answer's order; each status page holds
// the peers of its organisations (a member with no organisation yet on the
// first page only) and the whole federation's leader and log; each
// timeline page with the first page's end_ms has the same sample times.
func TestStatusAndTimelinePages(t *testing.T) {
	srv := serveBackend(t, withNewcomer{manyOrgs(t, 3)}, api.ServerOptions{})
	whole := decode[api.Status](t, call(t, srv, http.MethodGet, "/v1/status", ""))
	wholeTL := decode[api.TimelineView](t, call(t, srv, http.MethodGet, "/v1/timeline", ""))
	if len(whole.Orgs) < 4 || len(wholeTL.Orgs) != len(whole.Orgs) {
		t.Fatalf("%d organisations in the status, %d in the timeline: the test pages nothing", len(whole.Orgs), len(wholeTL.Orgs))
	}
	var orgs, peers, tlOrgs []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(whole.Orgs) {
			t.Fatalf("more pages than organisations: %v", orgs)
		}
		q := "?limit=2"
		if after != "" {
			q += "&after=" + after
		}
		st := decode[api.Status](t, call(t, srv, http.MethodGet, "/v1/status"+q, ""))
		tl := decode[api.TimelineView](t, call(t, srv, http.MethodGet, fmt.Sprintf("/v1/timeline%s&end_ms=%d", q, wholeTL.TimesMs[len(wholeTL.TimesMs)-1]), ""))
		if len(st.Orgs) > 2 || len(tl.Orgs) > 2 {
			t.Fatalf("page %s: %d and %d organisations, more than the limit", q, len(st.Orgs), len(tl.Orgs))
		}
		if st.Leader != whole.Leader || st.Raft.AppliedIndex != whole.Raft.AppliedIndex || st.Build == nil {
			t.Fatalf("page %s lost the federation's figures: %+v", q, st)
		}
		if !slices.Equal(tl.TimesMs, wholeTL.TimesMs) {
			t.Fatalf("page %s: sample times %v, want %v", q, tl.TimesMs, wholeTL.TimesMs)
		}
		names := map[string]bool{}
		for _, o := range st.Orgs {
			orgs, names[o.Name] = append(orgs, o.Name), true
		}
		for _, p := range st.Peers {
			if !names[p.Org] && (p.ID != newcomer || after != "") {
				t.Fatalf("page %s lists peer %s of organisation %q, not on it", q, p.ID, p.Org)
			}
			peers = append(peers, p.ID)
		}
		for _, o := range tl.Orgs {
			tlOrgs = append(tlOrgs, o.Name)
		}
		if len(st.Orgs) < 2 {
			break
		}
		after = st.Orgs[len(st.Orgs)-1].Name
	}
	var wantOrgs, wantPeers []string
	for _, o := range whole.Orgs {
		wantOrgs = append(wantOrgs, o.Name)
	}
	for _, p := range whole.Peers {
		wantPeers = append(wantPeers, p.ID)
	}
	slices.Sort(peers)
	slices.Sort(wantPeers)
	if !slices.Equal(orgs, wantOrgs) || !slices.Equal(tlOrgs, wantOrgs) || !slices.Equal(peers, wantPeers) {
		t.Fatalf("pages give organisations %v, timeline %v, peers %v; want %v and %v", orgs, tlOrgs, peers, wantOrgs, wantPeers)
	}
}

// TestStatusAndTimelinePagesBadInput: a bad limit, cursor or end_ms is a
// 400 bad_request saying what is wrong, as on the other list routes.
func TestStatusAndTimelinePagesBadInput(t *testing.T) {
	srv := serveBackend(t, manyOrgs(t, 1), api.ServerOptions{})
	for _, c := range []struct{ path, want string }{
		{"/v1/status?limit=-1", "limit -1"},
		{"/v1/status?limit=10001", "limit 10001"},
		{"/v1/status?limit=two", `limit "two"`},
		{"/v1/status?after=nosuch", `after "nosuch": no such item`},
		{"/v1/status?after=" + strings.Repeat("x", 300), "cursor of 300 bytes"},
		{"/v1/status?page=2", `unknown query parameter "page"`},
		{"/v1/timeline?limit=0.5", `limit "0.5"`},
		{"/v1/timeline?after=nosuch", `after "nosuch": no such item`},
		{"/v1/timeline?end_ms=5", `end_ms "5"`},
		{"/v1/timeline?end_ms=soon", `end_ms "soon"`},
		{"/v1/timeline?page=2", `unknown query parameter "page"`},
	} {
		r := call(t, srv, http.MethodGet, c.path, "")
		e := apiError(t, r)
		if r.status != http.StatusBadRequest || e.Code != api.CodeBadRequest || !strings.Contains(e.Message, c.want) {
			t.Errorf("GET %s: %d %s %q, want 400 bad_request saying %q", c.path, r.status, e.Code, e.Message, c.want)
		}
	}
}

// TestClientFollowsStatusAndTimelinePages: the Client's Status and
// Timeline return every organisation (and peer) from pages of
// ClientPageSize, so no single answer is the whole federation; Timeline
// with a limit asks for that one page.
func TestClientFollowsStatusAndTimelinePages(t *testing.T) {
	const n = api.ClientPageSize + 2 // with the seed's two: pages of 1,000 and 4
	cs := &countingServer{h: api.NewServer(manyOrgs(t, n), api.ServerOptions{Token: token}), limits: map[string][]string{}}
	srv := httptest.NewServer(cs)
	defer srv.Close()
	c := api.NewClient(srv.URL, token, srv.Client())
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil || len(st.Orgs) != n+2 || len(st.Peers) != n+2 || st.Orgs[n+1].Name != fmt.Sprintf("o%04d", n-1) {
		t.Fatalf("Status: %d organisations, %d peers, %v", len(st.Orgs), len(st.Peers), err)
	}
	tl, err := c.Timeline(ctx, api.TimelineQuery{})
	if err != nil || len(tl.Orgs) != n+2 || len(tl.TimesMs) != api.DefaultTimelinePoints {
		t.Fatalf("Timeline: %d organisations, %d times, %v", len(tl.Orgs), len(tl.TimesMs), err)
	}
	if page, err := c.Timeline(ctx, api.TimelineQuery{Page: api.PageQuery{Limit: 3, After: "o0000"}}); err != nil || len(page.Orgs) != 3 || page.Orgs[0].Name != "o0001" {
		t.Fatalf("one page of the timeline: %+v, %v", page.Orgs, err)
	}
	size := fmt.Sprint(api.ClientPageSize)
	for path, want := range map[string][]string{
		"/v1/status":   {size, size},
		"/v1/timeline": {size, size, "3"},
	} {
		if got := cs.limits[path]; !slices.Equal(got, want) {
			t.Errorf("%s: requests with limits %v, want %v", path, got, want)
		}
	}
}

// TestClientReadsAnUnpagedPeer: a peer built before status and timeline had
// pages advertises no API version (api.APIVersionHeader) and refuses
// ?limit= (bad_request); the Client then asks for the whole answer once (a
// rolling upgrade, where the new CLI talks to an old peer), whatever the
// refusal's wording. A peer that advertises paged routes is never asked
// unpaged, even when its refusal reads like an old peer's; nor is an old
// peer that fails otherwise.
func TestClientReadsAnUnpagedPeer(t *testing.T) {
	const oldWording = `unknown query parameter "limit": this route takes none`
	for _, tc := range []struct {
		name    string
		version string // the advertised API version, "" none
		status  int    // the answer to a paged request
		code    string
		refuse  string
		ok      bool
	}{
		{"old peer", "", http.StatusBadRequest, api.CodeBadRequest, oldWording, true},
		{"old peer, other wording", "", http.StatusBadRequest, api.CodeBadRequest, `limit: not a parameter of this route`, true},
		{"paged peer's refusal", "2", http.StatusBadRequest, api.CodeBadRequest, oldWording, false},
		{"paged peer's other refusal", "2", http.StatusBadRequest, api.CodeBadRequest, `limit: must be at most 1000`, false},
		{"old peer unavailable", "", http.StatusServiceUnavailable, api.CodeUnavailable, `no leader`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var unpaged int
			old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tc.version != "" {
					w.Header().Set(api.APIVersionHeader, tc.version)
				}
				if r.URL.Query().Has("limit") {
					w.WriteHeader(tc.status)
					fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, tc.code, tc.refuse)
					return
				}
				unpaged++
				switch r.URL.Path {
				case "/v1/status":
					fmt.Fprint(w, `{"self":"p1","leader":"p1","orgs":[{"name":"a"},{"name":"b"}],"peers":[{"id":"p1","org":"a"}]}`)
				default:
					fmt.Fprint(w, `{"times_ms":[1,2],"orgs":[{"name":"a"}]}`)
				}
			}))
			defer old.Close()
			c := api.NewClient(old.URL, "token", old.Client())
			st, err := c.Status(context.Background())
			tl, terr := c.Timeline(context.Background(), api.TimelineQuery{})
			if !tc.ok {
				if err == nil || terr == nil || unpaged != 0 {
					t.Fatalf("a refusal was retried unpaged: status %v, timeline %v, %d unpaged calls", err, terr, unpaged)
				}
				return
			}
			if err != nil || terr != nil {
				t.Fatalf("status %v, timeline %v", err, terr)
			}
			if len(st.Orgs) != 2 || st.Leader != "p1" || len(tl.Orgs) != 1 || len(tl.TimesMs) != 2 || unpaged != 2 {
				t.Fatalf("status %+v, timeline %+v, %d unpaged calls", st, tl, unpaged)
			}
		})
	}
}

// TestEveryAnswerAdvertisesTheAPIVersion: the server's answers — a page,
// an error, a refused token, an unknown route, the dashboard's files —
// all carry api.APIVersionHeader with api.APIVersion, which is what a
// client reads to choose paging.
func TestEveryAnswerAdvertisesTheAPIVersion(t *testing.T) {
	srv := serveBackend(t, manyOrgs(t, 1), api.ServerOptions{})
	want := fmt.Sprint(api.APIVersion)
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/v1/status?limit=1", "", http.StatusOK},
		{"/v1/timeline?limit=1", "", http.StatusOK},
		{"/v1/status?limit=-1", "", http.StatusBadRequest},
		{"/v1/status", "Bearer wrong", http.StatusUnauthorized},
		{"/v1/nothing", "", http.StatusNotFound},
		{"/healthz", "-", http.StatusOK},
	} {
		var auth []string
		if tc.auth != "" {
			auth = []string{tc.auth}
		}
		r := call(t, srv, http.MethodGet, tc.path, "", auth...)
		if r.status != tc.status || r.header.Get(api.APIVersionHeader) != want {
			t.Errorf("GET %s: %d with %s %q, want %d with %q", tc.path, r.status, api.APIVersionHeader, r.header.Get(api.APIVersionHeader), tc.status, want)
		}
	}
	if api.APIVersion < 2 {
		t.Fatalf("APIVersion %d: the paged status needs 2", api.APIVersion)
	}
}
