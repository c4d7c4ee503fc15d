package dashboard_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// TestRoutes checks how the API server serves the dashboard: its files
// without a token (they hold no data), the root redirecting browsers only,
// and the API itself still behind the token.
func TestRoutes(t *testing.T) {
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewServer(b, api.ServerOptions{Token: "secret", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	tests := []struct {
		name, method, path, accept, auth string
		status                           int
		contains, header                 string
	}{
		{"page without token", "GET", "/ui/", "", "", 200, `<script src="app.js"`, "Content-Security-Policy"},
		{"script", "GET", "/ui/app.js", "", "", 200, "syncRows", "Content-Security-Policy"},
		{"chart library", "GET", "/ui/vendor/uPlot.iife.min.js", "", "", 200, "uPlot v1.6.32", ""},
		{"no directory listing", "GET", "/ui/vendor/", "", "", 404, "", ""},
		{"unknown file", "GET", "/ui/nothing.js", "", "", 404, "", ""},
		{"ui without slash", "GET", "/ui", "", "", 307, "", "Location"},
		{"browser at root", "GET", "/", "text/html,application/xhtml+xml", "", 302, "", "Location"},
		{"API client at root", "GET", "/", "application/json", "Bearer secret", 404, `"not_found"`, ""},
		{"root without token", "GET", "/", "", "", 401, `"unauthorized"`, ""},
		{"post to the page", "POST", "/ui/", "", "", 401, `"unauthorized"`, ""},
		{"post with token", "POST", "/ui/", "", "Bearer secret", 405, `"method_not_allowed"`, ""},
		{"API still needs the token", "GET", "/v1/status", "text/html", "", 401, `"unauthorized"`, ""},
		{"API with the token", "GET", "/v1/status", "", "Bearer secret", 200, `"orgs"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if !strings.Contains(string(body), tc.contains) {
				t.Errorf("body lacks %q: %.200s", tc.contains, body)
			}
			if tc.header != "" && resp.Header.Get(tc.header) == "" {
				t.Errorf("no %s header", tc.header)
			}
			if tc.header == "Location" && !strings.HasSuffix(resp.Header.Get("Location"), "/ui/") {
				t.Errorf("Location %q, want /ui/", resp.Header.Get("Location"))
			}
		})
	}
}
