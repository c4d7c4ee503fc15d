package api_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
	"github.com/coopgrid/coopgrid/ledger"
)

// scrapeMetrics fetches /metrics and parses it with Prometheus' own text
// parser, keyed "name{label=value,…}" (labels sorted).
func scrapeMetrics(t *testing.T, c *api.Client) (map[string]float64, map[string]dto.MetricType) {
	t.Helper()
	data, err := c.Scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, data)
	}
	vals := map[string]float64{}
	types := map[string]dto.MetricType{}
	for name, f := range fams {
		types[name] = f.GetType()
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			key := name
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				vals[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				vals[key] = m.GetGauge().GetValue()
			default:
				vals[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return vals, types
}

func TestMetrics(t *testing.T) {
	b, srv := serve(t, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, srv.Client())
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	vals, types := scrapeMetrics(t, c)
	want := map[string]float64{
		"coopgrid_up":                                            1,
		"coopgrid_org_queue_length{org=alpha}":                   1,
		"coopgrid_org_queue_length{org=beta}":                    0,
		"coopgrid_org_tasks{org=alpha,state=queued}":             1,
		"coopgrid_org_tasks{org=alpha,state=running}":            1,
		"coopgrid_org_tasks{org=alpha,state=done}":               1,
		"coopgrid_org_tasks{org=beta,state=running}":             1,
		"coopgrid_org_tasks{org=beta,state=failed}":              0,
		"coopgrid_org_pi_watts{org=alpha}":                       300,
		"coopgrid_org_pi_watts{org=beta}":                        200,
		"coopgrid_org_limit_watts{org=alpha}":                    800,
		"coopgrid_org_limit_watts{org=beta}":                     1000,
		"coopgrid_org_power_quota_watts{org=alpha}":              500,
		"coopgrid_org_quota_gflops{org=beta}":                    40,
		"coopgrid_org_allocated_gflops{org=alpha}":               20,
		"coopgrid_org_allocated_gflops{org=beta}":                10,
		"coopgrid_org_dp{org=alpha}":                             -1.0 / 3,
		"coopgrid_org_dp{org=beta}":                              -0.75,
		"coopgrid_org_energy_joules_total{org=alpha,role=user}":  12.345,
		"coopgrid_org_energy_joules_total{org=alpha,role=owner}": 0,
		"coopgrid_org_energy_joules_total{org=beta,role=user}":   0,
		"coopgrid_org_energy_joules_total{org=beta,role=owner}":  12.345,
		"coopgrid_raft_state{state=Leader}":                      1,
		"coopgrid_raft_state{state=Follower}":                    0,
		"coopgrid_raft_state{state=Candidate}":                   0,
		"coopgrid_raft_applied_index":                            8,
		"coopgrid_peers{voter=true}":                             2,
		"coopgrid_peers{voter=false}":                            0,
		"coopgrid_machines{org=alpha,state=up}":                  2,
		"coopgrid_machines{org=beta,state=up}":                   1,
		"coopgrid_decisions_total{result=accepted}":              3,
		"coopgrid_decisions_total{result=rejected}":              1,
		"coopgrid_scheduling_passes_total":                       1,
		"coopgrid_scheduling_pass_errors_total":                  0,
		"coopgrid_decisions_proposed_total":                      4,
		"coopgrid_api_requests_total{code=200,route=/v1/status}": 1,
	}
	for k, w := range want {
		g, ok := vals[k]
		if !ok {
			t.Errorf("missing %s", k)
		} else if math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
	for name, typ := range map[string]dto.MetricType{
		"coopgrid_org_energy_joules_total": dto.MetricType_COUNTER,
		"coopgrid_decisions_total":         dto.MetricType_COUNTER,
		"coopgrid_api_requests_total":      dto.MetricType_COUNTER,
		"coopgrid_org_pi_watts":            dto.MetricType_GAUGE,
		"coopgrid_raft_applied_index":      dto.MetricType_GAUGE,
	} {
		if types[name] != typ {
			t.Errorf("%s is %v, want %v", name, types[name], typ)
		}
	}

	// The gauges follow the state: computed at scrape time, not cached.
	if err := c.Cancel(context.Background(), "alpha-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Apply(ledger.Command{Org: "beta", Peer: apitest.PeerBeta, MachineLost: &ledger.MachineLostCmd{Machine: "beta/b1"}}); err != nil {
		t.Fatal(err)
	}
	vals, _ = scrapeMetrics(t, c)
	for k, w := range map[string]float64{
		"coopgrid_org_queue_length{org=alpha}":          0,
		"coopgrid_org_tasks{org=alpha,state=cancelled}": 1,
		"coopgrid_machines{org=beta,state=lost}":        1,
		"coopgrid_org_quota_gflops{org=beta}":           0,
		"coopgrid_raft_applied_index":                   10,
		// Two scrapes so far; the first one counts once it is over.
		"coopgrid_api_requests_total{code=200,route=/metrics}":              1,
		"coopgrid_api_requests_total{code=204,route=/v1/tasks/{id}/cancel}": 1,
	} {
		if g, ok := vals[k]; !ok || g != w {
			t.Errorf("after changes: %s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	// Beta's quota is 0 now: DP is undefined and its series is absent.
	if _, ok := vals["coopgrid_org_dp{org=beta}"]; ok {
		t.Error("coopgrid_org_dp{org=beta} exposed with a zero quota")
	}
}

// hidden exposes only api.Backend, hiding the MetricsSource of the
// ledger-backed backend.
type hidden struct{ api.Backend }

func TestMetricsOptionalSource(t *testing.T) {
	b, _ := apitest.NewSeeded(nil)
	srv := serveBackend(t, hidden{b}, api.ServerOptions{})
	vals, _ := scrapeMetrics(t, api.NewClient(srv.URL, token, srv.Client()))
	if _, ok := vals["coopgrid_decisions_total{result=accepted}"]; ok {
		t.Error("decisions exposed without a MetricsSource")
	}
	if vals["coopgrid_org_pi_watts{org=alpha}"] != 300 {
		t.Error("org gauges missing without a MetricsSource")
	}
}

func TestMetricsBackendDown(t *testing.T) {
	b, _ := apitest.NewSeeded(nil)
	srv := serveBackend(t, failing{b, errors.New("no ledger")}, api.ServerOptions{})
	vals, _ := scrapeMetrics(t, api.NewClient(srv.URL, token, srv.Client()))
	if v, ok := vals["coopgrid_up"]; !ok || v != 0 {
		t.Errorf("coopgrid_up = %v (present %v), want 0", v, ok)
	}
	for k := range vals {
		if strings.HasPrefix(k, "coopgrid_org_") || strings.HasPrefix(k, "coopgrid_raft_") {
			t.Errorf("%s exposed although the status failed", k)
		}
	}
}

// TestMetricsPerServerRegistry: two servers in one process keep separate
// request counters (a global registry would panic or mix them).
func TestMetricsPerServerRegistry(t *testing.T) {
	_, s1 := serve(t, api.ServerOptions{})
	_, s2 := serve(t, api.ServerOptions{})
	c1, c2 := api.NewClient(s1.URL, token, nil), api.NewClient(s2.URL, token, nil)
	for range 3 {
		if _, err := c1.Orgs(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	v1, _ := scrapeMetrics(t, c1)
	v2, _ := scrapeMetrics(t, c2)
	if v1["coopgrid_api_requests_total{code=200,route=/v1/orgs}"] != 3 {
		t.Errorf("server 1 counted %v orgs requests", v1["coopgrid_api_requests_total{code=200,route=/v1/orgs}"])
	}
	if _, ok := v2["coopgrid_api_requests_total{code=200,route=/v1/orgs}"]; ok {
		t.Error("server 2 counted server 1's requests")
	}
}
