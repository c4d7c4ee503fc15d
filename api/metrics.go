package api

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsSource is an optional interface of a Backend that counts its
// scheduling work; when the Backend implements it, /metrics exposes the
// counters (rate() over coopgrid_decisions_total is decisions per second).
type MetricsSource interface {
	Metrics(ctx context.Context) (NodeMetrics, error)
}

// NodeMetrics are a daemon's scheduling counters since it started, as
// leader.SchedulerStats counts them. They only grow.
type NodeMetrics struct {
	// SchedulingPasses counts the policy passes this peer ran as leader;
	// PassErrors those whose log entry failed to commit.
	SchedulingPasses uint64 `json:"scheduling_passes"`
	PassErrors       uint64 `json:"pass_errors"`
	// DecisionsProposed counts the decisions of those passes committed to
	// the log; DecisionsAccepted and DecisionsRejected how the ledger took
	// them (a decision made on a view that no longer holds is rejected).
	DecisionsProposed uint64 `json:"decisions_proposed"`
	DecisionsAccepted uint64 `json:"decisions_accepted"`
	DecisionsRejected uint64 `json:"decisions_rejected"`
}

// raftStates are the states hashicorp/raft reports; coopgrid_raft_state is
// 1 for the current one and 0 for the others, so that a dashboard can
// count leaders across peers.
var raftStates = []string{"Follower", "Candidate", "Leader", "Shutdown"}

// metricDescs are the descriptions of the gauges computed at scrape time.
type metricDescs struct {
	up, queue, tasks, pi, limit, powerQuota, quota, alloc, dp, energy *prometheus.Desc
	raftState, applied, peers, machines, decisions, proposed, passes  *prometheus.Desc
	passErrors                                                        *prometheus.Desc
}

func newMetricDescs() *metricDescs {
	org := []string{"org"}
	return &metricDescs{
		up:         prometheus.NewDesc("coopgrid_up", "1 when the peer answered the scrape's status query, else 0 (and no other coopgrid gauge is exposed).", nil, nil),
		queue:      prometheus.NewDesc("coopgrid_org_queue_length", "Tasks of the organisation waiting in the queue.", org, nil),
		tasks:      prometheus.NewDesc("coopgrid_org_tasks", "Tasks of the organisation by state (running counts assigned and running).", []string{"org", "state"}, nil),
		pi:         prometheus.NewDesc("coopgrid_org_pi_watts", "PI_i: busy power of the machines holding the organisation's tasks, in watts.", org, nil),
		limit:      prometheus.NewDesc("coopgrid_org_limit_watts", "Lim_i: the organisation's power limit, in watts.", org, nil),
		powerQuota: prometheus.NewDesc("coopgrid_org_power_quota_watts", "Busy power of the organisation's machines that are up, in watts.", org, nil),
		quota:      prometheus.NewDesc("coopgrid_org_quota_gflops", "Computing power of the organisation's machines that are up, in GFLOPS.", org, nil),
		alloc:      prometheus.NewDesc("coopgrid_org_allocated_gflops", "Computing power of the machines holding the organisation's tasks, in GFLOPS.", org, nil),
		dp:         prometheus.NewDesc("coopgrid_org_dp", "DP_i = (allocated - quota) / quota; absent when the quota is 0.", org, nil),
		energy:     prometheus.NewDesc("coopgrid_org_energy_joules_total", "Energy accounted to the organisation, in joules: role=user for its tasks wherever they ran, role=owner for anything run on its machines.", []string{"org", "role"}, nil),
		raftState:  prometheus.NewDesc("coopgrid_raft_state", "1 for this peer's current Raft state, 0 for the others.", []string{"state"}, nil),
		applied:    prometheus.NewDesc("coopgrid_raft_applied_index", "The last Raft log index applied to this peer's ledger.", nil, nil),
		peers:      prometheus.NewDesc("coopgrid_peers", "Members of the federation known to this peer, by Raft voter status.", []string{"voter"}, nil),
		machines:   prometheus.NewDesc("coopgrid_machines", "Machines by organisation and state (up, lost).", []string{"org", "state"}, nil),
		decisions:  prometheus.NewDesc("coopgrid_decisions_total", "Decisions of this peer's scheduling passes as leader, by how the ledger took them (accepted, rejected); rate() is decisions per second.", []string{"result"}, nil),
		proposed:   prometheus.NewDesc("coopgrid_decisions_proposed_total", "Decisions of this peer's scheduling passes committed to the log.", nil, nil),
		passes:     prometheus.NewDesc("coopgrid_scheduling_passes_total", "Scheduling passes this peer ran as leader.", nil, nil),
		passErrors: prometheus.NewDesc("coopgrid_scheduling_pass_errors_total", "Scheduling passes whose log entry failed to commit.", nil, nil),
	}
}

