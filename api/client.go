package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// CodeUnreachable is set by Client, never sent by a server: the request
// did not get an HTTP answer (connection refused, DNS, reset, timeout).
const CodeUnreachable = "unreachable"

// DefaultMaxResponseBytes bounds what the client reads of one answer: a
// listing of a job's 100,000 tasks or a large log fits.
const DefaultMaxResponseBytes = 512 << 20

// Defaults of Client's resends of a submission whose outcome it did not
// learn: 4 attempts, 250 ms before the second, doubling (about 1.75 s of
// pauses in all).
const (
	DefaultSubmitAttempts = 4
	DefaultSubmitBackoff  = 250 * time.Millisecond
)

// Client calls a peer's API. Its methods mirror Backend (a *Client is a
// Backend, for proxies and tests) and return either the view or an *Error
// whose Code is the server's, or CodeUnreachable when no answer came.
type Client struct {
	base    *url.URL
	baseErr error
	token   string
	hc      *http.Client
	// MaxResponseBytes bounds the body read from one answer; 0 means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// SubmitAttempts is how many times Submit sends one submission while
	// its outcome stays unknown (no answer, 503 unavailable, 500
	// internal), always with the same request ID so that the ledger
	// queues it at most once; 0 means DefaultSubmitAttempts, 1 sends once.
	SubmitAttempts int
	// SubmitBackoff is the pause before the first resend, doubled before
	// each next one; 0 means DefaultSubmitBackoff.
	SubmitBackoff time.Duration
	// StreamIdleTimeout is how long Events waits without a byte before it
	// takes the peer for lost; 0 means DefaultStreamIdleTimeout.
	StreamIdleTimeout time.Duration
}

var _ Backend = (*Client)(nil)

// NewClient returns a client of the API at baseURL ("http://127.0.0.1:9441";
// a bare "host:port" is taken as http). A nil httpClient means a client
// without timeout: bound calls with their context. A baseURL that
// ParseBaseURL refuses makes every call fail with that error (check it
// first with ParseBaseURL to report it early).
func NewClient(baseURL, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	c := &Client{token: token, hc: httpClient}
	c.base, c.baseErr = parseBaseURL(baseURL)
	return c
}

