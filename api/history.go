package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// GET /v1/history: each organisation's recent allocated GFLOPS, DP, PI and
// energy accounts, reconstructed from the ledger's task segments, so that
// the dashboard's charts start with the federation's recent past instead
// of empty. Like every /v1 route it needs the API token; it shows nothing
// that /v1/tasks and /v1/ledger do not already show to the same caller.

// Bounds and defaults of GET /v1/history's query.
const (
	DefaultHistoryWindowS = 1200 // 20 minutes, what the page keeps
	MaxHistoryWindowS     = 7 * 24 * 3600
	DefaultHistoryPoints  = 120
	MaxHistoryPoints      = 800 // the page's own series length
)

// HistoryQuery is GET /v1/history?window_s=&points=.
type HistoryQuery struct {
	WindowS int64
	Points  int
}

// HistoryView is the answer: TimesMs are the sample times (unix ms, oldest
// first, the last is now on the answering peer's clock); each series has
// one value per time. DP is null where the quota is 0. The quota and the
// limit are today's (the ledger keeps no history of them), so DP is the
// allocation then against the quota now; Note says so.
type HistoryView struct {
	TimesMs []int64       `json:"times_ms"`
	Orgs    []OrgHistView `json:"orgs"`
	Note    string        `json:"note"`
}

// OrgHistView is one organisation's series.
type OrgHistView struct {
	Name        string     `json:"name"`
	AllocGFLOPS []float64  `json:"allocated_gflops"`
	DP          []*float64 `json:"dp"`
	PIW         []float64  `json:"pi_w"`
	UserJ       []float64  `json:"user_j"`
	OwnerJ      []float64  `json:"owner_j"`
}

// HistoryReader is implemented by a backend that can reconstruct the
// recent past (package node); the server answers 404 for one without it.
type HistoryReader interface {
	History(ctx context.Context, q HistoryQuery) (HistoryView, error)
}

// ParseHistoryQuery reads and checks window_s (1 s to 7 days, default 20
// minutes) and points (2 to 800, default 120).
func ParseHistoryQuery(v url.Values) (HistoryQuery, error) {
	q := HistoryQuery{WindowS: DefaultHistoryWindowS, Points: DefaultHistoryPoints}
	if s := v.Get("window_s"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > MaxHistoryWindowS {
			return q, Errorf(CodeBadRequest, "window_s %q: want whole seconds from 1 to %d", s, MaxHistoryWindowS)
		}
		q.WindowS = n
	}
	if s := v.Get("points"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 || n > MaxHistoryPoints {
			return q, Errorf(CodeBadRequest, "points %q: want 2 to %d", s, MaxHistoryPoints)
		}
		q.Points = n
	}
	return q, nil
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "window_s", "points"); err != nil {
		return err
	}
	q, err := ParseHistoryQuery(r.URL.Query())
	if err != nil {
		return err
	}
	h, ok := s.b.(HistoryReader)
	if !ok {
		return Errorf(CodeNotFound, "this peer does not reconstruct its history")
	}
	v, err := h.History(r.Context(), q)
	if err != nil {
		return err
	}
	v.TimesMs, v.Orgs = nonNil(v.TimesMs), nonNil(v.Orgs)
	writeJSON(w, http.StatusOK, v)
	return nil
}

// History calls GET /v1/history.
func (c *Client) History(ctx context.Context, q HistoryQuery) (HistoryView, error) {
	v := url.Values{}
	if q.WindowS > 0 {
		v.Set("window_s", strconv.FormatInt(q.WindowS, 10))
	}
	if q.Points > 0 {
		v.Set("points", strconv.Itoa(q.Points))
	}
	var out HistoryView
	_, err := c.do(ctx, http.MethodGet, "/v1/history", v, nil, &out, true)
	return out, err
}