// scrape holds the metrics computed for one scrape. It is an unchecked
// collector (Describe sends nothing): the label values are only known at
// scrape time.
type scrape []prometheus.Metric

func (s scrape) Describe(chan<- *prometheus.Desc) {}

func (s scrape) Collect(ch chan<- prometheus.Metric) {
	for _, m := range s {
		ch <- m
	}
}

// collect queries the Backend with the scrape request's context. The
// gauges are computed from the same answers `peer status` shows, so the
// two never disagree.
func (s *Server) collect(ctx context.Context) scrape {
	d := s.metrics
	var out scrape
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...))
	}
	counter := func(desc *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...))
	}
	st, err := s.b.Status(ctx)
	if err != nil {
		s.log.Warn("api: metrics: status", "err", err)
		gauge(d.up, 0)
		return out
	}
	gauge(d.up, 1)
	for _, o := range st.Orgs {
		gauge(d.queue, float64(o.Queued), o.Name)
		for _, c := range []struct {
			state string
			n     int
		}{{"queued", o.Queued}, {"running", o.Running}, {"done", o.Done}, {"failed", o.Failed}, {"cancelled", o.Cancelled}} {
			gauge(d.tasks, float64(c.n), o.Name, c.state)
		}
		gauge(d.pi, o.PIW, o.Name)
		gauge(d.limit, o.LimitW, o.Name)
		gauge(d.powerQuota, o.PowerQuotaW, o.Name)
		gauge(d.quota, o.QuotaGFLOPS, o.Name)
		gauge(d.alloc, o.AllocGFLOPS, o.Name)
		if o.DP != nil {
			gauge(d.dp, *o.DP, o.Name)
		}
		counter(d.energy, o.EnergyJ, o.Name, "user")
		counter(d.energy, o.OwnerEnergyJ, o.Name, "owner")
	}
	known := false
	for _, rs := range raftStates {
		v := 0.0
		if rs == st.Raft.State {
			v, known = 1, true
		}
		gauge(d.raftState, v, rs)
	}
	if !known && st.Raft.State != "" {
		gauge(d.raftState, 1, st.Raft.State)
	}
	gauge(d.applied, float64(st.Raft.AppliedIndex))
	var voters, others int
	for _, p := range st.Peers {
		if p.Voter {
			voters++
		} else {
			others++
		}
	}
	gauge(d.peers, float64(voters), "true")
	gauge(d.peers, float64(others), "false")

	if ms, err := s.b.Machines(ctx); err != nil {
		s.log.Warn("api: metrics: machines", "err", err)
	} else {
		type key struct{ org, state string }
		counts := map[key]int{}
		var order []key
		for _, m := range ms {
			k := key{m.Org, m.State}
			if _, seen := counts[k]; !seen {
				order = append(order, k)
			}
			counts[k]++
		}
		for _, k := range order {
			gauge(d.machines, float64(counts[k]), k.org, k.state)
		}
	}

	if src, ok := s.b.(MetricsSource); ok {
		if nm, err := src.Metrics(ctx); err != nil {
			s.log.Warn("api: metrics: node metrics", "err", err)
		} else {
			counter(d.decisions, float64(nm.DecisionsAccepted), "accepted")
			counter(d.decisions, float64(nm.DecisionsRejected), "rejected")
			counter(d.proposed, float64(nm.DecisionsProposed))
			counter(d.passes, float64(nm.SchedulingPasses))
			counter(d.passErrors, float64(nm.PassErrors))
		}
	}
	return out
}

// serveMetrics answers a scrape in the Prometheus text format: the
// server's own counters from its registry, and the federation's gauges
// computed now from the Backend (a fresh registry per scrape, so that the
// Backend is asked with this request's context and a departed
// organisation's series disappear).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	now := prometheus.NewRegistry()
	now.MustRegister(s.collect(r.Context()))
	promhttp.HandlerFor(prometheus.Gatherers{s.reg, now}, promhttp.HandlerOpts{
		ErrorLog:      slogPrinter{s},
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP(w, r)
	return nil
}

// slogPrinter adapts promhttp's error log to slog.
type slogPrinter struct{ s *Server }

func (p slogPrinter) Println(v ...any) { p.s.log.Warn("api: metrics", "err", v) }
