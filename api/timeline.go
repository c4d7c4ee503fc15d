package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// GET /v1/timeline: each organisation's recent allocated GFLOPS, DP, PI and
// energy accounts, reconstructed from the ledger's task segments, so that
// the dashboard's charts start with the federation's recent past instead
// of empty. Like every /v1 route it needs the API token; it shows nothing
// that /v1/tasks and /v1/ledger do not already show to the same caller.

// Bounds and defaults of GET /v1/timeline's query.
const (
	DefaultTimelineWindowS = 1200 // 20 minutes, what the page keeps
	MaxTimelineWindowS     = 7 * 24 * 3600
	DefaultTimelinePoints  = 120
	MaxTimelinePoints      = 800 // the page's own series length
)

// TimelineQuery is GET /v1/timeline?window_s=&points=.
type TimelineQuery struct {
	WindowS int64
	Points  int
}

// TimelineView is the answer: TimesMs are the sample times (unix ms, oldest
// first, the last is now on the answering peer's clock); each series has
// one value per time. DP is null where the quota is 0. The quota and the
// limit are today's (the ledger keeps no history of them), so DP is the
// allocation then against the quota now; Note says so.
type TimelineView struct {
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

// TimelineReader is implemented by a backend that can reconstruct the
// recent past (package node); the server answers 404 for one without it.
type TimelineReader interface {
	Timeline(ctx context.Context, q TimelineQuery) (TimelineView, error)
}

// ParseTimelineQuery reads and checks window_s (1 s to 7 days, default 20
// minutes) and points (2 to 800, default 120).
func ParseTimelineQuery(v url.Values) (TimelineQuery, error) {
	q := TimelineQuery{WindowS: DefaultTimelineWindowS, Points: DefaultTimelinePoints}
	if s := v.Get("window_s"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > MaxTimelineWindowS {
			return q, Errorf(CodeBadRequest, "window_s %q: want whole seconds from 1 to %d", s, MaxTimelineWindowS)
		}
		q.WindowS = n
	}
	if s := v.Get("points"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 || n > MaxTimelinePoints {
			return q, Errorf(CodeBadRequest, "points %q: want 2 to %d", s, MaxTimelinePoints)
		}
		q.Points = n
	}
	return q, nil
}

func (s *Server) timeline(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "window_s", "points"); err != nil {
		return err
	}
	q, err := ParseTimelineQuery(r.URL.Query())
	if err != nil {
		return err
	}
	h, ok := s.b.(TimelineReader)
	if !ok {
		return Errorf(CodeNotFound, "this peer does not reconstruct its history")
	}
	v, err := h.Timeline(r.Context(), q)
	if err != nil {
		return err
	}
	v.TimesMs, v.Orgs = nonNil(v.TimesMs), nonNil(v.Orgs)
	writeJSON(w, http.StatusOK, v)
	return nil
}

// Timeline calls GET /v1/timeline.
func (c *Client) Timeline(ctx context.Context, q TimelineQuery) (TimelineView, error) {
	v := url.Values{}
	if q.WindowS > 0 {
		v.Set("window_s", strconv.FormatInt(q.WindowS, 10))
	}
	if q.Points > 0 {
		v.Set("points", strconv.Itoa(q.Points))
	}
	var out TimelineView
	_, err := c.do(ctx, http.MethodGet, "/v1/timeline", v, nil, &out, true)
	return out, err
}
