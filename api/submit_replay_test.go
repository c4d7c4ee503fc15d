package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
	"github.com/coopgrid/coopgrid/node/nodetest"
)

// TestSubmitIdempotentOnNode sends the same submission twice, and the
// variants around it, to a real single-peer federation: the same request
// ID gets the same task IDs (200, replayed) and leaves the state hash
// alone; a reused ID for other tasks, and a malformed ID, are refused and
// change nothing.
func TestSubmitIdempotentOnNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := nodetest.Start(ctx, t)
	// A limit of 0 W keeps the tasks queued: nothing else moves the state
	// hash while the requests below are checked.
	zero := 0.0
	if _, err := api.NewClient(p.URL, p.Token, nil).SetLimit(ctx, api.LimitRequest{Watts: &zero}); err != nil {
		t.Fatal(err)
	}
	body := func(id string, size int) string {
		key := ""
		if id != "" {
			key = `"request_id":"` + id + `",`
		}
		return `{` + key + `"tasks":[{"argv":["/bin/sh","-c","true"],"size_mflop":` + strings.Repeat("9", size) + `,"wall_limit_ms":60000},` +
			`{"argv":["/bin/true"],"size_mflop":1000,"wall_limit_ms":60000}]}`
	}
	post := func(b string) (int, api.SubmitResponse, api.Error) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", p.URL+"/v1/tasks", strings.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+p.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		r := response{resp.StatusCode, resp.Header, data}
		if resp.StatusCode >= 300 {
			return resp.StatusCode, api.SubmitResponse{}, apiError(t, r)
		}
		return resp.StatusCode, decode[api.SubmitResponse](t, r), api.Error{}
	}
	var first []string
	steps := []struct {
		name   string
		body   string
		status int
		code   string // an error's
		// replay: the answer must be the first submit's IDs (else IDs
		// never seen); hash: whether the state hash must move; logged:
		// whether the request may reach the log.
		replay, hash, logged bool
		wantKey              string // the request ID answered ("peer:" prefix for one the peer made)
	}{
		{name: "first", body: body("job-1", 4), status: 201, hash: true, logged: true, wantKey: "job-1"},
		{name: "the same again", body: body("job-1", 4), status: 200, replay: true, logged: true, wantKey: "job-1"},
		{name: "and again", body: body("job-1", 4), status: 200, replay: true, logged: true, wantKey: "job-1"},
		{name: "the same ID for other tasks", body: body("job-1", 5), status: 409, code: api.CodeConflict, logged: true},
		{name: "malformed request ID", body: body("job 1", 4), status: 400, code: api.CodeBadRequest},
		{name: "request ID too long", body: body(strings.Repeat("k", 129), 4), status: 400, code: api.CodeBadRequest},
		{name: "another ID: new tasks", body: body("job-2", 4), status: 201, hash: true, logged: true, wantKey: "job-2"},
		{name: "no ID: the peer makes one up", body: body("", 4), status: 201, hash: true, logged: true, wantKey: "peer:"},
		{name: "no ID again: new tasks", body: body("", 4), status: 201, hash: true, logged: true, wantKey: "peer:"},
	}
	seen := map[string]bool{}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := ledgerState(t, p)
			status, resp, e := post(st.body)
			after := ledgerState(t, p)
			if status != st.status || e.Code != st.code {
				t.Fatalf("status %d code %q (%s), want %d %q", status, e.Code, e.Message, st.status, st.code)
			}
			if (after.hash != before.hash) != st.hash {
				t.Fatalf("state hash moved: %v, want %v", after.hash != before.hash, st.hash)
			}
			if !st.logged && after.index != before.index {
				t.Fatal("a request refused by the API reached the log")
			}
			if st.code != "" {
				return
			}
			if len(resp.TaskIDs) != 2 || resp.Replayed != st.replay || !strings.HasPrefix(resp.RequestID, st.wantKey) {
				t.Fatalf("answer %+v, want 2 IDs, replayed %v, request ID %s…", resp, st.replay, st.wantKey)
			}
			switch {
			case first == nil:
				first = resp.TaskIDs
			case st.replay:
				if !slices.Equal(resp.TaskIDs, first) {
					t.Fatalf("replay answered %v, the original IDs are %v", resp.TaskIDs, first)
				}
				return
			}
			for _, id := range resp.TaskIDs {
				if seen[id] {
					t.Fatalf("task %s returned twice", id)
				}
				seen[id] = true
			}
		})
	}
	// Through the Go client: a fresh random ID per call, the given one
	// reused.
	c := api.NewClient(p.URL, p.Token, nil)
	req := api.SubmitRequest{Tasks: []api.SubmitTask{{Argv: []string{"/bin/true"}, SizeMFlop: 1000, WallLimitMs: 60_000}}}
	r1, err1 := c.Submit(ctx, req)
	r2, err2 := c.Submit(ctx, req)
	if err1 != nil || err2 != nil || len(r1.RequestID) != 32 || r1.RequestID == r2.RequestID || r1.Replayed || r2.Replayed || r1.TaskIDs[0] == r2.TaskIDs[0] {
		t.Fatalf("two client submits without an ID: %+v %v / %+v %v", r1, err1, r2, err2)
	}
	req.RequestID = r1.RequestID
	r3, err := c.Submit(ctx, req)
	if err != nil || !r3.Replayed || !slices.Equal(r3.TaskIDs, r1.TaskIDs) {
		t.Fatalf("resend with the first call's ID: %+v %v, want %v replayed", r3, err, r1.TaskIDs)
	}
	// Every task the federation holds was answered exactly once above.
	ts, err := c.Tasks(ctx, api.TaskQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(seen) + 2; len(ts) != want {
		t.Fatalf("%d tasks in the ledger, want %d: a replay queued tasks", len(ts), want)
	}
}

