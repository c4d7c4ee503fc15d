package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the peer's latency histograms, exposed on /metrics beside
// the API's gauges (Collectors). Each peer counts what it did itself: the
// runs on its own machines, its passes as leader, the commands it
// proposed; a federation-wide figure is the sum over the peers' series.
type metrics struct {
	queueWait prometheus.Histogram
	runTime   *prometheus.HistogramVec
	pass      prometheus.Histogram
	commit    *prometheus.HistogramVec
}

// Bucket bounds, in seconds: tasks wait and run from seconds to days; a
// pass and a commit take milliseconds on a LAN, seconds when in trouble.
var (
	taskBuckets   = []float64{1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600}
	commitBuckets = prometheus.ExponentialBuckets(0.001, 2, 14)  // 1 ms to 8.2 s
	passBuckets   = prometheus.ExponentialBuckets(0.0005, 2, 14) // 0.5 ms to 4.1 s
)

func newMetrics() *metrics {
	return &metrics{
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coopgrid_task_queue_wait_seconds",
			Help:    "From a task's submission to the start of its first run, for the tasks whose first run started on this peer's machines (ledger times).",
			Buckets: taskBuckets,
		}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coopgrid_task_run_seconds",
			Help:    "Run time of the runs on this peer's machines whose end was recorded, by outcome (done, failed, stopped: preempted or cancelled).",
			Buckets: taskBuckets,
		}, []string{"outcome"}),
		pass: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coopgrid_scheduling_pass_seconds",
			Help:    "Scheduling passes this peer ran as leader: the view, the policy and, when it decided something, the commit of its decisions.",
			Buckets: passBuckets,
		}),
		commit: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "coopgrid_commit_seconds",
			Help: "From proposing a command to its result from the leader's ledger: path=proposal for this peer's commands " +
				"(API writes, run reports; forwarded to the leader from a follower), path=decisions for its decisions as leader.",
			Buckets: commitBuckets,
		}, []string{"path"}),
	}
}

// Collectors are the histograms, for api.ServerOptions.Collectors.
func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.queueWait, m.runTime, m.pass, m.commit}
}

// RunStarted implements runner.Observer.
func (m *metrics) RunStarted(queueWait time.Duration) {
	m.queueWait.Observe(max(queueWait, 0).Seconds())
}

// RunEnded implements runner.Observer.
func (m *metrics) RunEnded(runTime time.Duration, outcome string) {
	m.runTime.WithLabelValues(outcome).Observe(max(runTime, 0).Seconds())
}

// ObservePass implements leader.PassObserver.
func (m *metrics) ObservePass(policy, commit time.Duration) {
	m.pass.Observe((policy + commit).Seconds())
	if commit > 0 {
		m.commit.WithLabelValues("decisions").Observe(commit.Seconds())
	}
}

// observeProposal records a command this peer proposed that got a result.
func (m *metrics) observeProposal(d time.Duration) {
	m.commit.WithLabelValues("proposal").Observe(d.Seconds())
}

// Collectors are the peer's latency histograms (queue wait, run time,
// scheduling pass, commit), for the API server's /metrics
// (api.ServerOptions.Collectors).
func (n *Node) Collectors() []prometheus.Collector { return n.metrics.collectors() }
