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

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/lab/sim"
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

// fullResults gives every case of the campaign a synthetic summary (no
// simulation): each organisation of the case's scenario with constant
// figures, which the caller then edits.
func fullResults(t *testing.T) *campaignResults {
	t.Helper()
	r := &campaignResults{runs: 60, seed: 1, byName: map[string]*caseResult{}}
	orgs := map[string][]string{}
	for _, c := range campaign() {
		names, ok := orgs[c.Scenario]
		if !ok {
			sc, err := scenario.Load(filepath.Join(scenarioDir, c.Scenario))
			if err != nil {
				t.Fatal(err)
			}
			names = sc.OrgNames()
			orgs[c.Scenario] = names
		}
		one := sim.Stat{Mean: 1, CI95: 0.1, N: 60}
		s := &sim.Summary{Scenario: c.Scenario, Policy: c.Policy, Runs: 60}
		for _, n := range names {
			s.Orgs = append(s.Orgs, sim.OrgSummary{Name: n,
				SatisfactionEHOSEP: one, SatisfactionHOSEP: one, TimeRatio: one, Alpha: one, Beta: one,
				UserJ: one, OwnerJ: one, UserKJs: one, OwnerKJs: one,
				TurnaroundMean: one, TurnaroundGeoMean: one, BoundedSlowdownMean: one, Preemptions: one})
		}
		s.Total = sim.TotalSummary{EnergyJ: one, KJs: one, MakespanSeconds: one, TurnaroundMean: one,
			TurnaroundGeoMean: one, BoundedSlowdownMean: one, Preemptions: one}
		run := &sim.Result{Scenario: c.Scenario, Policy: c.Policy}
		for _, n := range names {
			run.Orgs = append(run.Orgs, sim.OrgMetrics{Name: n, Tasks: 10, TimeRatio: 50, Alpha: 2, Beta: 3})
		}
		s.PerRun = []*sim.Result{run}
		s.First = run
		cr := &caseResult{c: c, sum: s}
		r.order = append(r.order, cr)
		r.byName[c.Name] = cr
	}
	return r
}

// TestCampaignWiring checks, without simulating, that the campaign has the
// dissertation's cases and that every table, figure and finding finds the
// cases it reads.
func TestCampaignWiring(t *testing.T) {
	cs := campaign()
	// 7 sequences × CC/SC × 4 limits; test 1: HOSEP + 4 EHOSEP + 4 Best
	// Fit; test 2: HOSEP + 4 Best Fit (its EHOSEP cases are S2M1 SC);
	// HOSEP 12 nodes: 3 demands × CC/SC × OSEP/HOSEP.
	if want := 56 + 9 + 5 + 12; len(cs) != want {
		t.Errorf("%d cases, want %d", len(cs), want)
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if seen[c.Name] {
			t.Errorf("duplicate case %s", c.Name)
		}
		seen[c.Name] = true
	}
	r := fullResults(t)
	for _, c := range comparisons {
		for _, l := range limits {
			if relRow(r, c.subject(l), c.base(l), c.metric) == nil {
				t.Errorf("table %d at %s: cases %s / %s missing", c.num, l, c.subject(l), c.base(l))
			}
		}
	}
	for _, f := range findings() {
		for _, form := range append([]satForm{decidedForm}, otherForms...) {
			c := &checker{r: r, form: form}
			f.check(c)
			if v, _ := c.verdict(); v == "not run" || c.n == 0 {
				t.Errorf("finding %s, %s: verdict %q with %d sub-claims: it reads a case that does not exist", f.id, form.name, v, c.n)
			}
		}
	}
	// The forms of eq. 4.1 from one run's factors: time ratio 50, α 2,
	// β 3, 10 tasks (the decided form reads the summary's own figure, 1).
	for _, tc := range []struct {
		form satForm
		want float64
	}{
		{decidedForm, 1},
		{otherForms[0], 50 * 2 * 3 * 10},
		{otherForms[1], 50 * 2 * 2},
		{otherForms[2], 50 * 2 * 2 * 10},
	} {
		c := &checker{r: r, form: tc.form}
		if got := c.sat("S1M1-CC-80%", "U2"); got != tc.want {
			t.Errorf("%s: satisfaction %v, want %v", tc.form.name, got, tc.want)
		}
	}
	figs, err := writeFigures(t.TempDir(), r)
	if err != nil {
		t.Fatal(err)
	}
	// 14 sweeps, 4 performance sweeps, 8 tables, 2 HOSEP charts.
	if len(figs) != 28 {
		t.Errorf("%d figures, want 28", len(figs))
	}
}

// TestTablesArithmetic: the relative differences of tables 11-18 are
// (subject − base) / base · 100, per organisation and in total.
func TestTablesArithmetic(t *testing.T) {
	r := fullResults(t)
	set := func(name string, kjs []float64, totalKJs float64) {
		s := r.get(name).sum
		for i, v := range kjs {
			s.Orgs[i].UserKJs.Mean = v
		}
		s.Total.KJs.Mean = totalKJs
	}
	set("P1-hosep", []float64{2, 4, 1, 8}, 15)
	set("P1-ehosep-80%", []float64{1, 5, 1, 2}, 9)
	row := relRow(r, "P1-ehosep-80%", "P1-hosep", comparisons[0].metric)
	want := []float64{-50, 25, 0, -75, -40}
	if !slices.Equal(row, want) {
		t.Errorf("table 11 at 80%%: %v, want %v", row, want)
	}
	path := filepath.Join(t.TempDir(), "tables.md")
	if err := writeTablesMD(path, r, nil); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"| 80% | published | -52.50 | -51.20 | -45.47 | -56.98 | -51.67 |",
		"|  | ours, KJ/s | -50.00 | +25.00 | +0.00 | -75.00 | -40.00 |",
		"| 80% | published | +16.97 | +41.94 | +20.49 | +11.58 | — |", // table 18
	} {
		if !strings.Contains(string(md), s) {
			t.Errorf("tables.md lacks %q", s)
		}
	}
	// Signs against the published table 11: at 80 % ours are −50, +25, 0,
	// −75 (2 agree; 0 counts as positive); at the other limits the
	// subject's 1 against HOSEP's 2, 4, 1, 8 gives −50, −75, 0, −87.5:
	// 3 agree at 100 % and 150 %, 2 at whole system (U1, and U3's 0
	// against +10.93). 10 in all.
	if !strings.Contains(string(md), "Signs agree in 10 of 16 cells") {
		i := strings.Index(string(md), "### Table 11")
		t.Errorf("table 11 sign count wrong:\n%s", string(md)[i:min(len(md), i+1500)])
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

func TestCompactJSON(t *testing.T) {
	in := []byte(`{"z": 1, "a": "80%", "cases": [{"x": 3.14159265358979, "y": [1e-7, 123456789]}, {"x": null, "s": "a,b:c"}], "t": true}`)
	got, err := compactJSON(in, 6)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"z":1,"a":"80%","cases":[` + "\n" + `{"x":3.14159,"y":[1e-07,1.23457e+08]},` + "\n" + `{"x":null,"s":"a,b:c"}],"t":true}` + "\n"
	if string(got) != want {
		t.Errorf("compactJSON:\n got %s\nwant %s", got, want)
	}
	if _, err := compactJSON([]byte(`{"a":`), 6); err == nil {
		t.Error("truncated JSON: want an error")
	}
}
