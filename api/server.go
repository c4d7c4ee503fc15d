package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/coopgrid/coopgrid/api/dashboard"
)

// DefaultAddr is where the API listens unless configured: loopback only,
// so that nothing outside the machine reaches it by accident.
const DefaultAddr = "127.0.0.1:9441"

// TokenFile is the name of the bearer token file in a peer's data
// directory (written by `peer init`, read by the CLI).
const TokenFile = "api.token"

// ServerOptions configures a Server. The zero value serves nothing but
// /healthz: every other request needs Token.
type ServerOptions struct {
	// Token is the bearer token every request but /healthz must carry
	// ("Authorization: Bearer TOKEN"). An empty Token refuses them all.
	Token string
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes);
	// MaxSubmitBytes bounds POST /v1/tasks (default DefaultMaxSubmitBytes).
	// Larger bodies get 413 too_large.
	MaxBodyBytes   int64
	MaxSubmitBytes int64
	// Submit bounds the tasks of one submission and each input file.
	Submit SubmitLimits
	// Logger receives one debug line per request, and errors. Default
	// slog.Default().
	Logger *slog.Logger
	// The watch streams (GET /v1/events, events.go): at most
	// MaxEventStreams at once (default DefaultMaxEventStreams); a client
	// that takes longer than EventWriteTimeout to take one write is
	// dropped (default DefaultEventWriteTimeout); a ping every
	// EventKeepAlive (default DefaultEventKeepAlive).
	MaxEventStreams   int
	EventWriteTimeout time.Duration
	EventKeepAlive    time.Duration
	// Build names the peer's build in GET /v1/status and the
	// coopgrid_build_info metric (default: ReadBuild("", "")).
	Build BuildInfo
	// Collectors are exposed on /metrics beside the server's own metrics
	// (the daemon's latency histograms, node.Node.Collectors).
	Collectors []prometheus.Collector
}

// Server is the peer's HTTP API over a Backend. It is an http.Handler;
// Serve and ListenAndServe run it with graceful shutdown.
type Server struct {
	b         Backend
	opts      ServerOptions
	log       *slog.Logger
	tokenHash [sha256.Size]byte
	mux       *http.ServeMux
	// reg is this server's own registry (never the global one): several
	// servers in one process, as in tests, do not collide.
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	metrics  *metricDescs
	streams  *streamState
}

// NewServer returns the API server for b.
func NewServer(b Backend, opts ServerOptions) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxSubmitBytes <= 0 {
		opts.MaxSubmitBytes = DefaultMaxSubmitBytes
	}
	opts.Submit = opts.Submit.withDefaults()
	if opts.MaxEventStreams <= 0 {
		opts.MaxEventStreams = DefaultMaxEventStreams
	}
	if opts.EventWriteTimeout <= 0 {
		opts.EventWriteTimeout = DefaultEventWriteTimeout
	}
	if opts.EventKeepAlive <= 0 {
		opts.EventKeepAlive = DefaultEventKeepAlive
	}
	if opts.Build.Version == "" {
		opts.Build = ReadBuild(opts.Build.Version, opts.Build.Commit)
	}
	s := &Server{b: b, opts: opts, log: opts.Logger, mux: http.NewServeMux(), reg: prometheus.NewRegistry(), metrics: newMetricDescs(), streams: newStreamState()}
	if s.log == nil {
		s.log = slog.Default()
	}
	// Comparing hashes keeps the comparison constant-time in the token's
	// length too (subtle.ConstantTimeCompare returns early on a length
	// mismatch).
	s.tokenHash = sha256.Sum256([]byte(opts.Token))
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coopgrid_api_requests_total",
		Help: "HTTP API requests served, by route pattern and status code.",
	}, []string{"route", "code"})
	s.reg.MustRegister(s.requests, buildInfoGauge(opts.Build),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range opts.Collectors {
		if err := s.reg.Register(c); err != nil {
			s.log.Error("api: metrics: a collector is not exposed", "err", err)
		}
	}
	s.routes()
	return s
}

