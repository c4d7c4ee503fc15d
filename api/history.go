package api

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The history of finished tasks (issue 17, docs/HISTORY.md): tasks the
// federation's retention rule took out of the replicated state, as this
// peer's history store keeps them. GET /v1/history lists them with
// filters, one page at a time; `peer history` prints it.
//
// Who may read whose history: a peer serves only its own organisation's
// forgotten tasks, to the holder of its API token, like everything else it
// serves. A query naming another organisation is refused (403 forbidden):
// ask that organisation's peer. (Every peer keeps every organisation's
// records, so that a member that installed a snapshot can fetch the ones
// it skipped: docs/HISTORY.md.)

// History bounds.
const (
	// DefaultHistoryLimit is the page size when the query names none;
	// MaxHistoryLimit the largest page.
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 10_000
)

// HistoryBackend is the part of a Backend that serves the history; a
// Backend without it answers GET /v1/history with not_found.
type HistoryBackend interface {
	History(ctx context.Context, q HistoryQuery) (HistoryPage, error)
}

// HistoryQuery is GET /v1/history's query.
type HistoryQuery struct {
	// Org defaults to the answering peer's organisation; another is
	// refused (forbidden).
	Org    string   `json:"org,omitempty"`
	Job    string   `json:"job,omitempty"`
	States []string `json:"states,omitempty"`
	// FromMs and ToMs bound when the task ended (Unix ms, inclusive; 0:
	// unbounded).
	FromMs int64 `json:"from_ms,omitempty"`
	ToMs   int64 `json:"to_ms,omitempty"`
	// After is the cursor: the Next of the previous page (0: the start).
	After uint64 `json:"after,omitempty"`
	// Limit is the page size (0: DefaultHistoryLimit).
	Limit int `json:"limit,omitempty"`
}

// HistoryRecord is one forgotten task: its full record as the ledger held
// it when it left, and the log index of the forget_tasks that removed it.
type HistoryRecord struct {
	TaskDetail
	ForgottenIndex uint64 `json:"forgotten_index"`
}

// HistoryPage is GET /v1/history's answer: records in submit order, and
// the cursor of the next page (0 when this is the last).
type HistoryPage struct {
	Records []HistoryRecord `json:"records"`
	Next    uint64          `json:"next,omitempty"`
}

var terminalStates = []string{"done", "failed", "cancelled"}

// ValidateHistoryQuery checks a query's shape (the org's permission is
// the backend's: only it knows its organisation).
func ValidateHistoryQuery(q HistoryQuery) error {
	if err := ValidateTaskQuery(TaskQuery{Org: q.Org, Job: q.Job}); err != nil {
		return err
	}
	for _, s := range q.States {
		if !slices.Contains(terminalStates, s) {
			return Errorf(CodeBadRequest, "state %q: the history holds finished tasks only: want one of %s", s, strings.Join(terminalStates, ", "))
		}
	}
	if q.FromMs < 0 || q.ToMs < 0 || (q.ToMs != 0 && q.ToMs < q.FromMs) {
		return Errorf(CodeBadRequest, "time range from %d ms to %d ms: want 0 ≤ from ≤ to", q.FromMs, q.ToMs)
	}
	if q.Limit < 0 || q.Limit > MaxHistoryLimit {
		return Errorf(CodeBadRequest, "limit %d: want 1 to %d (0: %d)", q.Limit, MaxHistoryLimit, DefaultHistoryLimit)
	}
	return nil
}

func parseHistoryQuery(r *http.Request) (HistoryQuery, error) {
	if err := checkQuery(r, "org", "job", "state", "from_ms", "to_ms", "after", "limit"); err != nil {
		return HistoryQuery{}, err
	}
	v := r.URL.Query()
	q := HistoryQuery{Org: v.Get("org"), Job: v.Get("job"), States: SplitList(v["state"])}
	for _, f := range []struct {
		name string
		to   *int64
	}{{"from_ms", &q.FromMs}, {"to_ms", &q.ToMs}} {
		if s := v.Get(f.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return HistoryQuery{}, Errorf(CodeBadRequest, "%s %q: want Unix milliseconds", f.name, s)
			}
			*f.to = n
		}
	}
	if s := v.Get("after"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return HistoryQuery{}, Errorf(CodeBadRequest, "after %q: want the next cursor of the previous page", s)
		}
		q.After = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return HistoryQuery{}, Errorf(CodeBadRequest, "limit %q: want a whole number", s)
		}
		q.Limit = n
	}
	return q, ValidateHistoryQuery(q)
}

// SplitList splits comma-separated values (repeated or not) into their
// non-empty, trimmed items: how the API and the CLI read a list filter.
func SplitList(vs []string) []string {
	var out []string
	for _, s := range vs {
		for _, st := range strings.Split(s, ",") {
			if st = strings.TrimSpace(st); st != "" {
				out = append(out, st)
			}
		}
	}
	return out
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) error {
	q, err := parseHistoryQuery(r)
	if err != nil {
		return err
	}
	hb, ok := s.b.(HistoryBackend)
	if !ok {
		return Errorf(CodeNotFound, "this peer keeps no history of finished tasks")
	}
	if q.Limit == 0 {
		q.Limit = DefaultHistoryLimit
	}
	p, err := hb.History(r.Context(), q)
	if err != nil {
		return err
	}
	if p.Records == nil {
		p.Records = []HistoryRecord{}
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// History calls GET /v1/history: one page.
func (c *Client) History(ctx context.Context, q HistoryQuery) (HistoryPage, error) {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" && s != "0" {
			v.Set(k, s)
		}
	}
	set("org", q.Org)
	set("job", q.Job)
	for _, s := range q.States {
		v.Add("state", s)
	}
	set("from_ms", strconv.FormatInt(q.FromMs, 10))
	set("to_ms", strconv.FormatInt(q.ToMs, 10))
	set("after", strconv.FormatUint(q.After, 10))
	set("limit", strconv.Itoa(q.Limit))
	var p HistoryPage
	_, err := c.do(ctx, http.MethodGet, "/v1/history", v, nil, &p, true)
	return p, err
}