// faultyBackend loses the answer of the first `lose` submissions (after
// queuing them, or before the ledger sees them when `before` is set) and
// records the request ID of every submission it sees.
type faultyBackend struct {
	*apitest.Backend
	fault
	mu       sync.Mutex
	requests []string
}

type fault struct {
	lose    int
	before  bool   // fail before the ledger sees the submission
	errCode string // the error returned instead of the answer
}

func (f *faultyBackend) Submit(ctx context.Context, req api.SubmitRequest) (api.SubmitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req.RequestID)
	if f.lose > 0 && f.before {
		f.lose--
		return api.SubmitResponse{}, api.Errorf(f.errCode, "lost before")
	}
	resp, err := f.Backend.Submit(ctx, req)
	if err == nil && f.lose > 0 {
		f.lose--
		return api.SubmitResponse{}, api.Errorf(f.errCode, "lost after")
	}
	return resp, err
}

// dropAnswers runs the first `drop` POSTs to completion and then closes
// the connection without an answer: the client sees no HTTP answer at all.
type dropAnswers struct {
	h    http.Handler
	mu   sync.Mutex
	drop int
}

func (d *dropAnswers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	drop := r.Method == http.MethodPost && d.drop > 0
	if drop {
		d.drop--
	}
	d.mu.Unlock()
	if !drop {
		d.h.ServeHTTP(w, r)
		return
	}
	d.h.ServeHTTP(httptest.NewRecorder(), r)
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// TestClientSubmitResends: Client.Submit resends a submission whose outcome
// it did not learn, always with the same request ID, and the tasks are
// queued once whatever was lost; a definite answer is never resent.
func TestClientSubmitResends(t *testing.T) {
	cases := []struct {
		name     string
		fb       fault
		drop     int // connections closed without an answer (after the submit ran)
		attempts int // Client.SubmitAttempts
		// want: backend calls, the outcome (an error code, or "" and
		// whether the answer is a replay), tasks queued.
		wantCalls    int
		wantCode     string
		wantReplayed bool
		wantQueued   int
	}{
		{name: "answered at once", wantCalls: 1, wantQueued: 2},
		{name: "503 after queuing: the resend is a replay", fb: fault{lose: 1, errCode: api.CodeUnavailable}, wantCalls: 2, wantReplayed: true, wantQueued: 2},
		{name: "500 after queuing, twice", fb: fault{lose: 2, errCode: api.CodeInternal}, wantCalls: 3, wantReplayed: true, wantQueued: 2},
		{name: "connection closed after queuing", drop: 1, wantCalls: 1 /* the dropped call ran in the backend too, counted below */, wantReplayed: true, wantQueued: 2},
		{name: "503 before queuing (no leader): the resend queues", fb: fault{lose: 1, before: true, errCode: api.CodeUnavailable}, wantCalls: 2, wantQueued: 2},
		{name: "every attempt unanswered", fb: fault{lose: 9, before: true, errCode: api.CodeUnavailable}, wantCalls: api.DefaultSubmitAttempts, wantCode: api.CodeUnavailable},
		{name: "one attempt only", fb: fault{lose: 1, errCode: api.CodeUnavailable}, attempts: 1, wantCalls: 1, wantCode: api.CodeUnavailable, wantQueued: 2},
		{name: "a refusal is not resent", fb: fault{lose: 1, before: true, errCode: api.CodeConflict}, wantCalls: 1, wantCode: api.CodeConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
			if err != nil {
				t.Fatal(err)
			}
			fb := &faultyBackend{Backend: b, fault: tc.fb}
			d := &dropAnswers{h: api.NewServer(fb, api.ServerOptions{Token: token, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), drop: tc.drop}
			srv := httptest.NewServer(d)
			defer srv.Close()
			c := api.NewClient(srv.URL, token, srv.Client())
			c.SubmitAttempts, c.SubmitBackoff = tc.attempts, time.Millisecond
			before, _ := b.Orgs(context.Background())
			resp, err := c.Submit(context.Background(), api.SubmitRequest{Tasks: []api.SubmitTask{
				{Argv: []string{"/bin/true"}, SizeMFlop: 1000, WallLimitMs: 60_000},
				{Argv: []string{"/bin/false"}, SizeMFlop: 2000, WallLimitMs: 60_000},
			}})
			calls := len(fb.requests)
			if tc.drop > 0 {
				calls -= tc.drop
			}
			if calls != tc.wantCalls {
				t.Fatalf("%d submissions reached the backend (%d dropped), want %d", len(fb.requests), tc.drop, tc.wantCalls)
			}
			for _, id := range fb.requests {
				if len(id) != 32 || id != fb.requests[0] {
					t.Fatalf("request IDs %v: want one fresh ID reused by every attempt", fb.requests)
				}
			}
			if api.CodeOf(err) != tc.wantCode {
				t.Fatalf("error %v, want code %q", err, tc.wantCode)
			}
			if err != nil && api.OutcomeUnknown(err) && !strings.Contains(err.Error(), "request ID "+fb.requests[0]) {
				t.Fatalf("an unanswered submission's error does not name its request ID: %v", err)
			}
			if err == nil && (len(resp.TaskIDs) != 2 || resp.Replayed != tc.wantReplayed || resp.RequestID != fb.requests[0]) {
				t.Fatalf("answer %+v, want 2 IDs, replayed %v", resp, tc.wantReplayed)
			}
			after, _ := b.Orgs(context.Background())
			if got := after[0].Queued - before[0].Queued; got != tc.wantQueued {
				t.Fatalf("%d tasks queued, want %d", got, tc.wantQueued)
			}
		})
	}
	t.Run("a cancelled context stops the resends", func(t *testing.T) {
		b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
		if err != nil {
			t.Fatal(err)
		}
		fb := &faultyBackend{Backend: b, fault: fault{lose: 100, before: true, errCode: api.CodeUnavailable}}
		srv := serveBackend(t, fb, api.ServerOptions{})
		c := api.NewClient(srv.URL, token, srv.Client())
		c.SubmitAttempts, c.SubmitBackoff = 100, time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for {
				fb.mu.Lock()
				n := len(fb.requests)
				fb.mu.Unlock()
				if n > 0 {
					cancel()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		_, err = c.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{Argv: []string{"/bin/true"}, SizeMFlop: 1, WallLimitMs: 1}}})
		if err == nil || len(fb.requests) != 1 || !strings.Contains(err.Error(), "request ID") {
			t.Fatalf("err %v after %d attempts, want one attempt and the request ID", err, len(fb.requests))
		}
	})
}
