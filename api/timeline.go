package api

import (
	"context"
	"fmt"
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

// TimelineQuery is GET /v1/timeline?window_s=&points=&end_ms=&limit=&after=.
type TimelineQuery struct {
	WindowS int64
	Points  int
	// EndMs is the last sample time (unix ms; 0: now on the answering
	// peer's clock). The pages of one timeline share it, so that their
	// sample times are the same.
	EndMs int64
	// Page selects the organisations as GET /v1/orgs does (registration
	// order, cursor: the last one's name; limit 0: all).
	Page PageQuery
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
// minutes), points (2 to 800, default 120) and end_ms (a positive unix-ms
// time at least window_s after the epoch; default now). The page
// (limit, after) is read by the route, as on the other list routes.
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
	if s := v.Get("end_ms"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < q.WindowS*1000 || n > maxTimelineEndMs {
			return q, Errorf(CodeBadRequest, "end_ms %q: want unix milliseconds from %d (window_s after the epoch) to %d", s, q.WindowS*1000, int64(maxTimelineEndMs))
		}
		q.EndMs = n
	}
	return q, nil
}

// maxTimelineEndMs bounds end_ms (the year 9999), far from overflowing.
const maxTimelineEndMs = 253402300799999

func (s *Server) timeline(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "window_s", "points", "end_ms", "limit", "after"); err != nil {
		return err
	}
	q, err := ParseTimelineQuery(r.URL.Query())
	if err != nil {
		return err
	}
	if q.Page, err = parsePageQuery(r, "window_s", "points", "end_ms"); err != nil {
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
	if v.Orgs, err = pageListed(v.Orgs, timelineOrgKey, q.Page); err != nil {
		return err
	}
	v.TimesMs, v.Orgs = nonNil(v.TimesMs), nonNil(v.Orgs)
	writeJSON(w, http.StatusOK, v)
	return nil
}

func timelineOrgKey(o OrgHistView) string { return o.Name }

// Timeline calls GET /v1/timeline: one page of q.Page.Limit
// organisations, or with no limit every organisation, ClientPageSize at a
// time, all pages with the first one's sample times (end_ms).
func (c *Client) Timeline(ctx context.Context, q TimelineQuery) (TimelineView, error) {
	if q.Page.Limit != 0 {
		return c.TimelinePage(ctx, q)
	}
	q.Page.Limit = ClientPageSize
	var out TimelineView
	for first := true; ; first = false {
		v, version, err := c.timelinePage(ctx, q)
		if first && refusedAsUnpaged(version, err) {
			// A peer of a build before the timeline had pages (it
			// advertises no API version): its answer is whole.
			q.Page = PageQuery{}
			return c.TimelinePage(ctx, q)
		}
		if err != nil {
			return TimelineView{}, err
		}
		if first {
			out.TimesMs, out.Note = v.TimesMs, v.Note
			if len(v.TimesMs) > 0 {
				q.EndMs = v.TimesMs[len(v.TimesMs)-1]
			}
		}
		out.Orgs = append(out.Orgs, v.Orgs...)
		if len(v.Orgs) < q.Page.Limit {
			out.Orgs = nonNil(out.Orgs)
			return out, nil
		}
		next := v.Orgs[len(v.Orgs)-1].Name
		if next == q.Page.After {
			return TimelineView{}, fmt.Errorf("timeline pages: the page after %q ends with it again", next)
		}
		q.Page.After = next
	}
}

// TimelinePage calls GET /v1/timeline for one page.
func (c *Client) TimelinePage(ctx context.Context, q TimelineQuery) (TimelineView, error) {
	v, _, err := c.timelinePage(ctx, q)
	return v, err
}

// timelinePage is TimelinePage with the API version the peer advertised.
func (c *Client) timelinePage(ctx context.Context, q TimelineQuery) (TimelineView, int, error) {
	v := q.Page.values()
	if q.WindowS > 0 {
		v.Set("window_s", strconv.FormatInt(q.WindowS, 10))
	}
	if q.Points > 0 {
		v.Set("points", strconv.Itoa(q.Points))
	}
	if q.EndMs > 0 {
		v.Set("end_ms", strconv.FormatInt(q.EndMs, 10))
	}
	var out TimelineView
	_, version, err := c.exchange(ctx, http.MethodGet, "/v1/timeline", v, nil, &out, true)
	return out, version, err
}
