package api_test

import (
	"net/http"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// TestTimelineRoute: the seeded ledger's recent past, its last sample equal
// to the live figures; bad queries refused with bad_request; no token, no
// history.
func TestTimelineRoute(t *testing.T) {
	b, srv := serve(t, api.ServerOptions{})
	r := call(t, srv, "GET", "/v1/timeline?window_s=120&points=5", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/timeline: %d %s", r.status, r.body)
	}
	h := decode[api.TimelineView](t, r)
	if len(h.TimesMs) != 5 || h.TimesMs[4]-h.TimesMs[0] != 120_000 || h.Note == "" {
		t.Fatalf("times %v (want 5 over 120 s), note %q", h.TimesMs, h.Note)
	}
	orgs, err := b.Orgs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	led, err := b.Ledger(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Orgs) != len(orgs) {
		t.Fatalf("%d organisations in the history, %d in the ledger", len(h.Orgs), len(orgs))
	}
	for i, o := range orgs {
		s := h.Orgs[i]
		if s.Name != o.Name || len(s.PIW) != 5 || len(s.DP) != 5 || len(s.UserJ) != 5 {
			t.Fatalf("series %d: %+v", i, s)
		}
		// The seeded tasks started in the last minute: the oldest sample
		// (two minutes ago) has nothing running.
		if s.PIW[0] != 0 || s.AllocGFLOPS[0] != 0 {
			t.Errorf("%s two minutes ago: PI %v W, allocated %v GFLOPS, want 0", o.Name, s.PIW[0], s.AllocGFLOPS[0])
		}
		if !near(s.PIW[4], o.PIW) || !near(s.AllocGFLOPS[4], o.AllocGFLOPS) || s.DP[4] == nil || !near(*s.DP[4], *o.DP) {
			t.Errorf("%s now: PI %v, allocated %v, DP %v; live %v, %v, %v", o.Name, s.PIW[4], s.AllocGFLOPS[4], s.DP[4], o.PIW, o.AllocGFLOPS, *o.DP)
		}
		a := led.Orgs[i]
		if !near(s.UserJ[4], a.UserJ) || !near(s.OwnerJ[4], a.OwnerSelfJ+a.OwnerOthersJ) {
			t.Errorf("%s now: %v J as user, %v J as owner; ledger %+v", o.Name, s.UserJ[4], s.OwnerJ[4], a)
		}
	}

	for _, q := range []string{"?points=1", "?points=801", "?points=x", "?window_s=0", "?window_s=604801", "?since=1"} {
		r := call(t, srv, "GET", "/v1/timeline"+q, "")
		if e := apiError(t, r); r.status != http.StatusBadRequest || e.Code != api.CodeBadRequest {
			t.Errorf("GET /v1/timeline%s: %d %s, want 400 bad_request", q, r.status, e.Code)
		}
	}
	r = call(t, srv, "GET", "/v1/timeline", "", "-")
	if e := apiError(t, r); r.status != http.StatusUnauthorized {
		t.Errorf("without the token: %d %s, want 401", r.status, e.Code)
	}
	r = call(t, srv, "POST", "/v1/timeline", "")
	if r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", r.status)
	}
}
