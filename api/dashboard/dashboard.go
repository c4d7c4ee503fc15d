// Package dashboard is the peer's web dashboard: plain HTML, CSS and
// JavaScript built into the binary with embed, plus the vendored uPlot
// charting library, so that it works offline and needs no build step.
//
// The files hold no data and no secret: the page asks for the API token,
// keeps it in sessionStorage and calls the JSON API (/v1/...) with it as
// the bearer token. That is why package api serves these files without a
// token, and everything they show comes through the authenticated API.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

//go:embed static
var files embed.FS

// contentSecurityPolicy allows only this origin's own scripts (none inline)
// and API calls to this origin. Inline styles stay allowed because uPlot
// sets element styles while it draws.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Handler serves the dashboard's files for paths under Prefix (the caller
// mounts it there and restricts the methods). Directories other than
// Prefix itself are not listed.
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		// Only a wrong literal above gets here, which the tests catch.
		panic("dashboard: embedded files: " + err.Error())
	}
	files := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// A new binary serves new files at the same paths: always revalidate.
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path != Prefix && strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// IsPath reports whether path belongs to the dashboard's files.
func IsPath(path string) bool {
	return path == strings.TrimSuffix(Prefix, "/") || strings.HasPrefix(path, Prefix)
}

// WantsHTML reports whether r is a browser asking for a page (its Accept
// header names text/html), so that the root path can send browsers to the
// dashboard while API clients keep getting JSON.
func WantsHTML(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := strings.Cut(part, ";")
		if strings.EqualFold(strings.TrimSpace(mt), "text/html") {
			return true
		}
	}
	return false
}
