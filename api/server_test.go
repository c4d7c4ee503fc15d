package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

const token = "test-token-0123456789abcdef"

// serve starts the API over a seeded ledger-backed backend.
func serve(t *testing.T, opts api.ServerOptions) (*apitest.Backend, *httptest.Server) {
	t.Helper()
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
	if err != nil {
		t.Fatal(err)
	}
	return b, serveBackend(t, b, opts)
}

func serveBackend(t *testing.T, b api.Backend, opts api.ServerOptions) *httptest.Server {
	t.Helper()
	if opts.Token == "" {
		opts.Token = token
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := httptest.NewServer(api.NewServer(b, opts))
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// call sends one raw request with the test token (unless auth is "-").
func call(t *testing.T, srv *httptest.Server, method, path, body string, auth ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	a := "Bearer " + token
	if len(auth) > 0 {
		a = auth[0]
	}
	if a != "-" {
		req.Header.Set("Authorization", a)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, data}
}

// apiError decodes the JSON error envelope, failing if it is not one.
func apiError(t *testing.T, r response) api.Error {
	t.Helper()
	var eb struct {
		Error *api.Error `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil || eb.Error == nil || eb.Error.Code == "" || eb.Error.Message == "" {
		t.Fatalf("status %d: not a JSON error envelope: %s (%v)", r.status, r.body, err)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q", ct)
	}
	return *eb.Error
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r.body, err)
	}
	return v
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestRoutes checks every route's success path against the seeded state.
func TestRoutes(t *testing.T) {
	b, srv := serve(t, api.ServerOptions{})
	hash, _ := b.HashAndIndex()
	tests := []struct {
		name, method, path, body string
		status                   int
		check                    func(t *testing.T, r response)
	}{
		{"healthz", "GET", "/healthz", "", 200, func(t *testing.T, r response) {
			if m := decode[map[string]string](t, r); m["status"] != "ok" {
				t.Errorf("healthz %v", m)
			}
		}},
		{"status", "GET", "/v1/status", "", 200, func(t *testing.T, r response) {
			// The JSON keys the issue promises for `peer status --json`.
			var raw map[string]any
			_ = json.Unmarshal(r.body, &raw)
			for _, k := range []string{"self", "leader", "peers", "orgs"} {
				if _, ok := raw[k]; !ok {
					t.Errorf("status lacks %q", k)
				}
			}
			peer := raw["peers"].([]any)[0].(map[string]any)
			for _, k := range []string{"id", "org", "voter", "addrs"} {
				if _, ok := peer[k]; !ok {
					t.Errorf("peer lacks %q", k)
				}
			}
			org := raw["orgs"].([]any)[0].(map[string]any)
			for _, k := range []string{"name", "quota_gflops", "power_quota_w", "limit_w", "pi_w", "dp", "queued", "running", "done", "failed", "energy_j"} {
				if _, ok := org[k]; !ok {
					t.Errorf("org lacks %q", k)
				}
			}
			st := decode[api.Status](t, r)
			if st.Self != apitest.PeerAlpha || st.Org != "alpha" || st.Leader != apitest.PeerAlpha || st.Raft.State != "Leader" || st.Raft.AppliedIndex != 8 || st.Raft.StateHash != hash {
				t.Errorf("status %+v", st)
			}
			if len(st.Peers) != 2 || st.Peers[1].ID != apitest.PeerBeta || !st.Peers[1].Voter || st.Peers[1].Org != "beta" {
				t.Errorf("peers %+v", st.Peers)
			}
			if len(st.Orgs) != 2 || st.Orgs[0].PIW != 300 || st.Orgs[1].OwnerEnergyJ != 12.345 {
				t.Errorf("orgs %+v", st.Orgs)
			}
		}},
		{"orgs", "GET", "/v1/orgs", "", 200, func(t *testing.T, r response) {
			os := decode[[]api.OrgView](t, r)
			if len(os) != 2 {
				t.Fatalf("orgs %+v", os)
			}
			a, be := os[0], os[1]
			if a.Name != "alpha" || a.Peer != apitest.PeerAlpha || a.Machines != 2 || a.QuotaGFLOPS != 30 || a.PowerQuotaW != 500 ||
				a.LimitW != 800 || a.PIW != 300 || a.AllocGFLOPS != 20 || a.DP == nil || !near(*a.DP, -1.0/3) ||
				a.Queued != 1 || a.Running != 1 || a.Done != 1 || a.Failed != 0 || a.EnergyJ != 12.345 || a.OwnerEnergyJ != 0 {
				t.Errorf("alpha %+v", a)
			}
			if be.Name != "beta" || be.QuotaGFLOPS != 40 || be.PIW != 200 || be.DP == nil || *be.DP != -0.75 ||
				be.Queued != 0 || be.Running != 1 || be.EnergyJ != 0 || be.OwnerEnergyJ != 12.345 {
				t.Errorf("beta %+v", be)
			}
		}},
		{"machines", "GET", "/v1/machines", "", 200, func(t *testing.T, r response) {
			ms := decode[[]api.MachineView](t, r)
			want := []api.MachineView{
				{ID: "alpha/a1", Org: "alpha", GFLOPS: 10, BusyW: 200, State: "up", Task: "beta-1", LastHeartbeatMs: apitest.SeedStartMs},
				{ID: "alpha/a2", Org: "alpha", GFLOPS: 20, BusyW: 300, IdleW: 50, State: "up", Task: "alpha-2", LastHeartbeatMs: apitest.SeedStartMs},
				{ID: "beta/b1", Org: "beta", GFLOPS: 40, BusyW: 400, State: "up", LastHeartbeatMs: apitest.SeedStartMs + 1000},
			}
			if !reflect.DeepEqual(ms, want) {
				t.Errorf("machines\n got %+v\nwant %+v", ms, want)
			}
		}},
		{"tasks all", "GET", "/v1/tasks", "", 200, func(t *testing.T, r response) {
			ts := decode[[]api.TaskView](t, r)
			var got []string
			for _, x := range ts {
				got = append(got, x.ID+":"+x.State+":"+x.Machine)
			}
			want := []string{"alpha-1:done:beta/b1", "alpha-2:assigned:alpha/a2", "alpha-3:queued:", "beta-1:running:alpha/a1"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("tasks %v, want %v", got, want)
			}
			if ts[0].Name != "render-0" || ts[0].Attempts != 1 || ts[0].SizeGFlop != 100 || ts[0].SubmittedMs != apitest.SeedStartMs+2000 || ts[0].EndedMs != apitest.SeedStartMs+6000 {
				t.Errorf("alpha-1 %+v", ts[0])
			}
			// The keys `peer tasks --json` promises.
			var raw []map[string]any
			_ = json.Unmarshal(r.body, &raw)
			for _, k := range []string{"id", "org", "state", "attempts", "exit_code"} {
				if _, ok := raw[0][k]; !ok {
					t.Errorf("task lacks %q", k)
				}
			}
		}},
		{"tasks filtered", "GET", "/v1/tasks?org=alpha&state=queued,assigned", "", 200, func(t *testing.T, r response) {
			ts := decode[[]api.TaskView](t, r)
			if len(ts) != 2 || ts[0].ID != "alpha-2" || ts[1].ID != "alpha-3" {
				t.Errorf("tasks %+v", ts)
			}
		}},
		{"tasks repeated state and limit", "GET", "/v1/tasks?state=running&state=done&limit=1", "", 200, func(t *testing.T, r response) {
			ts := decode[[]api.TaskView](t, r)
			if len(ts) != 1 || ts[0].ID != "alpha-1" {
				t.Errorf("tasks %+v", ts)
			}
		}},
		{"tasks none", "GET", "/v1/tasks?org=gamma", "", 200, func(t *testing.T, r response) {
			if s := strings.TrimSpace(string(r.body)); s != "[]" {
				t.Errorf("empty listing %q, want []", s)
			}
		}},
		{"task", "GET", "/v1/tasks/alpha-1", "", 200, func(t *testing.T, r response) {
			d := decode[api.TaskDetail](t, r)
			if d.ID != "alpha-1" || d.Name != "render-0" || d.State != "done" || d.RemainingGFlop != 0 ||
				!reflect.DeepEqual(d.Argv, []string{"/bin/echo", "frame", "0"}) || d.Env["FRAME"] != "0" || d.WallLimitMs != 60_000 ||
				!reflect.DeepEqual(d.Inputs, []string{"scene.txt"}) || !reflect.DeepEqual(d.Outputs, []string{"frame-0.png"}) {
				t.Errorf("detail %+v", d)
			}
			want := []api.SegmentView{{Machine: "beta/b1", MachineOrg: "beta", StartMs: apitest.SeedStartMs + 5000, EndMs: apitest.SeedStartMs + 6000, EnergyJ: 12.345, Source: "rapl", Outcome: "done"}}
			if !reflect.DeepEqual(d.Segments, want) {
				t.Errorf("segments %+v", d.Segments)
			}
		}},
		{"logs stdout", "GET", "/v1/tasks/alpha-1/logs", "", 200, func(t *testing.T, r response) {
			if string(r.body) != "hello from alpha-1\n" || r.header.Get("Content-Type") != "application/octet-stream" {
				t.Errorf("logs %q (%s)", r.body, r.header.Get("Content-Type"))
			}
		}},
		{"logs stderr", "GET", "/v1/tasks/alpha-1/logs?stream=stderr", "", 200, func(t *testing.T, r response) {
			if string(r.body) != "warning: nothing\n" {
				t.Errorf("logs %q", r.body)
			}
		}},
		{"ledger", "GET", "/v1/ledger", "", 200, func(t *testing.T, r response) {
			l := decode[api.LedgerView](t, r)
			want := api.LedgerView{AppliedIndex: 8, StateHash: hash, Orgs: []api.LedgerAccount{
				{Org: "alpha", UserJ: 12.345, LimitW: 800, PIW: 300},
				{Org: "beta", OwnerOthersJ: 12.345, LimitW: 1000, PIW: 200},
			}}
			if !reflect.DeepEqual(l, want) {
				t.Errorf("ledger\n got %+v\nwant %+v", l, want)
			}
		}},
		{"metrics", "GET", "/metrics", "", 200, func(t *testing.T, r response) {
			if !strings.Contains(string(r.body), "coopgrid_org_queue_length{org=\"alpha\"} 1") {
				t.Errorf("metrics:\n%s", r.body)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, srv, tc.method, tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("%s %s: status %d, want %d: %s", tc.method, tc.path, r.status, tc.status, r.body)
			}
			tc.check(t, r)
		})
	}
	if h, _ := b.HashAndIndex(); h != hash {
		t.Errorf("reads changed the ledger")
	}
}

// TestWriteRoutes checks the routes that change the state, each on a
// fresh seeded ledger.
func TestWriteRoutes(t *testing.T) {
	t.Run("submit", func(t *testing.T) {
		b, srv := serve(t, api.ServerOptions{})
		body := `{"job":"j","tasks":[
			{"name":"x","argv":["/bin/sh","-c","cat in.txt"],"size_mflop":1500,"wall_limit_ms":1000,"inputs":[{"name":"in.txt","data":"aGVsbG8="}],"outputs":["o/*"],"checkpointable":true},
			{"argv":["/bin/true"],"size_mflop":1,"wall_limit_ms":5}]}`
		r := call(t, srv, "POST", "/v1/tasks", body)
		if r.status != http.StatusCreated {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		resp := decode[api.SubmitResponse](t, r)
		if !reflect.DeepEqual(resp.TaskIDs, []string{"alpha-4", "alpha-5"}) {
			t.Fatalf("ids %v", resp.TaskIDs)
		}
		d, err := b.Task(context.Background(), "alpha-4")
		if err != nil || d.State != "queued" || d.Name != "x" || d.SizeGFlop != 1.5 || !d.Checkpointable || !reflect.DeepEqual(d.Inputs, []string{"in.txt"}) || d.SubmittedMs != apitest.SeedStartMs+60_000 {
			t.Errorf("alpha-4 %+v %v", d, err)
		}
		if in := b.Inputs("alpha-4"); len(in) != 1 || string(in[0].Data) != "hello" {
			t.Errorf("inputs %+v", in)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		b, srv := serve(t, api.ServerOptions{})
		r := call(t, srv, "POST", "/v1/tasks/alpha-3/cancel", "")
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		if d, _ := b.Task(context.Background(), "alpha-3"); d.State != "cancelled" {
			t.Errorf("alpha-3 is %s", d.State)
		}
		// An empty JSON object is an acceptable body too.
		if r := call(t, srv, "POST", "/v1/tasks/alpha-2/cancel", "{}"); r.status != http.StatusNoContent {
			t.Fatalf("cancel with {}: %d %s", r.status, r.body)
		}
	})
	t.Run("limit percent", func(t *testing.T) {
		_, srv := serve(t, api.ServerOptions{})
		r := call(t, srv, "PUT", "/v1/limit", `{"percent":80}`)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		// 80 % of alpha's 500 W power quota.
		if o := decode[api.OrgView](t, r); o.Name != "alpha" || o.LimitW != 400 || o.PIW != 300 {
			t.Errorf("org %+v", o)
		}
	})
	t.Run("limit watts", func(t *testing.T) {
		_, srv := serve(t, api.ServerOptions{})
		r := call(t, srv, "PUT", "/v1/limit", `{"watts":1500.5}`)
		if o := decode[api.OrgView](t, r); r.status != 200 || o.LimitW != 1500.5 {
			t.Errorf("status %d org %+v", r.status, o)
		}
	})
	t.Run("leave", func(t *testing.T) {
		b, srv := serve(t, api.ServerOptions{})
		if r := call(t, srv, "POST", "/v1/leave", ""); r.status != http.StatusNoContent {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		if !b.Left() {
			t.Error("backend did not leave")
		}
		r := call(t, srv, "POST", "/v1/tasks", `{"tasks":[{"argv":["x"],"size_mflop":1,"wall_limit_ms":1}]}`)
		if e := apiError(t, r); r.status != 503 || e.Code != api.CodeUnavailable {
			t.Errorf("submit after leave: %d %+v", r.status, e)
		}
	})
}

func TestAuth(t *testing.T) {
	_, srv := serve(t, api.ServerOptions{})
	for _, tc := range []struct{ name, path, auth string }{
		{"missing", "/v1/status", "-"},
		{"wrong token", "/v1/status", "Bearer wrong"},
		{"token prefix", "/v1/status", "Bearer " + token[:len(token)-1]},
		{"token with suffix", "/v1/status", "Bearer " + token + "x"},
		{"wrong scheme", "/v1/status", "Basic " + token},
		{"no scheme", "/v1/status", token},
		{"metrics", "/metrics", "-"},
		{"unknown route", "/v1/nothing", "-"},
		{"write route", "/v1/leave", "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "GET"
			if tc.path == "/v1/leave" {
				method = "POST"
			}
			r := call(t, srv, method, tc.path, "", tc.auth)
			e := apiError(t, r)
			if r.status != 401 || e.Code != api.CodeUnauthorized || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("status %d error %+v", r.status, e)
			}
		})
	}
	t.Run("scheme is case-insensitive", func(t *testing.T) {
		if r := call(t, srv, "GET", "/v1/status", "", "bearer "+token); r.status != 200 {
			t.Errorf("status %d", r.status)
		}
	})
	t.Run("healthz needs no token", func(t *testing.T) {
		if r := call(t, srv, "GET", "/healthz", "", "-"); r.status != 200 {
			t.Errorf("status %d", r.status)
		}
	})
	t.Run("empty server token refuses all", func(t *testing.T) {
		b, _ := apitest.NewSeeded(nil)
		h := api.NewServer(b, api.ServerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		for _, a := range []string{"", "Bearer ", "Bearer"} {
			req := httptest.NewRequest("GET", "/v1/status", nil)
			req.Header.Set("Authorization", a)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 401 {
				t.Errorf("Authorization %q: status %d", a, w.Code)
			}
		}
	})
	t.Run("leave refused without token", func(t *testing.T) {
		b, srv := serve(t, api.ServerOptions{})
		call(t, srv, "POST", "/v1/leave", "", "Bearer nope")
		if b.Left() {
			t.Error("an unauthenticated request changed the backend")
		}
	})
}

func TestErrors(t *testing.T) {
	b, srv := serve(t, api.ServerOptions{})
	hash, _ := b.HashAndIndex()
	big := `{"watts":1` + strings.Repeat(" ", 70<<10) + `}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code, msg                string
	}{
		{"unknown route", "GET", "/v1/nothing", "", 404, api.CodeNotFound, "no route"},
		{"unknown version", "GET", "/v2/status", "", 404, api.CodeNotFound, "no route"},
		{"root", "GET", "/", "", 404, api.CodeNotFound, "no route"},
		{"trailing slash", "GET", "/v1/tasks/", "", 404, api.CodeNotFound, "no route"},
		{"too deep", "GET", "/v1/tasks/alpha-1/logs/x", "", 404, api.CodeNotFound, "no route"},
		{"wrong method", "DELETE", "/v1/tasks", "", 405, api.CodeMethodInvalid, "allowed: GET, POST"},
		{"get cancel", "GET", "/v1/tasks/alpha-1/cancel", "", 405, api.CodeMethodInvalid, "allowed: POST"},
		{"post limit", "POST", "/v1/limit", `{"watts":1}`, 405, api.CodeMethodInvalid, "allowed: PUT"},
		{"bad JSON", "PUT", "/v1/limit", `{"watts":`, 400, api.CodeBadRequest, "malformed JSON"},
		{"not an object", "PUT", "/v1/limit", `[1]`, 400, api.CodeBadRequest, "malformed JSON"},
		{"unknown field", "PUT", "/v1/limit", `{"watts":1,"wats":2}`, 400, api.CodeBadRequest, "unknown field"},
		{"trailing data", "PUT", "/v1/limit", `{"watts":1}{}`, 400, api.CodeBadRequest, "trailing data"},
		{"empty body", "PUT", "/v1/limit", ``, 400, api.CodeBadRequest, "empty request body"},
		{"both limits", "PUT", "/v1/limit", `{"watts":1,"percent":2}`, 400, api.CodeBadRequest, "exactly one"},
		{"neither limit", "PUT", "/v1/limit", `{}`, 400, api.CodeBadRequest, "exactly one"},
		{"negative watts", "PUT", "/v1/limit", `{"watts":-1}`, 400, api.CodeBadRequest, "watts -1"},
		{"cancel body field", "POST", "/v1/tasks/alpha-3/cancel", `{"force":true}`, 400, api.CodeBadRequest, "unknown field"},
		{"bad state", "GET", "/v1/tasks?state=sleeping", "", 400, api.CodeBadRequest, `state "sleeping"`},
		{"bad limit", "GET", "/v1/tasks?limit=ten", "", 400, api.CodeBadRequest, `limit "ten"`},
		{"negative limit", "GET", "/v1/tasks?limit=-1", "", 400, api.CodeBadRequest, "limit -1"},
		{"bad org", "GET", "/v1/tasks?org=../x", "", 400, api.CodeBadRequest, "org"},
		{"unknown parameter", "GET", "/v1/tasks?owner=alpha", "", 400, api.CodeBadRequest, `unknown query parameter "owner"`},
		{"parameter on status", "GET", "/v1/status?verbose=1", "", 400, api.CodeBadRequest, `unknown query parameter "verbose" (want limit, after)`},
		{"bad stream", "GET", "/v1/tasks/alpha-1/logs?stream=stdin", "", 400, api.CodeBadRequest, `stream "stdin"`},
		{"bad task ID", "GET", "/v1/tasks/a%20b", "", 400, api.CodeBadRequest, "task ID"},
		{"no tasks", "POST", "/v1/tasks", `{"tasks":[]}`, 400, api.CodeBadRequest, "no tasks"},
		{"empty argv", "POST", "/v1/tasks", `{"tasks":[{"argv":[],"size_mflop":1,"wall_limit_ms":1}]}`, 400, api.CodeBadRequest, "tasks[0]: argv"},
		{"zero size", "POST", "/v1/tasks", `{"tasks":[{"argv":["x"],"size_mflop":0,"wall_limit_ms":1}]}`, 400, api.CodeBadRequest, "tasks[0]: size 0"},
		{"no wall limit", "POST", "/v1/tasks", `{"tasks":[{"argv":["x"],"size_mflop":1}]}`, 400, api.CodeBadRequest, "wall_limit_ms 0"},
		{"bad env", "POST", "/v1/tasks", `{"tasks":[{"argv":["x"],"size_mflop":1,"wall_limit_ms":1},{"argv":["x"],"env":{"1A":"b"},"size_mflop":1,"wall_limit_ms":1}]}`, 400, api.CodeBadRequest, `tasks[1]: env key "1A"`},
		{"escaping input", "POST", "/v1/tasks", `{"tasks":[{"argv":["x"],"size_mflop":1,"wall_limit_ms":1,"inputs":[{"name":"../x","data":""}]}]}`, 400, api.CodeBadRequest, `inputs[0] "../x"`},
		{"duplicate names", "POST", "/v1/tasks", `{"tasks":[{"name":"a","argv":["x"],"size_mflop":1,"wall_limit_ms":1},{"name":"a","argv":["x"],"size_mflop":1,"wall_limit_ms":1}]}`, 400, api.CodeBadRequest, "already used"},
		{"bad base64", "POST", "/v1/tasks", `{"tasks":[{"argv":["x"],"size_mflop":1,"wall_limit_ms":1,"inputs":[{"name":"a","data":"!!"}]}]}`, 400, api.CodeBadRequest, "malformed JSON"},
		{"too large", "PUT", "/v1/limit", big, 413, api.CodeTooLarge, "limit is 65536"},
		// From the ledger, through ErrorFromLedger.
		{"unknown task", "GET", "/v1/tasks/alpha-99", "", 404, api.CodeNotFound, `no task "alpha-99"`},
		{"unknown task logs", "GET", "/v1/tasks/alpha-99/logs", "", 404, api.CodeNotFound, `no task "alpha-99"`},
		{"cancel unknown", "POST", "/v1/tasks/alpha-99/cancel", "", 404, api.CodeNotFound, "unknown_task"},
		{"cancel another org's task", "POST", "/v1/tasks/beta-1/cancel", "", 403, api.CodeForbidden, "not_owner"},
		{"cancel a done task", "POST", "/v1/tasks/alpha-1/cancel", "", 409, api.CodeConflict, "already done"},
		{"limit below PI", "PUT", "/v1/limit", `{"watts":100}`, 409, api.CodeConflict, "limit_exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, srv, tc.method, tc.path, tc.body)
			e := apiError(t, r)
			if r.status != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("%s %s: %d %+v, want %d %s containing %q", tc.method, tc.path, r.status, e, tc.status, tc.code, tc.msg)
			}
			if tc.status == 405 && r.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	if h, _ := b.HashAndIndex(); h != hash {
		t.Error("a rejected request changed the ledger")
	}
}

func TestBodyLimits(t *testing.T) {
	_, srv := serve(t, api.ServerOptions{MaxBodyBytes: 100, MaxSubmitBytes: 300})
	task := `{"argv":["/bin/true"],"size_mflop":1,"wall_limit_ms":1}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"limit at the bound", "PUT", "/v1/limit", `{"watts":1000}` + strings.Repeat(" ", 100-len(`{"watts":1000}`)), 200},
		{"limit one over", "PUT", "/v1/limit", `{"watts":1000}` + strings.Repeat(" ", 101-len(`{"watts":1000}`)), 413},
		{"submit within its own limit", "POST", "/v1/tasks", `{"tasks":[` + task + `,` + task + `]}`, 201},
		{"submit over", "POST", "/v1/tasks", `{"tasks":[` + strings.Repeat(task+",", 5) + task + `]}`, 413},
		{"cancel over", "POST", "/v1/tasks/alpha-3/cancel", `{` + strings.Repeat(" ", 200) + `}`, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, srv, tc.method, tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status == 413 {
				if e := apiError(t, r); e.Code != api.CodeTooLarge {
					t.Errorf("code %s", e.Code)
				}
			}
		})
	}
	// Without a Content-Length the limit holds while reading.
	t.Run("chunked over", func(t *testing.T) {
		req, _ := http.NewRequest("PUT", srv.URL+"/v1/limit", io.MultiReader(strings.NewReader(`{"watts":1`), strings.NewReader(strings.Repeat(" ", 200)+"}")))
		req.Header.Set("Authorization", "Bearer "+token)
		req.ContentLength = -1
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}

// failing answers every call with err: a stand-in for a daemon in
// trouble (no leader, a bug), to check the status each error gets.
type failing struct {
	api.Backend
	err error
}

func (f failing) Status(context.Context) (api.Status, error) { return api.Status{}, f.err }

func TestBackendErrorStatus(t *testing.T) {
	b, _ := apitest.NewSeeded(nil)
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{api.Errorf(api.CodeUnavailable, "no leader"), 503, api.CodeUnavailable},
		{api.Errorf(api.CodeForbidden, "no"), 403, api.CodeForbidden},
		{api.Errorf(api.CodeConflict, "no"), 409, api.CodeConflict},
		{api.Errorf(api.CodeNotFound, "no"), 404, api.CodeNotFound},
		{&api.Error{Code: api.CodeUnavailable, Message: "status left 0"}, 503, api.CodeUnavailable},
		{&api.Error{Status: 418, Code: "teapot", Message: "custom"}, 418, "teapot"},
		{errors.New("disk on fire"), 500, api.CodeInternal},
		{wrapErr{api.Errorf(api.CodeUnavailable, "wrapped")}, 503, api.CodeUnavailable},
	} {
		srv := serveBackend(t, failing{b, tc.err}, api.ServerOptions{})
		r := call(t, srv, "GET", "/v1/status", "")
		e := apiError(t, r)
		if r.status != tc.status || e.Code != tc.code {
			t.Errorf("%v: %d %+v, want %d %s", tc.err, r.status, e, tc.status, tc.code)
		}
	}
}

type wrapErr struct{ err error }

func (w wrapErr) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapErr) Unwrap() error { return w.err }

// TestRequestsLogged checks the debug line of every request.
func TestRequestsLogged(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, srv := serve(t, api.ServerOptions{Logger: lg})
	call(t, srv, "GET", "/v1/tasks/alpha-99", "")
	call(t, srv, "GET", "/healthz", "", "-")
	out := buf.String()
	for _, want := range []string{"path=/v1/tasks/alpha-99", "route=/v1/tasks/{id}", "status=404", "path=/healthz", "status=200"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