// handlerFunc serves one route; a returned error becomes the JSON error
// response (see writeError).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) routes() {
	s.handle("/healthz", map[string]handlerFunc{http.MethodGet: s.healthz})
	s.handle("/metrics", map[string]handlerFunc{http.MethodGet: s.serveMetrics})
	s.handle("/v1/status", map[string]handlerFunc{http.MethodGet: s.status})
	s.handle("/v1/orgs", map[string]handlerFunc{http.MethodGet: s.orgs})
	s.handle("/v1/machines", map[string]handlerFunc{http.MethodGet: s.machines})
	s.handle("/v1/machines/drain", map[string]handlerFunc{http.MethodPost: s.drain})
	s.handle("/v1/machines/reclaim", map[string]handlerFunc{http.MethodPost: s.reclaim})
	s.handle("/v1/tasks", map[string]handlerFunc{http.MethodGet: s.tasks, http.MethodPost: s.submit})
	s.handle("/v1/tasks/{id}", map[string]handlerFunc{http.MethodGet: s.task})
	s.handle("/v1/tasks/{id}/logs", map[string]handlerFunc{http.MethodGet: s.logs})
	s.handle("/v1/tasks/{id}/cancel", map[string]handlerFunc{http.MethodPost: s.cancel})
	s.handle("/v1/tasks/{id}/retry", map[string]handlerFunc{http.MethodPost: s.retry})
	s.handle("/v1/leave", map[string]handlerFunc{http.MethodPost: s.leave})
	s.handle("/v1/limit", map[string]handlerFunc{http.MethodPut: s.setLimit})
	s.handle("/v1/ledger", map[string]handlerFunc{http.MethodGet: s.ledger})
	s.handle("/v1/history", map[string]handlerFunc{http.MethodGet: s.history})
	s.handle("/v1/backup", map[string]handlerFunc{http.MethodPost: s.backup})
	s.handle("/v1/retention", map[string]handlerFunc{http.MethodGet: s.retention, http.MethodPost: s.voteRetention})
	s.handle("/v1/timeline", map[string]handlerFunc{http.MethodGet: s.timeline})
	s.handle("/v1/events", map[string]handlerFunc{http.MethodGet: s.events})
	s.handle("/v1/invitations", map[string]handlerFunc{http.MethodPost: s.invite})
	s.handle("/v1/removals", map[string]handlerFunc{http.MethodPost: s.voteRemoval})
	s.handle("/v1/job-policy", map[string]handlerFunc{http.MethodPost: s.voteJobPolicy})
	s.handle("/v1/members", map[string]handlerFunc{http.MethodGet: s.members})
	s.handle("/v1/members/{id}", map[string]handlerFunc{http.MethodDelete: s.removeMember})
	// Test-only fault injection (api/debug.go): refused unless the peer
	// runs with --fault-injection.
	s.handle("/v1/debug/faults", map[string]handlerFunc{http.MethodGet: s.getFaults, http.MethodPost: s.setFaults})
	// The Go runtime's profiles, for the operator on the peer's host
	// (api/pprof.go).
	s.pprofRoutes()
	// The web dashboard's static files (package dashboard); the mux
	// redirects /ui to /ui/.
	dash := dashboard.Handler()
	s.handle(dashboard.Prefix, map[string]handlerFunc{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
		dash.ServeHTTP(w, r)
		return nil
	}})
	// Everything else: a JSON 404 rather than the mux's plain text, except
	// that a browser opening the peer's address is sent to the dashboard.
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if isDashboardRoot(r) {
			http.Redirect(w, r, dashboard.Prefix, http.StatusFound)
			return
		}
		s.writeError(w, r, Errorf(CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// handle registers path with one handler per method. The methods are
// dispatched here rather than by the mux so that a wrong method gets a
// JSON 405 with an Allow header.
func (s *Server) handle(path string, byMethod map[string]handlerFunc) {
	allowed := make([]string, 0, len(byMethod))
	for m := range byMethod {
		allowed = append(allowed, m)
	}
	slices.Sort(allowed)
	allow := strings.Join(allowed, ", ")
	s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		h, ok := byMethod[r.Method]
		if !ok {
			w.Header().Set("Allow", allow)
			s.writeError(w, r, Errorf(CodeMethodInvalid, "%s %s: allowed: %s", r.Method, r.URL.Path, allow))
			return
		}
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// ServeHTTP logs, authenticates and routes one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Every answer says which API this peer serves (apiversion.go).
	w.Header().Set(APIVersionHeader, strconv.Itoa(APIVersion))
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	_, pattern := s.mux.Handler(r)
	if pattern == "/" || pattern == "" {
		pattern = "other"
	}
	if r.URL.Path != "/healthz" && !isPublicDashboard(r) && !s.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="coopgrid"`)
		s.writeError(rec, r, Errorf(CodeUnauthorized, "missing or wrong bearer token (the token is in the peer's data directory, file %s)", TokenFile))
	} else {
		s.mux.ServeHTTP(rec, r)
	}
	s.requests.WithLabelValues(pattern, strconv.Itoa(rec.status)).Inc()
	s.log.Debug("api request", "method", r.Method, "path", r.URL.Path, "route", pattern,
		"status", rec.status, "bytes", rec.bytes, "remote", r.RemoteAddr, "duration", time.Since(start))
}

// isDashboardRoot is a browser's GET of the peer's address.
func isDashboardRoot(r *http.Request) bool {
	return r.URL.Path == "/" && r.Method == http.MethodGet && dashboard.WantsHTML(r)
}

// isPublicDashboard reports a request for the dashboard's static files,
// served without a token: they hold no data (the page asks for the token
// and every figure it shows comes from the authenticated /v1 routes).
func isPublicDashboard(r *http.Request) bool {
	return r.Method == http.MethodGet && (dashboard.IsPath(r.URL.Path) || isDashboardRoot(r))
}

func (s *Server) authorized(r *http.Request) bool {
	if s.opts.Token == "" {
		return false
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(h[:], s.tokenHash[:]) == 1
}

// statusRecorder remembers the status and size of a response for the log
// and the request counter.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	bytes   int64
	written bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.written {
		r.status, r.written = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.written = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// errorBody is the JSON error envelope.
type errorBody struct {
	Error *Error `json:"error"`
}

// writeError answers with err as a JSON error: an *Error keeps its code
// and status, anything else is a 500 internal (and logged).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		s.log.Error("api: backend error", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
	}
	status := e.Status
	if status == 0 {
		status = StatusOf(e.Code)
	}
	writeJSON(w, status, errorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		// Only a view holding something JSON cannot carry (NaN) gets here.
		status = http.StatusInternalServerError
		buf.Reset()
		fmt.Fprintf(&buf, `{"error":{"code":%q,"message":%q}}`+"\n", CodeInternal, "encode response: "+err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// checkQuery refuses query parameters the route does not know, as unknown
// JSON fields are refused: a misspelt filter must not silently list
// everything.
func checkQuery(r *http.Request, allowed ...string) error {
	for k := range r.URL.Query() {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return Errorf(CodeBadRequest, "unknown query parameter %q: this route takes none", k)
			}
			return Errorf(CodeBadRequest, "unknown query parameter %q (want %s)", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// decodeBody reads a JSON body of at most max bytes into v: unknown fields,
// trailing data and malformed JSON are bad requests, an oversized body is
// too_large. With optional, an empty body leaves v untouched.
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, v any, optional bool) error {
	if r.ContentLength > max {
		return Errorf(CodeTooLarge, "request body of %d bytes: the limit is %d", r.ContentLength, max)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Errorf(CodeTooLarge, "request body larger than %d bytes", max)
		}
		return Errorf(CodeBadRequest, "read request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return Errorf(CodeBadRequest, "empty request body: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeBadRequest, "malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Errorf(CodeBadRequest, "malformed JSON body: trailing data after the object")
	}
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	q, err := parsePageQuery(r)
	if err != nil {
		return err
	}
	st, err := s.b.Status(r.Context())
	if err != nil {
		return err
	}
	// A page of the organisations and their peers (statuspage.go).
	if err := pageStatus(&st, q); err != nil {
		return err
	}
	if st.Peers == nil {
		st.Peers = []PeerView{}
	}
	for i := range st.Peers {
		if st.Peers[i].Addrs == nil {
			st.Peers[i].Addrs = []string{}
		}
	}
	if st.Orgs == nil {
		st.Orgs = []OrgView{}
	}
	build := s.opts.Build
	st.Build = &build
	writeJSON(w, http.StatusOK, st)
	return nil
}

// orgs lists the organisations in registration order, a page at a time
// (page.go).
func (s *Server) orgs(w http.ResponseWriter, r *http.Request) error {
	q, err := parsePageQuery(r)
	if err != nil {
		return err
	}
	os, err := s.b.Orgs(r.Context())
	if err != nil {
		return err
	}
	if os, err = pageListed(os, orgKey, q); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(os))
	return nil
}

// machines lists the machines by ID, a page at a time (page.go).
func (s *Server) machines(w http.ResponseWriter, r *http.Request) error {
	q, err := parsePageQuery(r)
	if err != nil {
		return err
	}
	ms, err := s.b.Machines(r.Context())
	if err != nil {
		return err
	}
	// The backend lists by ID; sorting an already sorted list is linear
	// and keeps the cursor right for one that does not.
	slices.SortStableFunc(ms, func(a, b MachineView) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, nonNil(pageSorted(ms, machineKey, q)))
	return nil
}

// parseTaskQuery reads ?org=&state=&limit=; state may repeat or hold a
// comma-separated list.
func parseTaskQuery(r *http.Request) (TaskQuery, error) {
	if err := checkQuery(r, "org", "job", "state", "limit", "after"); err != nil {
		return TaskQuery{}, err
	}
	v := r.URL.Query()
	q := TaskQuery{Org: v.Get("org"), Job: v.Get("job")}
	for _, s := range v["state"] {
		for _, st := range strings.Split(s, ",") {
			if st = strings.TrimSpace(st); st != "" {
				q.States = append(q.States, st)
			}
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return TaskQuery{}, Errorf(CodeBadRequest, "limit %q: want a whole number", l)
		}
		q.Limit = n
	}
	if a := v.Get("after"); a != "" {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return TaskQuery{}, Errorf(CodeBadRequest, "after %q: want the seq of the previous page's last task", a)
		}
		q.After = n
	}
	return q, ValidateTaskQuery(q)
}

func (s *Server) tasks(w http.ResponseWriter, r *http.Request) error {
	q, err := parseTaskQuery(r)
	if err != nil {
		return err
	}
	ts, err := s.b.Tasks(r.Context(), q)
	if err != nil {
		return err
	}
	// The backend should honour the limit; the API guarantees it anyway.
	if q.Limit > 0 && len(ts) > q.Limit {
		ts = ts[:q.Limit]
	}
	writeJSON(w, http.StatusOK, nonNil(ts))
	return nil
}

// taskID reads and checks the {id} of the path.
func taskID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !ValidTaskID(id) {
		return "", Errorf(CodeBadRequest, "task ID %q: want <org>-<n>", id)
	}
	return id, nil
}

func (s *Server) task(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	id, err := taskID(r)
	if err != nil {
		return err
	}
	t, err := s.b.Task(r.Context(), id)
	if err != nil {
		return err
	}
	if t.Argv == nil {
		t.Argv = []string{}
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// Log streams a task may have.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

func (s *Server) logs(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "stream"); err != nil {
		return err
	}
	id, err := taskID(r)
	if err != nil {
		return err
	}
	stream := r.URL.Query().Get("stream")
	switch stream {
	case "":
		stream = StreamStdout
	case StreamStdout, StreamStderr:
	default:
		return Errorf(CodeBadRequest, "stream %q: want stdout or stderr", stream)
	}
	data, err := s.b.Logs(r.Context(), id, stream)
	if err != nil {
		return err
	}
	// Output is whatever the task wrote: bytes, not necessarily text.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req SubmitRequest
	if err := decodeBody(w, r, s.opts.MaxSubmitBytes, &req, false); err != nil {
		return err
	}
	if err := ResolveBlobs(&req); err != nil {
		return err
	}
	if err := ValidateSubmit(req, s.opts.Submit); err != nil {
		return err
	}
	resp, err := s.b.Submit(r.Context(), req)
	if err != nil {
		return err
	}
	if len(resp.TaskIDs) != len(req.Tasks) {
		return fmt.Errorf("submit: the backend returned %d task IDs for %d tasks", len(resp.TaskIDs), len(req.Tasks))
	}
	if resp.RequestID == "" {
		resp.RequestID = req.RequestID
	}
	// 201: queued now; 200: an earlier copy of the request had queued them.
	status := http.StatusCreated
	if resp.Replayed {
		status = http.StatusOK
	}
	writeJSON(w, status, resp)
	return nil
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	return s.taskAction(w, r, s.b.Cancel)
}

func (s *Server) retry(w http.ResponseWriter, r *http.Request) error {
	return s.taskAction(w, r, s.b.Retry)
}

// taskAction serves a POST /v1/tasks/{id}/ACTION: no query, an empty JSON
// body, then act on the task; 204 when done.
func (s *Server) taskAction(w http.ResponseWriter, r *http.Request, act func(context.Context, string) error) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	id, err := taskID(r)
	if err != nil {
		return err
	}
	var none struct{}
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &none, true); err != nil {
		return err
	}
	if err := act(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) leave(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var none struct{}
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &none, true); err != nil {
		return err
	}
	if err := s.b.Leave(r.Context()); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setLimit(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req LimitRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if err := ValidateLimit(req); err != nil {
		return err
	}
	o, err := s.b.SetLimit(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, o)
	return nil
}

func (s *Server) ledger(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	l, err := s.b.Ledger(r.Context())
	if err != nil {
		return err
	}
	if l.Orgs == nil {
		l.Orgs = []LedgerAccount{}
	}
	writeJSON(w, http.StatusOK, l)
	return nil
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Listen opens the API's TCP listener on addr (DefaultAddr when empty).
// It warns when addr is not a loopback address: the token is then the
// only protection, and it travels in clear text.
func (s *Server) Listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", addr, err)
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		s.log.Warn("api: listening on a non-loopback address; requests and the token travel unencrypted", "addr", ln.Addr().String())
	}
	return ln, nil
}

// shutdownGrace bounds how long Serve waits for requests in flight once
// its context is done.
const shutdownGrace = 5 * time.Second

// Serve serves the API on ln until ctx is done, then shuts down
// gracefully: it stops accepting, lets requests in flight finish (for at
// most 5 s) and returns nil. Any other failure is returned. Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// A submission of 64 MiB on a slow link still fits.
		ReadTimeout: 5 * time.Minute,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	// The watch streams end now, with an end event: the graceful
	// shutdown would wait for them.
	s.streams.stop()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("api: shut down: %w", err)
	}
	return nil
}

// ListenAndServe is Listen then Serve.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := s.Listen(addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}
