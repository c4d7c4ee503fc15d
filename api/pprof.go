package api

import (
	"net"
	"net/http"
	"net/http/pprof"
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

func (s *Server) pprofRoutes() {
	loopbackOnly := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !fromLoopback(r) {
				s.writeError(w, r, Errorf(CodeForbidden, "%s is served to a client on the peer's own host only (loopback), not to %s", PprofPrefix, r.RemoteAddr))
				return
			}
			h(w, r)
		}
	}
	// pprof.Index serves the named profiles (heap, goroutine, allocs, …)
	// under the prefix; the other four are functions of their own.
	s.mux.HandleFunc(PprofPrefix, loopbackOnly(pprof.Index))
	s.mux.HandleFunc(PprofPrefix+"cmdline", loopbackOnly(pprof.Cmdline))
	s.mux.HandleFunc(PprofPrefix+"profile", loopbackOnly(pprof.Profile))
	s.mux.HandleFunc(PprofPrefix+"symbol", loopbackOnly(pprof.Symbol))
	s.mux.HandleFunc(PprofPrefix+"trace", loopbackOnly(pprof.Trace))
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
