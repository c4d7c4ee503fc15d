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
	for _, path := range []string{api.PprofPrefix, api.PprofPrefix + "heap?debug=1", api.PprofPrefix + "goroutine?debug=1", api.PprofPrefix + "profile?seconds=1"} {
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
