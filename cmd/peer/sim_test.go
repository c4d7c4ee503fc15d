package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

const tinyScenario = "../../examples/scenarios/tiny.yaml"

// TestSimTinyByHand runs the hand-worked scenario of examples/scenarios/
// tiny.yaml through the CLI and checks the figures worked out on paper:
//
//	t=0   Beta is first (equal DP and quota, smaller power quota): b2 on
//	      Beta-m1; Alpha's a1 goes to Beta-m2 (8 W/GFLOPS beats Alpha-m1's
//	      10); Beta is then at its 40 W limit and b1 waits.
//	t=120 a2 arrives: Alpha-m1 (100 W + 40 W ≤ 180 W), done at 240.
//	t=300 b2 done; b1 on Beta-m1, done at 900.  t=1200 a1 done.
//
// Energy as user: Alpha 40 W·1200 s + 100 W·120 s = 60 kJ; Beta 40 W·300 s
// + 40 W·600 s = 36 kJ. Turnaround: Alpha (1200+120)/2, Beta (900+300)/2.
// Satisfaction (eq. 4.1, as decided): Alpha's time ratio mean(100·900/1200,
// 100·180/120) = 112.5, α = 100 W·1200 s / 12 kJ = 10,
// β = (96 − 60) kJ / (180 W·1200 s) + 1 = 7/6: 1312.5.
func TestSimTinyByHand(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	code, out, errs := runCLI(t, "sim", "--scenario", tinyScenario, "--runs", "3", "--json",
		"--trace", trace, "--out", filepath.Join(dir, "out"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Policy string `json:"policy"`
		Runs   int    `json:"runs"`
		Orgs   map[string]map[string]struct {
			Mean *float64 `json:"mean"`
			CI95 *float64 `json:"ci95"`
		} `json:"orgs"`
		Total map[string]struct {
			Mean *float64 `json:"mean"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if rep.Policy != "ehosep" || rep.Runs != 3 {
		t.Errorf("policy %q runs %d", rep.Policy, rep.Runs)
	}
	want := map[string]map[string]float64{
		"Alpha": {"energy_j": 60000, "turnaround_s": 660, "satisfaction": 1312.5, "preemptions": 0, "owner_energy_j": 12000},
		"Beta":  {"energy_j": 36000, "turnaround_s": 600, "preemptions": 0, "owner_energy_j": 84000},
	}
	for org, metrics := range want {
		for name, v := range metrics {
			got := rep.Orgs[org][name]
			if got.Mean == nil || math.Abs(*got.Mean-v) > 1e-6*math.Max(1, v) {
				t.Errorf("%s %s = %v, want %v", org, name, got.Mean, v)
			}
			// Explicit tasks: every run is the same, so the interval is 0.
			if got.CI95 == nil || *got.CI95 != 0 {
				t.Errorf("%s %s ci95 = %v, want 0", org, name, got.CI95)
			}
		}
	}
	if m := rep.Total["makespan_s"].Mean; m == nil || *m != 1200 {
		t.Errorf("makespan = %v, want 1200", m)
	}
	tr, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(tr)), "\n")
	if len(lines) != 8 || !strings.Contains(lines[1], `"task":"a1","machine":"Beta-m2"`) {
		t.Errorf("trace has %d lines, second %q; want 8 and a1 on Beta-m2", len(lines), lines[1])
	}
	for _, f := range []string{"summary.json", "tasks.csv"} {
		if st, err := os.Stat(filepath.Join(dir, "out", f)); err != nil || st.Size() == 0 {
			t.Errorf("--out did not write %s: %v", f, err)
		}
	}
}

func TestSimTable(t *testing.T) {
	code, out, errs := runCLI(t, "sim", "--scenario", tinyScenario, "--runs", "2", "--policy", "hosep")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"policy hosep", "Alpha", "Beta", "total", "makespan"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSimBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\norgs:\n  - name: A\n    machines:\n      - {count: 1, gflops: -3, watts: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no scenario", []string{"sim"}, "--scenario is required"},
		{"unknown policy", []string{"sim", "--scenario", tinyScenario, "--policy", "fifo"}, "unknown policy"},
		{"missing file", []string{"sim", "--scenario", "/nonexistent.yaml"}, "nonexistent.yaml"},
		{"bad value names file and line", []string{"sim", "--scenario", bad}, "bad.yaml:5"},
		{"unknown late org", []string{"sim", "--scenario", tinyScenario, "--late", "Gamma"}, "Gamma"},
		{"bad limit", []string{"sim", "--scenario", tinyScenario, "--late", "Beta", "--limit", "lots"}, "lots"},
		{"bad checkpoint", []string{"sim", "--scenario", tinyScenario, "--checkpoint", "soon"}, "--checkpoint"},
		{"zero runs", []string{"sim", "--scenario", tinyScenario, "--runs", "0"}, "--runs"},
		{"bad log level", []string{"--log-level", "loud", "sim"}, "--log-level"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, tc.want)
			}
		})
	}
}

// TestSimDeterministicAcrossWorkers: the same seed gives the same report
// whatever the number of parallel workers.
func TestSimDeterministicAcrossWorkers(t *testing.T) {
	args := []string{"sim", "--scenario", "../../examples/scenarios/model1.yaml", "--late", "U1", "--limit", "80%", "--runs", "4", "--json"}
	_, one, _ := runCLI(t, append(args, "--workers", "1")...)
	_, two, _ := runCLI(t, append(args, "--workers", "2")...)
	if one == "" || one != two {
		t.Fatalf("reports differ between 1 and 2 workers")
	}
}
