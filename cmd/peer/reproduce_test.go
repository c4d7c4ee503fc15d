package main

import (
	"bytes"
	"encoding/json"
	"image"
	_ "image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const scenarioDir = "../../examples/scenarios"

// checkPNG fails unless path is a decodable PNG of reasonable size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil || format != "png" || cfg.Width < 400 || len(data) < 2000 {
		t.Errorf("%s: format %q %dx%d %d bytes (%v): want a real PNG chart", path, format, cfg.Width, cfg.Height, len(data), err)
	}
}

// TestReproduceOnlyS1M1 runs the S1M1 sequence (8 cases) at 2 runs through
// the CLI and checks what it writes.
func TestReproduceOnlyS1M1(t *testing.T) {
	out := filepath.Join(t.TempDir(), "repro")
	code, _, errs := runCLI(t, "reproduce", "--out", out, "--runs", "2", "--only", "S1M1", "--scenarios", scenarioDir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "[8/8] S1M1-SC-system") || !strings.Contains(errs, "simulated in") {
		t.Errorf("stderr lacks the progress lines and the elapsed time:\n%s", errs)
	}
	data, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Runs  int `json:"runs"`
		Cases []struct {
			Name    string `json:"name"`
			Late    string `json:"late"`
			Ckpt    string `json:"checkpoint"`
			Summary struct {
				Policy   string             `json:"policy"`
				Runs     int                `json:"runs"`
				Ckpt     float64            `json:"checkpoint_block_s"`
				OrgOrder []string           `json:"org_order"`
				Limits   map[string]float64 `json:"limits_w"`
				Orgs     map[string]struct {
					Satisfaction struct {
						Mean *float64 `json:"mean"`
						N    int      `json:"n"`
					} `json:"satisfaction"`
				} `json:"orgs"`
			} `json:"summary"`
			Factors map[string]map[string]any `json:"satisfaction_factors"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	var names []string
	for _, c := range doc.Cases {
		names = append(names, c.Name)
	}
	want := []string{"S1M1-CC-80%", "S1M1-CC-100%", "S1M1-CC-150%", "S1M1-CC-system",
		"S1M1-SC-80%", "S1M1-SC-100%", "S1M1-SC-150%", "S1M1-SC-system"}
	if !slices.Equal(names, want) {
		t.Fatalf("cases %v, want %v", names, want)
	}
	// U1's limit: 80 %, 100 %, 150 % of its 5048 W, then the whole
	// federation's 9192 W; everyone else at 9192 W.
	wantU1 := []float64{4038.4, 5048, 7572, 9192}
	for i, c := range doc.Cases {
		s := c.Summary
		if c.Late != "U1" || s.Policy != "ehosep" || s.Runs != 2 || doc.Runs != 2 {
			t.Errorf("%s: late %q policy %q runs %d/%d", c.Name, c.Late, s.Policy, s.Runs, doc.Runs)
		}
		if wantCk := map[bool]float64{true: 300, false: 0}[i < 4]; s.Ckpt != wantCk {
			t.Errorf("%s: checkpoint block %v s, want %v", c.Name, s.Ckpt, wantCk)
		}
		if !slices.Equal(s.OrgOrder, []string{"U1", "U2", "U3", "U4"}) {
			t.Errorf("%s: orgs %v", c.Name, s.OrgOrder)
		}
		if got := s.Limits["U1"]; math.Abs(got-wantU1[i%4]) > 1e-9 {
			t.Errorf("%s: U1's limit %v W, want %v", c.Name, got, wantU1[i%4])
		}
		if got := s.Limits["U3"]; got != 9192 {
			t.Errorf("%s: U3's limit %v W, want the whole system's 9192", c.Name, got)
		}
		for _, o := range s.OrgOrder {
			if sat := s.Orgs[o].Satisfaction; sat.Mean == nil || *sat.Mean <= 0 || sat.N != 2 {
				t.Errorf("%s: %s satisfaction %+v, want a positive mean over 2 runs", c.Name, o, sat)
			}
			if _, ok := c.Factors[o]["alpha"]; !ok {
				t.Errorf("%s: %s: no satisfaction factors", c.Name, o)
			}
		}
	}

	md, err := os.ReadFile(filepath.Join(out, "tables.md"))
	if err != nil {
		t.Fatal(err)
	}
	tables := string(md)
	for _, s := range []string{
		"--only 'S1M1'", "### S1M1 CC (U1 late)", "### S1M1 SC (U1 late)",
		"](sweep-S1M1CC.png)", "](sweep-S1M1SC.png)",
		// S1M1's findings are checked; the others report that they did not run.
		"| S1M1CC-a |", "| S1M1-cc |", "| S2M1-a | §4.3.2 L1254 |",
		"| 80% | published | -52.50 | -51.20 | -45.47 | -56.98 | -51.67 |",
		"|  | ours | not run |",
		"| S1M1-SC-system | `peer sim --scenario examples/scenarios/model1.yaml --policy ehosep --checkpoint off --late U1 --limit system` |",
	} {
		if !strings.Contains(tables, s) {
			t.Errorf("tables.md lacks %q", s)
		}
	}
	for _, line := range strings.Split(tables, "\n") {
		if strings.HasPrefix(line, "| S1M1") && strings.Contains(line, "**not run**") {
			t.Errorf("an S1M1 finding says not run although S1M1 ran: %s", line)
		}
		if strings.HasPrefix(line, "| S2M1-a ") && !strings.Contains(line, "**not run**") {
			t.Errorf("S2M1 did not run but its finding has a verdict: %s", line)
		}
	}
	for _, f := range []string{"sweep-S1M1CC.png", "sweep-S1M1SC.png"} {
		checkPNG(t, filepath.Join(out, f))
	}
	if _, err := os.Stat(filepath.Join(out, "table11.png")); err == nil {
		t.Error("table11.png written although its cases did not run")
	}
}

// TestReproduceBadInput: usage errors exit 2 and write nothing.
func TestReproduceBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no out", []string{"--runs", "2"}},
		{"zero runs", []string{"--runs", "0"}},
		{"zero workers", []string{"--workers", "0"}},
		{"bad regexp", []string{"--only", "S1M1["}},
		{"no match", []string{"--only", "^S9"}},
		{"missing scenarios", []string{"--scenarios", "/nonexistent/scenarios", "--only", "S1M1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"reproduce"}, tc.args...)
			if tc.name != "no out" {
				args = append(args, "--out", out)
			}
			if !slices.Contains(args, "--scenarios") {
				args = append(args, "--scenarios", scenarioDir)
			}
			code, _, errs := runCLI(t, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (usage error); stderr: %s", code, errs)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("bad input created %s", out)
			}
		})
	}
}

// TestSimOutPlots: `peer sim --out` writes the three charts beside the CSV.
func TestSimOutPlots(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, _, errs := runCLI(t, "sim", "--scenario", tinyScenario, "--runs", "2", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, f := range []string{"satisfaction.png", "energy.png", "turnaround.png"} {
		checkPNG(t, filepath.Join(out, f))
	}
}