// ParseBaseURL checks and normalises an API address: "host:port" or an
// http(s) URL, without query or fragment.
func ParseBaseURL(s string) (string, error) {
	u, err := parseBaseURL(s)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

func parseBaseURL(s string) (*url.URL, error) {
	raw := s
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("API address %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("API address %q: want host:port or an http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("API address %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("API address %q: want no user, query or fragment", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// BaseURL is the API's address as the client uses it.
func (c *Client) BaseURL() string {
	if c.base == nil {
		return ""
	}
	return c.base.String()
}

// encodedJSON is a request body already encoded as JSON.
type encodedJSON []byte

// do sends one request and reads the answer. in (if not nil) is sent as
// JSON (an encodedJSON as it is); a 2xx answer's body is decoded into out when out is a pointer, or
// returned raw when out is nil. Any other answer becomes an *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in any, out any, auth bool) ([]byte, error) {
	data, _, err := c.exchange(ctx, method, path, query, in, out, auth)
	return data, err
}

// exchange is do that also returns the API version the answer advertised
// (peerAPIVersion; 0 when no answer came), error answers included.
func (c *Client) exchange(ctx context.Context, method, path string, query url.Values, in any, out any, auth bool) ([]byte, int, error) {
	if c.baseErr != nil {
		return nil, 0, &Error{Code: CodeBadRequest, Message: c.baseErr.Error()}
	}
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var body io.Reader
	if b, ok := in.(encodedJSON); ok {
		body = bytes.NewReader(b)
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, 0, fmt.Errorf("encode %s %s request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// The caller's own cancellation is not the server's fault.
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, 0, &Error{Code: CodeUnreachable, Message: fmt.Sprintf("cannot reach the peer's API at %s: %v", c.BaseURL(), err)}
	}
	defer resp.Body.Close()
	version := peerAPIVersion(resp.Header)
	max := c.MaxResponseBytes
	if max <= 0 {
		max = DefaultMaxResponseBytes
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, version, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		return nil, version, &Error{Code: CodeUnreachable, Message: fmt.Sprintf("reading the answer of %s %s from %s: %v", method, path, c.BaseURL(), err)}
	}
	if int64(len(data)) > max {
		return nil, version, fmt.Errorf("%s %s: answer larger than %d bytes", method, path, max)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, version, decodeError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, version, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return data, version, nil
}

// decodeError reads an error answer. A body that is not the API's JSON
// error (a proxy, another program on the port) still gives an *Error with
// the code that belongs to the status.
func decodeError(status int, data []byte) *Error {
	var eb errorBody
	if err := json.Unmarshal(data, &eb); err == nil && eb.Error != nil && eb.Error.Code != "" {
		eb.Error.Status = status
		return eb.Error
	}
	code := CodeInternal
	for _, c := range []string{CodeBadRequest, CodeUnauthorized, CodeForbidden, CodeNotFound, CodeConflict, CodeTooLarge, CodeUnavailable, CodeMethodInvalid} {
		if StatusOf(c) == status {
			code = c
		}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Code: code, Message: fmt.Sprintf("HTTP %d: %s", status, msg)}
}

// Health calls GET /healthz (no token).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil, false)
	return err
}

// Tasks calls GET /v1/tasks with the query's filters: one page of
// q.Limit tasks, or with no limit every task, ClientPageSize at a time
// (page.go).
func (c *Client) Tasks(ctx context.Context, q TaskQuery) ([]TaskView, error) {
	if q.Limit != 0 {
		return c.TasksPage(ctx, q)
	}
	var out []TaskView
	q.Limit = ClientPageSize
	for {
		p, err := c.TasksPage(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
		if len(p) < q.Limit {
			return out, nil
		}
		if p[len(p)-1].Seq <= q.After {
			return nil, fmt.Errorf("GET /v1/tasks: the page after seq %d does not move on", q.After)
		}
		q.After = p[len(p)-1].Seq
	}
}

// TasksPage calls GET /v1/tasks for one page: at most q.Limit tasks (0:
// all) after the one whose Seq is q.After.
func (c *Client) TasksPage(ctx context.Context, q TaskQuery) ([]TaskView, error) {
	v := url.Values{}
	if q.Org != "" {
		v.Set("org", q.Org)
	}
	if q.Job != "" {
		v.Set("job", q.Job)
	}
	for _, s := range q.States {
		v.Add("state", s)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != 0 {
		v.Set("after", strconv.FormatUint(q.After, 10))
	}
	var ts []TaskView
	_, err := c.do(ctx, http.MethodGet, "/v1/tasks", v, nil, &ts, true)
	return ts, err
}

// Task calls GET /v1/tasks/{id}.
func (c *Client) Task(ctx context.Context, id string) (TaskDetail, error) {
	var t TaskDetail
	_, err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil, nil, &t, true)
	return t, err
}

// NewRequestID returns a fresh random request ID (32 hex digits) for
// SubmitRequest.RequestID.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// Submit calls POST /v1/tasks, each distinct input content sent once
// (PackBlobs). A request without a RequestID gets a fresh one
// (NewRequestID). While the outcome stays unknown — no answer, 503
// unavailable, 500 internal — Submit resends the same request, same
// RequestID, up to SubmitAttempts times with a doubling pause: the ledger
// queues it at most once, and a resend of a submission that was queued
// answers with its original task IDs (SubmitResponse.Replayed). If the
// last attempt is unanswered too, the error names the request ID, so the
// caller can resend later with it.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResponse, error) {
	if req.RequestID == "" {
		req.RequestID = NewRequestID()
	}
	// Encoded once: every resend sends the same bytes.
	body, err := json.Marshal(PackBlobs(req))
	if err != nil {
		return SubmitResponse{}, fmt.Errorf("encode POST /v1/tasks request: %w", err)
	}
	attempts := c.SubmitAttempts
	if attempts <= 0 {
		attempts = DefaultSubmitAttempts
	}
	pause := c.SubmitBackoff
	if pause <= 0 {
		pause = DefaultSubmitBackoff
	}
	var (
		sent int
		last error // the last attempt's error, which the caller gets
	)
	r, err := backoff.Retry(ctx, func() (SubmitResponse, error) {
		sent++
		var r SubmitResponse
		_, last = c.do(ctx, http.MethodPost, "/v1/tasks", nil, encodedJSON(body), &r, true)
		if last != nil && ctx.Err() == nil && !OutcomeUnknown(last) {
			return r, backoff.Permanent(last)
		}
		return r, last
	}, backoff.WithBackOff(doubling(pause)), backoff.WithMaxTries(uint(attempts)), backoff.WithMaxElapsedTime(0))
	switch {
	case err == nil:
		if r.RequestID == "" {
			r.RequestID = req.RequestID
		}
		return r, nil
	case ctx.Err() != nil || OutcomeUnknown(last):
		// Unanswered, or given up mid-request: the outcome is unknown.
		return SubmitResponse{}, withRequestID(last, req.RequestID, sent)
	}
	return SubmitResponse{}, last
}

// doubling waits first, then twice as long before each next attempt,
// without bound or jitter.
func doubling(first time.Duration) backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval: first,
		Multiplier:      2,
		MaxInterval:     time.Duration(math.MaxInt64),
	}
}

// OutcomeUnknown says whether err leaves a write's outcome unknown: no
// answer (CodeUnreachable), 503 unavailable (no leader, or a proposal the
// peer gave up on), 500 internal. Resending a submission with the same
// request ID is then safe.
func OutcomeUnknown(err error) bool {
	switch CodeOf(err) {
	case CodeUnreachable, CodeUnavailable, CodeInternal:
		return true
	}
	return false
}

// withRequestID adds to an unanswered submission's error how to resend it.
func withRequestID(err error, id string, attempts int) error {
	hint := fmt.Sprintf(" (no answer after %d attempts; request ID %s)", attempts, id)
	var e *Error
	if errors.As(err, &e) {
		c := *e
		c.Message += hint
		return &c
	}
	return fmt.Errorf("%w%s", err, hint)
}

// Cancel calls POST /v1/tasks/{id}/cancel.
func (c *Client) Cancel(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/cancel", nil, nil, nil, true)
	return err
}

// Retry calls POST /v1/tasks/{id}/retry.
func (c *Client) Retry(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/retry", nil, nil, nil, true)
	return err
}

// Logs calls GET /v1/tasks/{id}/logs?stream=; stream is "stdout" or
// "stderr" ("" means stdout).
func (c *Client) Logs(ctx context.Context, id, stream string) ([]byte, error) {
	v := url.Values{}
	if stream != "" {
		v.Set("stream", stream)
	}
	return c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id)+"/logs", v, nil, nil, true)
}

// SetLimit calls PUT /v1/limit.
func (c *Client) SetLimit(ctx context.Context, req LimitRequest) (OrgView, error) {
	var o OrgView
	_, err := c.do(ctx, http.MethodPut, "/v1/limit", nil, req, &o, true)
	return o, err
}

// Ledger calls GET /v1/ledger.
func (c *Client) Ledger(ctx context.Context) (LedgerView, error) {
	var l LedgerView
	_, err := c.do(ctx, http.MethodGet, "/v1/ledger", nil, nil, &l, true)
	return l, err
}

// Leave calls POST /v1/leave.
func (c *Client) Leave(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/leave", nil, nil, nil, true)
	return err
}

// Scrape calls GET /metrics and returns the Prometheus text exposition.
func (c *Client) Scrape(ctx context.Context) ([]byte, error) {
	return c.do(ctx, http.MethodGet, "/metrics", nil, nil, nil, true)
}

// CodeOf returns the Code of err if it is (or wraps) an *Error, else "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
