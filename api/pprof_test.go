package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// TestPprofOnlyForTheOperatorOnItsHost: /debug/pprof/ answers a request
// with the API token from a loopback address; without the token it is
// 401 like every route, and with it from another address 403 forbidden:
// someone who reaches a peer whose API listens beyond loopback gets no
// profile even with the token.
func TestPprofOnlyForTheOperatorOnItsHost(t *testing.T) {
	b := apitest.New("alpha", "peeralpha", nil)
	srv := serveBackend(t, b, api.ServerOptions{})
	for _, path := range []string{api.PprofPrefix, api.PprofPrefix + "heap?debug=1", api.PprofPrefix + "goroutine?debug=1", api.PprofPrefix + "profile?seconds=1", api.PprofPrefix + "trace?seconds=1"} {
		if r := call(t, srv, http.MethodGet, path, ""); r.status != http.StatusOK || len(r.body) == 0 {
			t.Errorf("GET %s from loopback with the token: %d %.200s", path, r.status, r.body)
		}
		if r := call(t, srv, http.MethodGet, path, "", "-"); r.status != http.StatusUnauthorized || apiError(t, r).Code != api.CodeUnauthorized {
			t.Errorf("GET %s without the token: %d %.200s, want 401", path, r.status, r.body)
		}
		// httptest.NewRequest comes from 192.0.2.1, a documentation
		// address: not loopback.
		h := api.NewServer(b, api.ServerOptions{Token: token})
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), api.CodeForbidden) || strings.Contains(rec.Body.String(), "goroutine") {
			t.Errorf("GET %s from %s with the token: %d %.200s, want 403 forbidden", path, req.RemoteAddr, rec.Code, rec.Body.String())
		}
	}
}

// TestPprofTrace: trace?seconds=N is a Go execution trace (its header
// names it), and a bad duration is a 400 with nothing traced.
func TestPprofTrace(t *testing.T) {
	b := apitest.New("alpha", "peeralpha", nil)
	srv := serveBackend(t, b, api.ServerOptions{})
	r := call(t, srv, http.MethodGet, api.PprofPrefix+"trace?seconds=1", "")
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "go 1.") || !strings.Contains(string(r.body[:16]), "trace") {
		t.Fatalf("GET trace?seconds=1: %d %.40q, want a Go execution trace", r.status, r.body)
	}
	for _, bad := range []string{"0", "x", "301"} {
		r := call(t, srv, http.MethodGet, api.PprofPrefix+"trace?seconds="+bad, "")
		if r.status != http.StatusBadRequest || apiError(t, r).Code != api.CodeBadRequest {
			t.Errorf("GET trace?seconds=%s: %d %.200s, want 400 bad_request", bad, r.status, r.body)
		}
	}
}
