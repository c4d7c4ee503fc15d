package api

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// The Go runtime's profiles (net/http/pprof) under /debug/pprof/, for the
// peer's operator: where a peer spends its CPU and memory (issue 17's
// restart and memory figures were found with it). The routes are on the
// API's listener only, never on the federation's libp2p port, and a
// request needs both the API token (like every route) and a loopback
// client address: the operator on the peer's own host (or through an SSH
// tunnel to it). A token holder reaching a peer whose API listens on a
// non-loopback address gets 403 CodeForbidden: goroutine dumps show what
// the peer is doing with whom, and a CPU profile costs the peer CPU for as
// long as it is asked to run.

// PprofPrefix is where the profiles are served.
const PprofPrefix = "/debug/pprof/"

// maxCPUProfileSeconds bounds ?seconds= of a CPU profile.
const maxCPUProfileSeconds = 300

// The handlers use runtime/pprof directly rather than net/http/pprof,
// whose import registers the same routes on http.DefaultServeMux for
// every server of the process.
func (s *Server) pprofRoutes() {
	s.mux.HandleFunc(PprofPrefix, func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r) {
			s.writeError(w, r, Errorf(CodeForbidden, "%s is served to a client on the peer's own host only (loopback), not to %s", PprofPrefix, r.RemoteAddr))
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			s.writeError(w, r, Errorf(CodeMethodInvalid, "%s %s: allowed: GET", r.Method, r.URL.Path))
			return
		}
		if err := servePprof(w, r, strings.TrimPrefix(r.URL.Path, PprofPrefix)); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// servePprof writes profile name: "" lists the profiles, "profile" is a
// CPU profile of ?seconds= (default 30), any other a runtime/pprof
// profile (?debug=1 or 2: text).
func servePprof(w http.ResponseWriter, r *http.Request, name string) error {
	q := r.URL.Query()
	switch name {
	case "":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "profiles (GET %sNAME, ?debug=1 for text; %sprofile?seconds=N for CPU; %strace?seconds=N for an execution trace):\n", PprofPrefix, PprofPrefix, PprofPrefix)
		for _, p := range pprof.Profiles() {
			fmt.Fprintf(w, "%s\t%d\n", p.Name(), p.Count())
		}
		return nil
	case "profile":
		return record(w, r, 30, "a CPU profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
	case "trace":
		return record(w, r, 5, "an execution trace", trace.Start, trace.Stop)
	}
	p := pprof.Lookup(name)
	if p == nil {
		return Errorf(CodeNotFound, "no profile %q (GET %s lists them)", name, PprofPrefix)
	}
	debug := 0
	if v := q.Get("debug"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 2 {
			return Errorf(CodeBadRequest, "debug %q: want 0, 1 or 2", v)
		}
		debug = n
	}
	if debug > 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	if name == "heap" && q.Get("gc") == "1" {
		runtime.GC()
	}
	return p.WriteTo(w, debug)
}

// record writes what start records over ?seconds= (default def, at
// most maxCPUProfileSeconds): a CPU profile, or a Go execution trace
// (`go tool trace` reads it: which goroutine ran when and what woke it,
// the view that attributes an idle peer's wake-ups; docs/BENCHMARKS.md,
// "Idle non-voters, session 10").
func record(w http.ResponseWriter, r *http.Request, def int, what string, start func(io.Writer) error, stop func()) error {
	secs := def
	if v := r.URL.Query().Get("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCPUProfileSeconds {
			return Errorf(CodeBadRequest, "seconds %q: want 1 to %d", v, maxCPUProfileSeconds)
		}
		secs = n
	}
	var buf bytes.Buffer
	if err := start(&buf); err != nil {
		return Errorf(CodeConflict, "%s is already running: %v", what, err)
	}
	select {
	case <-time.After(time.Duration(secs) * time.Second):
	case <-r.Context().Done():
	}
	stop()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, err := w.Write(buf.Bytes())
	return err
}

// fromLoopback reports whether the request's client address is a loopback
// address (127.0.0.0/8 or ::1).
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
