package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// monitoringDir holds the Prometheus and Grafana examples.
func monitoringDir() string { return filepath.Join(repoRoot, "examples", "monitoring") }

// dashboardExprs are the PromQL expressions of the Grafana dashboard's
// panels, with Grafana's variables replaced by what Prometheus accepts.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(monitoringDir(), "coopgrid-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("coopgrid-dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	var out []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	return out
}

// TestMonitoringExamples: promtool (Debian's prometheus package; .ci/run
// installs it) accepts the example scrape configuration and its alert
// rules, the rules' unit tests pass (each alert fires on the series meant
// to fire it, and not before its time), and every query of the Grafana
// dashboard is valid PromQL (checked as recording rules).
func TestMonitoringExamples(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found (Debian package prometheus, which .ci/run installs): the example alert rules and dashboard queries are not checked")
	}
	dir := t.TempDir()
	for _, f := range []string{"prometheus.yml", "coopgrid.rules.yml", "coopgrid.rules.test.yml"} {
		copyFile(t, filepath.Join(monitoringDir(), f), filepath.Join(dir, f))
	}
	// The token file the scrape configuration names, as an operator
	// installs it.
	if err := os.WriteFile(filepath.Join(dir, "coopgrid.token"), []byte("0123abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range dashboardExprs(t) {
		q, _ := json.Marshal(e)
		fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
	}
	writeFile(t, dir, "dashboard.rules.yml", rules.String())

	for _, args := range [][]string{
		{"check", "config", "prometheus.yml"},
		{"check", "rules", "coopgrid.rules.yml"},
		{"test", "rules", "coopgrid.rules.test.yml"},
		{"check", "rules", "dashboard.rules.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMetricsAfterATask: a real peer that ran tasks exposes, on /metrics,
// the latency histograms with observations (queue wait, run time,
// scheduling pass, commit), the Go and process collectors and the build
// info; and every metric the example alert rules and dashboard query is
// among its series.
func TestMetricsAfterATask(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 1, 10, 40), config: fastConfig})
	a.start(t)
	ids := a.submit(t, filepath.Join(repoRoot, "examples", "jobs", "hello.json"))
	waitAllDone(t, a, ids)

	token, err := os.ReadFile(filepath.Join(a.data, "api.token"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+a.api+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	// count is a histogram's observations with the given labels.
	count := func(name string, labels map[string]string) uint64 {
		f, ok := fams[name]
		if !ok || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Fatalf("%s: no histogram in /metrics", name)
		}
		var n uint64
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				n += m.GetHistogram().GetSampleCount()
			}
		}
		return n
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    uint64
	}{
		{"coopgrid_task_queue_wait_seconds", nil, uint64(len(ids))},
		{"coopgrid_task_run_seconds", map[string]string{"outcome": "done"}, uint64(len(ids))},
		{"coopgrid_scheduling_pass_seconds", nil, 1},
		{"coopgrid_commit_seconds", map[string]string{"path": "decisions"}, 1},
		{"coopgrid_commit_seconds", map[string]string{"path": "proposal"}, 1},
	} {
		if n := count(c.name, c.labels); n < c.min {
			t.Errorf("%s%v: %d observations, want at least %d", c.name, c.labels, n, c.min)
		}
	}
	if bi := fams["coopgrid_build_info"]; bi == nil || len(bi.GetMetric()) != 1 ||
		labelValue(bi.GetMetric()[0], "version") == "" || labelValue(bi.GetMetric()[0], "goversion") == "" || bi.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("coopgrid_build_info: want one series, 1, with a version and a Go version: %v", bi)
	}

	// Every metric the examples query exists (a histogram under its
	// _bucket, _sum and _count series).
	exposed := map[string]bool{}
	for name, f := range fams {
		exposed[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exposed[name+s] = true
			}
		}
	}
	rules, err := os.ReadFile(filepath.Join(monitoringDir(), "coopgrid.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	queried := regexp.MustCompile(`\b(?:coopgrid|go|process)_[a-z_]+\b`)
	var missing []string
	for _, src := range append(dashboardExprs(t), string(rules)) {
		for _, name := range queried.FindAllString(src, -1) {
			if !exposed[name] && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "process_cpu_seconds_total"} {
		if !exposed[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("queried by the examples or expected, but not exposed by the peer: %v", missing)
	}
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		if labelValue(m, k) != v {
			return false
		}
	}
	return true
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
