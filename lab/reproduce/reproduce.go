// Package reproduce is the body of `peer reproduce`: every experiment of
// the EHOSEP dissertation (seed 000 §4) and of the HOSEP paper (seed 001
// §4) through the simulator, written as results.json, tables.md (the
// published tables beside ours, the §4.3 findings checked one by one) and
// PNG figures. docs/REPRODUCTION.md is its output.
package reproduce

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/lab"
	"github.com/coopgrid/coopgrid/lab/plot"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/lab/simcase"
)

// Options are the settings of `peer reproduce`, one per flag.
type Options struct {
	// Out is the directory for results.json, tables.md and the figures.
	Out     string
	Runs    int
	Seed    uint64
	Workers int
	// Only selects the cases whose name matches this regular expression.
	Only string
	// Scenarios is the directory holding model1.yaml, model2.yaml and
	// hosep12-*.yaml.
	Scenarios string
	// Engines are the simulator engines to run the campaign under, in
	// order: sim.EngineDefault (this project's model, always first when
	// present) and sim.EngineISPD (the author's iSPD semantics). Empty
	// means both.
	Engines []string
}

// campaignCase is one case of the campaign: a scenario, a policy and the
// options of `peer sim` that select it.
type campaignCase struct {
	Name       string `json:"name"`
	Group      string `json:"group"`
	Scenario   string `json:"scenario_file"`
	Policy     string `json:"policy"`
	Late       string `json:"late"`
	LateLimit  string `json:"late_limit,omitempty"`
	AllLimit   string `json:"all_limit,omitempty"`
	Checkpoint string `json:"checkpoint"`
	// Limit labels the case on a sweep's x axis.
	Limit string `json:"limit"`
}

// limits are the power limits of every sweep (seed 000 L1186, table 10).
var limits = []string{"80%", "100%", "150%", "system"}

// sequence is one of the dissertation's test sequences (L1194-1202).
type sequence struct {
	name, file, late string
}

var sequences = []sequence{
	{"S1M1", "model1.yaml", "U1"}, {"S2M1", "model1.yaml", "U2"},
	{"S3M1", "model1.yaml", "U3"}, {"S4M1", "model1.yaml", "U4"},
	{"S1M2", "model2.yaml", "U1"}, {"S2M2", "model2.yaml", "U2"},
	{"S3M2", "model2.yaml", "U3"},
}

var ckptModes = []struct{ label, flag string }{{"CC", "5m"}, {"SC", "off"}}

var hosepDemands = []string{"low", "medium", "high"}

// sharingOrgs are Model 1's organisations, each alone in §4.6.
var sharingOrgs = []string{"U1", "U2", "U3", "U4"}

func seqCase(seq, ck, limit string) string { return seq + "-" + ck + "-" + limit }

// campaign lists every case in run order.
func campaign() []campaignCase {
	var cs []campaignCase
	for _, s := range sequences {
		for _, ck := range ckptModes {
			for _, l := range limits {
				cs = append(cs, campaignCase{
					Name: seqCase(s.name, ck.label, l), Group: s.name + " " + ck.label,
					Scenario: s.file, Policy: "ehosep", Late: s.late, LateLimit: l,
					Checkpoint: ck.flag, Limit: l,
				})
			}
		}
	}
	// Performance test 1 (L1321-1325): nobody late, everyone at one limit.
	// HOSEP ignores limits, so one HOSEP case is the base of every row.
	cs = append(cs, campaignCase{Name: "P1-hosep", Group: "P1", Scenario: "model1.yaml", Policy: "hosep", Late: "none", Checkpoint: "off", Limit: "—"})
	for _, pol := range []struct{ name, policy string }{{"ehosep", "ehosep"}, {"bestfit", "ehosep-bestfit"}} {
		for _, l := range limits {
			cs = append(cs, campaignCase{
				Name: "P1-" + pol.name + "-" + l, Group: "P1 " + pol.name, Scenario: "model1.yaml",
				Policy: pol.policy, Late: "none", AllLimit: l, Checkpoint: "off", Limit: l,
			})
		}
	}
	// Performance test 2: U2 late. Its EHOSEP cases are S2M1 SC.
	cs = append(cs, campaignCase{Name: "P2-hosep", Group: "P2", Scenario: "model1.yaml", Policy: "hosep", Late: "U2", Checkpoint: "off", Limit: "—"})
	for _, l := range limits {
		cs = append(cs, campaignCase{
			Name: "P2-bestfit-" + l, Group: "P2 bestfit", Scenario: "model1.yaml",
			Policy: "ehosep-bestfit", Late: "U2", LateLimit: l, Checkpoint: "off", Limit: l,
		})
	}
	// §4.6 (L1491-1525): each organisation of Model 1 alone with its own
	// tasks and machines, under SJF (EHOSEP with one organisation, L1499),
	// against test 1's P1-ehosep cases. Its tasks are the same as in
	// model1.yaml for every seed (one size stream per organisation and type).
	for _, o := range sharingOrgs {
		cs = append(cs, campaignCase{
			Name: "I46-" + o, Group: "4.6", Scenario: "alone/model1-" + o + ".yaml",
			Policy: "ehosep", Late: "none", AllLimit: "system", Checkpoint: "off", Limit: "—",
		})
	}
	// The HOSEP paper's 12-node grid (seed 001 §4); User1 late as the
	// scenario files say.
	for _, d := range hosepDemands {
		for _, ck := range ckptModes {
			for _, pol := range []string{"osep", "hosep"} {
				cs = append(cs, campaignCase{
					Name: "H12-" + d + "-" + ck.label + "-" + pol, Group: "H12 " + ck.label,
					Scenario: "hosep12-" + d + ".yaml", Policy: pol, Checkpoint: ck.flag, Limit: d,
				})
			}
		}
	}
	return cs
}

// caseResult is one case's outcome.
type caseResult struct {
	c      campaignCase
	sum    *sim.Summary
	report simcase.Report
	// tasks are every run's task records, kept for the cases that seed
	// 002's relative performance compares (relPerfCases) until it is
	// computed; nil otherwise.
	tasks [][]sim.TaskRecord
}

// campaignResults are the outcomes by case name, in run order.
type campaignResults struct {
	runs   int
	seed   uint64
	only   string
	engine string
	order  []*caseResult
	byName map[string]*caseResult
	// ispd is the same campaign under the iSPD engine (nil if not run);
	// set on the default engine's results only.
	ispd *campaignResults
	// relperf is seed 002's relative performance of the main comparison.
	relperf []relPerfCell
}

func (r *campaignResults) get(name string) *caseResult { return r.byName[name] }

// Run runs the campaign's cases that f selects and writes their results
// into f.Out; progress goes to stderr. Bad options are *lab.UsageError.
func Run(ctx context.Context, f Options, stderr io.Writer) error {
	if f.Out == "" {
		return lab.Usagef("--out is required")
	}
	if f.Runs < 1 {
		return lab.Usagef("--runs %d: want at least 1", f.Runs)
	}
	if f.Workers < 1 {
		return lab.Usagef("--workers %d: want at least 1", f.Workers)
	}
	var only *regexp.Regexp
	if f.Only != "" {
		re, err := regexp.Compile(f.Only)
		if err != nil {
			return lab.Usagef("--only %q: %v", f.Only, err)
		}
		only = re
	}
	var cases []campaignCase
	for _, c := range campaign() {
		if only == nil || only.MatchString(c.Name) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return lab.Usagef("--only %q matches no case (names look like S1M1-CC-80%%, P1-hosep, P2-bestfit-system, H12-low-SC-osep)", f.Only)
	}
	engines := f.Engines
	if len(engines) == 0 {
		engines = []string{sim.EngineDefault, sim.EngineISPD}
	}
	for _, e := range engines {
		if e != sim.EngineDefault && e != sim.EngineISPD {
			return lab.Usagef("--engines %q: want %s and/or %s", e, sim.EngineDefault, sim.EngineISPD)
		}
	}
	// Resolve every case before running any, so that a missing scenario
	// file or a bad option fails at once.
	built := map[string][]*simcase.Case{}
	for _, e := range engines {
		for _, c := range cases {
			sc, err := simcase.Build(simcase.Options{
				Scenario: filepath.Join(f.Scenarios, c.Scenario), Policy: c.Policy,
				Late: c.Late, Limit: c.LateLimit, LimitAll: c.AllLimit, Checkpoint: c.Checkpoint,
				Runs: f.Runs, Seed: f.Seed, Workers: f.Workers, Engine: e,
			})
			if err != nil {
				return fmt.Errorf("case %s (%s engine): %w", c.Name, e, err)
			}
			built[e] = append(built[e], sc)
		}
	}
	if err := os.MkdirAll(f.Out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}

	// The policies allocate per pass; with the default GOGC the collector
	// costs 20-40 % of the campaign's CPU time. The heap stays small, so
	// collect only when it reaches 256 MiB unless the user has chosen
	// otherwise.
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(256 << 20))
	}

	start := time.Now()
	byEngine := map[string]*campaignResults{}
	for _, e := range engines {
		res := &campaignResults{runs: f.Runs, seed: f.Seed, only: f.Only, engine: e, byName: map[string]*caseResult{}}
		fmt.Fprintf(stderr, "campaign (%s engine): %d cases × %d runs, %d workers\n", e, len(cases), f.Runs, f.Workers)
		// Under iSPD a preempted task keeps nothing whatever the checkpoint
		// block (lab/sim/ispd.go rule 4; simcase.Build sets it to 0), so a
		// CC case is its SC twin's very configuration: simulate the twin
		// once and give its summary to both.
		twin := func(c campaignCase) (int, bool) {
			if e != sim.EngineISPD || c.Checkpoint == "off" {
				return 0, false
			}
			for j, d := range cases {
				if d.Name == strings.Replace(c.Name, "-CC-", "-SC-", 1) && d.Checkpoint == "off" {
					return j, true
				}
			}
			return 0, false
		}
		sums := make([]*sim.Summary, len(cases))
		kept := make([][][]sim.TaskRecord, len(cases))
		keep := relPerfCases()
		for pass := 0; pass < 2; pass++ {
			for i, c := range cases {
				j, isTwin := twin(c)
				if (pass == 0) == isTwin {
					continue
				}
				t0 := time.Now()
				if isTwin {
					sums[i] = sums[j]
					fmt.Fprintf(stderr, "[%*d/%d] %-22s %-15s %-7s = %s (no checkpoint under iSPD)\n", len(fmt.Sprint(len(cases))), i+1, len(cases), c.Name, c.Policy, e, cases[j].Name)
					continue
				}
				var sum *sim.Summary
				var err error
				if keep[c.Name] {
					sum, kept[i], err = built[e][i].SimulateKeepingTasks(ctx)
				} else {
					sum, err = built[e][i].Simulate(ctx)
				}
				if err != nil {
					return fmt.Errorf("case %s (%s engine): %w", c.Name, e, err)
				}
				sums[i] = sum
				fmt.Fprintf(stderr, "[%*d/%d] %-22s %-15s %-7s %6.2fs\n", len(fmt.Sprint(len(cases))), i+1, len(cases), c.Name, c.Policy, e, time.Since(t0).Seconds())
			}
		}
		for i, c := range cases {
			cr := &caseResult{c: c, sum: sums[i], report: simcase.NewReport(built[e][i], sums[i]), tasks: kept[i]}
			res.order = append(res.order, cr)
			res.byName[c.Name] = cr
		}
		cells, err := computeRelPerf(res)
		if err != nil {
			return fmt.Errorf("%s engine: %w", e, err)
		}
		res.relperf = cells
		byEngine[e] = res
	}
	simDone := time.Since(start)
	res := byEngine[sim.EngineDefault]
	if res == nil {
		// Only the iSPD engine ran: it fills the main columns, and the
		// iSPD columns say "not run".
		res = byEngine[sim.EngineISPD]
	} else {
		res.ispd = byEngine[sim.EngineISPD]
	}

	if err := writeResultsJSON(filepath.Join(f.Out, "results.json"), res); err != nil {
		return err
	}
	figs, err := writeFigures(f.Out, res)
	if err != nil {
		return err
	}
	if err := writeTablesMD(filepath.Join(f.Out, "tables.md"), res, figs); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "campaign: %d cases × %d runs × %d engines simulated in %.1fs; with results.json, tables.md and %d figures %.1fs in all → %s\n",
		len(cases), f.Runs, len(engines), simDone.Seconds(), len(figs), time.Since(start).Seconds(), f.Out)
	return nil
}

// caseJSON is one case in results.json: what ran and its `peer sim --json`
// report, plus the factors of eq. 4.1 that the report leaves out.
type caseJSON struct {
	campaignCase
	Summary    simcase.Report                 `json:"summary"`
	Components map[string]satisfactionFactors `json:"satisfaction_factors"`
}

// satisfactionFactors are the three factors of eq. 4.1, S = TimeRatio · α ·
// β, so that a reader can see which one drives a difference.
type satisfactionFactors struct {
	TimeRatio sim.Stat `json:"time_ratio"`
	Alpha     sim.Stat `json:"alpha"`
	Beta      sim.Stat `json:"beta"`
	// BetaUse is β over the organisation's own span of use (Metricas.java
	// satisfacaoGeralUso).
	BetaUse sim.Stat `json:"beta_geral_uso"`
}

func writeResultsJSON(path string, r *campaignResults) error {
	doc := struct {
		Generator string     `json:"generator"`
		Runs      int        `json:"runs"`
		Seed      uint64     `json:"seed"`
		Only      string     `json:"only,omitempty"`
		Note      string     `json:"note"`
		Engine    string     `json:"engine"`
		Cases     []caseJSON `json:"cases"`
		ISPDCases []caseJSON `json:"cases_ispd,omitempty"`
	}{
		Generator: "peer reproduce", Runs: r.runs, Seed: r.seed, Only: r.only, Note: simcase.SatisfactionNote, Engine: r.engine,
	}
	doc.Cases = casesJSON(r)
	if r.ispd != nil {
		doc.ISPDCases = casesJSON(r.ispd)
	}
	js, err := json.Marshal(doc)
	return finishResultsJSON(path, js, err)
}

// casesJSON is every case of r as results.json writes it.
func casesJSON(r *campaignResults) []caseJSON {
	var out []caseJSON
	for _, cr := range r.order {
		rep := cr.report
		rep.Note = "" // said once above
		cj := caseJSON{campaignCase: cr.c, Summary: rep, Components: map[string]satisfactionFactors{}}
		for _, o := range cr.sum.Orgs {
			cj.Components[o.Name] = satisfactionFactors{TimeRatio: o.TimeRatio, Alpha: o.Alpha, Beta: o.Beta, BetaUse: o.BetaUse}
		}
		out = append(out, cj)
	}
	return out
}

func finishResultsJSON(path string, js []byte, err error) error {
	if err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	// Six significant digits are far below every CI and halve the file,
	// which is committed; one case per line keeps its diffs readable.
	js, err = compactJSON(js, 6)
	if err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	if err := os.WriteFile(path, js, 0o644); err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	return nil
}

// compactJSON re-encodes a JSON document with every number rounded to sig
// significant digits, keys in their original order, and each element of
// the top-level object's arrays on a line of its own.
func compactJSON(in []byte, sig int) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var out bytes.Buffer
	// Per open container: is it an object, how many tokens so far.
	type level struct {
		object bool
		n      int
	}
	var stack []level
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 {
				return nil, fmt.Errorf("compact json: unexpected end of input")
			}
			break
		}
		if err != nil {
			return nil, err
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			closing := tok == json.Delim('}') || tok == json.Delim(']')
			if !closing {
				switch {
				case top.object && top.n%2 == 1:
					out.WriteByte(':')
				case top.n > 0:
					out.WriteByte(',')
				}
				if !top.object && len(stack) == 2 {
					out.WriteByte('\n')
				}
				top.n++
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			out.WriteRune(rune(t))
			switch t {
			case '{', '[':
				stack = append(stack, level{object: t == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
		case json.Number:
			f, err := t.Float64()
			if err != nil {
				return nil, err
			}
			out.WriteString(strconv.FormatFloat(f, 'g', sig, 64))
		default:
			b, err := json.Marshal(t)
			if err != nil {
				return nil, err
			}
			out.Write(b)
		}
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// ---- published tables ----

// comparison is a published table: relative differences (subject − base) /
// base · 100 per organisation, one row per limit.
type comparison struct {
	num    int
	title  string
	metric plot.Metric // EnergyKJs or Turnaround
	// subject and base name the cases compared at a limit.
	subject, base func(limit string) string
	// rows[k] are the published figures at limits[k]: U1..U4, then the
	// total if the table prints one.
	rows     [][]float64
	hasTotal bool
}

func p1(pol string) func(string) string {
	return func(l string) string { return "P1-" + pol + "-" + l }
}
func fixed(name string) func(string) string {
	return func(string) string { return name }
}
func s2m1sc(l string) string      { return seqCase("S2M1", "SC", l) }
func p2bestfit(l string) string   { return "P2-bestfit-" + l }
func isEnergy(m plot.Metric) bool { return m == plot.EnergyKJs }

// comparisons are seed 000 tables 11-18 (L1356-1487).
var comparisons = []comparison{
	{11, "energy (KJ/s), Model 1 without delays: EHOSEP against HOSEP", plot.EnergyKJs, p1("ehosep"), fixed("P1-hosep"),
		[][]float64{{-52.50, -51.20, -45.47, -56.98, -51.67}, {-35.58, -38.24, -17.37, -46.61, -34.94}, {-11.61, -7.33, -3.77, -26.15, -11.73}, {-6.54, 2.89, 10.93, 10.62, 2.55}}, true},
	{12, "mean turnaround, Model 1 without delays: EHOSEP against HOSEP", plot.Turnaround, p1("ehosep"), fixed("P1-hosep"),
		[][]float64{{-0.46, 42.73, 0.68, 106.93}, {-5.16, 21.97, 11.94, 75.70}, {-3.44, 4.51, 8.33, 43.19}, {-7.25, 1.61, 10.42, 6.57}}, false},
	{13, "energy (KJ/s), Model 1 with U2 late: EHOSEP against HOSEP", plot.EnergyKJs, s2m1sc, fixed("P2-hosep"),
		[][]float64{{12.08, -12.50, 17.24, 6.80, 4.72}, {12.22, -1.95, 14.50, 7.21, 7.46}, {-1.50, -7.73, 7.68, 2.13, -0.93}, {0.27, -11.18, 10.43, 7.40, 0.12}}, true},
	{14, "mean turnaround, Model 1 with U2 late: EHOSEP against HOSEP", plot.Turnaround, s2m1sc, fixed("P2-hosep"),
		[][]float64{{-8.44, 44.88, -8.95, -17.69}, {-7.11, 28.29, -7.00, -14.59}, {-0.78, 0.02, 4.85, -1.70}, {-1.79, -8.29, 9.84, 4.27}}, false},
	{15, "energy (KJ/s), Model 1 without delays: Best Fit against Worst Fit (EHOSEP)", plot.EnergyKJs, p1("bestfit"), p1("ehosep"),
		[][]float64{{7.60, 2.29, -0.38, 3.81}, {5.60, 2.71, 17.27, 5.85}, {23.18, 7.71, -6.12, 7.54}, {9.87, 4.70, 9.49, 9.29}}, false},
	{16, "mean turnaround, Model 1 without delays: Best Fit against Worst Fit", plot.Turnaround, p1("bestfit"), p1("ehosep"),
		[][]float64{{29.34, 30.45, 30.81, 43.01}, {22.67, 29.68, 39.98, 42.16}, {25.77, 22.87, 18.77, 34.51}, {21.84, 19.31, 20.71, 21.14}}, false},
	{17, "energy (KJ/s), Model 1 with U2 late: Best Fit against Worst Fit", plot.EnergyKJs, p2bestfit, s2m1sc,
		[][]float64{{8.45, 8.26, 6.93, 0.017}, {7.18, 0.56, 6.19, 1.88}, {20.27, 13.68, 13.07, 13.15}, {12.11, 3.21, 8.02, 14.23}}, false},
	{18, "mean turnaround, Model 1 with U2 late: Best Fit against Worst Fit", plot.Turnaround, p2bestfit, s2m1sc,
		[][]float64{{16.97, 41.94, 20.49, 11.58}, {18.97, 33.30, 22.98, 16.74}, {19.52, 26.56, 22.28, 20.39}, {18.67, 25.07, 20.34, 20.86}}, false},
}

// orgTotal is a summary's federation-wide figure for m, in the same unit as
// plot.Value gives per organisation.
func orgTotal(s *sim.Summary, m plot.Metric) float64 {
	switch m {
	case plot.EnergyKJs:
		return s.Total.KJs.Mean
	case plot.Energy:
		return s.Total.EnergyJ.Mean * 1e-6
	case plot.Turnaround:
		return s.Total.TurnaroundMean.Mean / 60
	case plot.TurnaroundGeoMean:
		return s.Total.TurnaroundGeoMean.Mean / 60
	case plot.BoundedSlowdown:
		return s.Total.BoundedSlowdownMean.Mean
	case plot.BoundedSlowdown100:
		return s.Total.BoundedSlowdown100Mean.Mean
	}
	return math.NaN()
}

// relRow is the relative difference per organisation and in total (last)
// of metric m between two cases; nil if either did not run.
func relRow(r *campaignResults, subject, base string, m plot.Metric) []float64 {
	a, b := r.get(subject), r.get(base)
	if a == nil || b == nil {
		return nil
	}
	v, err := plot.RelDiff(a.sum, b.sum, m)
	if err != nil {
		return nil
	}
	return append(v, plot.RelPct(orgTotal(a.sum, m), orgTotal(b.sum, m)))
}

// variants are the rows of ours under each published row: the paper's
// metric first, then the metrics it could have used.
func variants(m plot.Metric) []struct {
	label string
	m     plot.Metric
} {
	if isEnergy(m) {
		return []struct {
			label string
			m     plot.Metric
		}{{"ours, KJ/s", plot.EnergyKJs}, {"ours, total J", plot.Energy}}
	}
	return []struct {
		label string
		m     plot.Metric
	}{{"ours, mean", plot.Turnaround}, {"ours, geo. mean", plot.TurnaroundGeoMean}, {"ours, bounded slowdown", plot.BoundedSlowdown}, {"ours, bounded slowdown τ=100", plot.BoundedSlowdown100}}
}

// ---- output helpers ----

func fmtPct(v float64) string {
	if !finite(v) {
		return "—"
	}
	return fmt.Sprintf("%+.2f", v)
}

func fmtStat(s sim.Stat, scale float64, prec int) string {
	if s.N == 0 || !finite(s.Mean) {
		return "—"
	}
	if s.N < 2 || !finite(s.CI95) {
		return fmt.Sprintf("%.*f", prec, s.Mean*scale)
	}
	return fmt.Sprintf("%.*f ± %.*f", prec, s.Mean*scale, prec, s.CI95*scale)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// mdWriter collects markdown; the first write error sticks.
type mdWriter struct {
	w   io.Writer
	err error
}

func (m *mdWriter) f(format string, args ...any) {
	if m.err == nil {
		_, m.err = fmt.Fprintf(m.w, format, args...)
	}
}

// row writes one markdown table row.
func (m *mdWriter) row(cells ...string) { m.f("| %s |\n", strings.Join(cells, " | ")) }

func (m *mdWriter) header(cells ...string) {
	m.row(cells...)
	seps := make([]string, len(cells))
	for i := range seps {
		seps[i] = "---"
	}
	m.row(seps...)
}

// ---- figures ----

// figure is a written PNG, named relative to the output directory.
type figure struct{ key, file, caption string }

func writeFigures(dir string, r *campaignResults) ([]figure, error) {
	var figs []figure
	add := func(key, file, caption string, draw func(path string) error) error {
		if err := draw(filepath.Join(dir, file)); err != nil {
			return fmt.Errorf("figure %s: %w", file, err)
		}
		figs = append(figs, figure{key, file, caption})
		return nil
	}
	sweep := func(names []string) ([]*sim.Summary, bool) {
		var sums []*sim.Summary
		for _, n := range names {
			cr := r.get(n)
			if cr == nil {
				return nil, false
			}
			sums = append(sums, cr.sum)
		}
		return sums, true
	}
	for _, s := range sequences {
		for _, ck := range ckptModes {
			var names []string
			for _, l := range limits {
				names = append(names, seqCase(s.name, ck.label, l))
			}
			sums, ok := sweep(names)
			if !ok {
				continue
			}
			key := s.name + ck.label
			title := fmt.Sprintf("%s %s: satisfaction, %s's limit varied, the others at system", s.name, ck.label, s.late)
			if err := add(key, "sweep-"+key+".png", title, func(p string) error {
				return plot.LimitSweep(p, title, limits, sums, plot.Satisfaction)
			}); err != nil {
				return nil, err
			}
		}
	}
	// The dissertation's figures 11, 13, 15 and 17: energy and turnaround
	// per organisation against the limit under EHOSEP.
	for _, t := range []struct {
		key, title string
		names      func(string) string
		m          plot.Metric
	}{
		{"P1energy", "Test 1 (nobody late, all at the limit), EHOSEP: energy per organisation", p1("ehosep"), plot.EnergyKJs},
		{"P1turnaround", "Test 1 (nobody late, all at the limit), EHOSEP: mean turnaround", p1("ehosep"), plot.Turnaround},
		{"P2energy", "Test 2 (U2 late, its limit varied), EHOSEP: energy per organisation", s2m1sc, plot.EnergyKJs},
		{"P2turnaround", "Test 2 (U2 late, its limit varied), EHOSEP: mean turnaround", s2m1sc, plot.Turnaround},
	} {
		var names []string
		for _, l := range limits {
			names = append(names, t.names(l))
		}
		sums, ok := sweep(names)
		if !ok {
			continue
		}
		if err := add(t.key, "perf-"+t.key+".png", t.title, func(p string) error {
			return plot.LimitSweep(p, t.title, limits, sums, t.m)
		}); err != nil {
			return nil, err
		}
	}
	for _, c := range comparisons {
		var pub, ours []plot.Bars
		complete := true
		for k, l := range limits {
			row := relRow(r, c.subject(l), c.base(l), c.metric)
			if row == nil {
				complete = false
				break
			}
			p := append([]float64(nil), c.rows[k]...)
			if !c.hasTotal {
				p = append(p, math.NaN())
			}
			pub = append(pub, plot.Bars{Name: l, Values: p})
			ours = append(ours, plot.Bars{Name: l, Values: row})
		}
		if !complete {
			continue
		}
		title := fmt.Sprintf("Table %d: %s", c.num, c.title)
		cats := []string{"U1", "U2", "U3", "U4", "total"}
		if err := add(fmt.Sprintf("T%d", c.num), fmt.Sprintf("table%d.png", c.num), title, func(p string) error {
			return plot.RelDiffBars(p, fmt.Sprintf("Table %d (%% difference)", c.num), cats,
				plot.Panel{Title: "published (seed 000)", Series: pub},
				plot.Panel{Title: "this project (" + strconvI(r.runs) + " runs)", Series: ours})
		}); err != nil {
			return nil, err
		}
	}
	for _, t := range relPerfTests {
		panels := relPerfFigure(r, t.key)
		if len(panels) == 0 {
			continue
		}
		title := "Relative performance (seed 002), " + t.label + ": CDF of tt_EHOSEP / tt_HOSEP per task"
		if err := add("relperf"+t.key, "relperf-"+t.key+".png", title, func(p string) error {
			return plot.RelPerfCDF(p, "Relative performance, "+t.key+": one line per limit", "EHOSEP", "HOSEP", panels...)
		}); err != nil {
			return nil, err
		}
	}
	for _, ck := range ckptModes {
		var panels []plot.Panel
		var cats []string
		for _, d := range hosepDemands {
			o, h := r.get("H12-"+d+"-"+ck.label+"-osep"), r.get("H12-"+d+"-"+ck.label+"-hosep")
			if o == nil || h == nil {
				continue
			}
			var ov, oc, hv, hc []float64
			cats = cats[:0]
			for i := range o.sum.Orgs {
				cats = append(cats, o.sum.Orgs[i].Name)
				ov = append(ov, o.sum.Orgs[i].SatisfactionHOSEP.Mean)
				oc = append(oc, o.sum.Orgs[i].SatisfactionHOSEP.CI95)
				hv = append(hv, h.sum.Orgs[i].SatisfactionHOSEP.Mean)
				hc = append(hc, h.sum.Orgs[i].SatisfactionHOSEP.CI95)
			}
			panels = append(panels, plot.Panel{Title: d + " demand", Series: []plot.Bars{
				{Name: "OSEP", Values: ov, CI: oc}, {Name: "HOSEP", Values: hv, CI: hc},
			}})
		}
		if len(panels) == 0 {
			continue
		}
		title := "HOSEP 12-node grid (" + ck.label + "): satisfaction (seed 001 eq. 1-2), User1 late"
		if err := add("H12"+ck.label, "hosep12-"+ck.label+".png", title, func(p string) error {
			return plot.GroupedBars(p, "HOSEP 12 nodes, "+ck.label+": satisfaction (%)", "satisfaction (%)", cats, panels...)
		}); err != nil {
			return nil, err
		}
	}
	return figs, nil
}

func strconvI(n int) string { return fmt.Sprint(n) }

// ---- tables.md ----

func writeTablesMD(path string, r *campaignResults, figs []figure) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("tables.md: %w", err)
	}
	md := &mdWriter{w: f}
	figByKey := map[string]figure{}
	for _, fg := range figs {
		figByKey[fg.key] = fg
	}
	fig := func(key string) {
		if fg, ok := figByKey[key]; ok {
			md.f("![%s](%s)\n\n", fg.caption, fg.file)
		}
	}
	md.f("# Reproduction campaign: generated tables\n\n")
	md.f("Generated by `peer reproduce --runs %d --seed %d", r.runs, r.seed)
	if r.only != "" {
		md.f(" --only '%s'", r.only)
	}
	md.f("` (do not edit; `make sim` regenerates it). %d cases, %d runs each; run k of every case draws its tasks from seed %d+k−1, so policies are compared on identical workloads. Mean ± 95 %% CI over runs. See docs/REPRODUCTION.md for the discussion.\n\n", len(r.order), r.runs, r.seed)
	md.f("Satisfaction: %s.\n\n", simcase.SatisfactionNote)

	writeEngineSummary(md, r)
	writeFindings(md, r)
	writeComparisons(md, r, fig)
	writeAbsolute(md, r, "")
	writeSweeps(md, r, fig, "")
	writeHosep12(md, r, fig)
	writeSharing(md, r)
	if r.ispd != nil {
		md.f("# Under the author's iSPD semantics\n\n")
		md.f("The same cases run with `--engine ispd` (lab/sim/ispd.go; docs/REPRODUCTION.md \"The iSPD engine\"). A preempted task keeps nothing there (getCheckPoint() = 0), so every CC case equals its SC case; only SC is shown.\n\n")
		writeAbsolute(md, r.ispd, " (iSPD semantics)")
		writeSweeps(md, r.ispd, func(string) {}, " (iSPD semantics)")
	}
	writeFlips(md, r)
	writeRelPerf(md, r, fig)
	writeCaseIndex(md, r)

	if md.err != nil {
		f.Close()
		return fmt.Errorf("tables.md: %w", md.err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tables.md: %w", err)
	}
	return nil
}

func writeComparisons(md *mdWriter, r *campaignResults, fig func(string)) {
	md.f("## Tables 11-18: relative differences, published and ours\n\n")
	md.f("Each cell is (subject − base) / base · 100, per organisation, as the dissertation computes them; negative means the subject is lower. The published row is seed 000's; below it, ours with the paper's metric first (KJ/s for energy, mean turnaround) and then the metrics it could have used (total joules; geometric-mean turnaround and bounded slowdown, τ = 10 s and, seed 002's other value, τ = 100 s). \"Signs agree\" counts the cells, over the four organisations and the four limits, where ours has the published sign.\n\n")
	for _, c := range comparisons {
		md.f("### Table %d: %s\n\n", c.num, c.title)
		md.f("Subject `%s`…, base `%s`….\n\n", c.subject("80%"), c.base("80%"))
		md.header("limit", "", "U1", "U2", "U3", "U4", "total")
		agree, cells := 0, 0
		var absDiff float64
		ran := false
		for k, l := range limits {
			pub := append([]string(nil), "published")
			for i := range 4 {
				pub = append(pub, fmtPct(c.rows[k][i]))
			}
			if c.hasTotal {
				pub = append(pub, fmtPct(c.rows[k][4]))
			} else {
				pub = append(pub, "—")
			}
			md.row(append([]string{l}, pub...)...)
			for vi, v := range variants(c.metric) {
				row := relRow(r, c.subject(l), c.base(l), v.m)
				if row == nil {
					if vi == 0 {
						md.row("", "ours", "not run", "", "", "", "")
					}
					continue
				}
				ran = true
				cellsRow := []string{"", v.label}
				for i, x := range row {
					cellsRow = append(cellsRow, fmtPct(x))
					if vi == 0 && i < 4 && finite(x) {
						cells++
						absDiff += math.Abs(x - c.rows[k][i])
						if math.Signbit(x) == math.Signbit(c.rows[k][i]) {
							agree++
						}
					}
				}
				md.row(cellsRow...)
			}
			if r.ispd != nil {
				if row := relRow(r.ispd, c.subject(l), c.base(l), c.metric); row != nil {
					cellsRow := []string{"", "**iSPD semantics**, " + strings.TrimPrefix(variants(c.metric)[0].label, "ours, ")}
					for _, x := range row {
						cellsRow = append(cellsRow, fmtPct(x))
					}
					md.row(cellsRow...)
				}
			}
		}
		md.f("\n")
		if ran && cells > 0 {
			md.f("Signs agree in %d of %d cells; mean absolute difference %.1f percentage points.", agree, cells, absDiff/float64(cells))
			if st := tableAgreement(r.ispd, c); st.cells > 0 {
				md.f(" Under the iSPD semantics: signs agree in %d of %d cells; mean absolute difference %.1f percentage points.", st.agree, st.cells, st.mad)
			}
			md.f("\n\n")
		}
		fig(fmt.Sprintf("T%d", c.num))
	}
}

// agreement is how a table's cells (the four organisations at the four
// limits, the paper's metric) compare with the published ones.
type agreement struct {
	agree, cells int
	mad          float64 // mean absolute difference, percentage points
}

func tableAgreement(r *campaignResults, c comparison) agreement {
	var a agreement
	if r == nil {
		return a
	}
	var sum float64
	for k, l := range limits {
		row := relRow(r, c.subject(l), c.base(l), c.metric)
		if row == nil {
			return agreement{}
		}
		for i := range 4 {
			if x := row[i]; finite(x) {
				a.cells++
				sum += math.Abs(x - c.rows[k][i])
				if math.Signbit(x) == math.Signbit(c.rows[k][i]) {
					a.agree++
				}
			}
		}
	}
	if a.cells > 0 {
		a.mad = sum / float64(a.cells)
	}
	return a
}

// writeAbsolute gives the absolute figures behind tables 11-18.
func writeAbsolute(md *mdWriter, r *campaignResults, suffix string) {
	var names []string
	names = append(names, "P1-hosep")
	for _, l := range limits {
		names = append(names, "P1-ehosep-"+l)
	}
	for _, l := range limits {
		names = append(names, "P1-bestfit-"+l)
	}
	names = append(names, "P2-hosep")
	for _, l := range limits {
		names = append(names, s2m1sc(l))
	}
	for _, l := range limits {
		names = append(names, p2bestfit(l))
	}
	var rows []*caseResult
	for _, n := range names {
		if cr := r.get(n); cr != nil {
			rows = append(rows, cr)
		}
	}
	if len(rows) == 0 {
		return
	}
	md.f("## Absolute figures behind tables 11-18%s\n\n", suffix)
	md.f("Energy as user in KJ/s (the paper's unit: joules / makespan), total busy energy in MJ, makespan in minutes.\n\n")
	md.header("case", "policy", "U1 KJ/s", "U2 KJ/s", "U3 KJ/s", "U4 KJ/s", "total KJ/s", "total MJ", "makespan min")
	for _, cr := range rows {
		cells := []string{cr.c.Name, cr.c.Policy}
		for i := range cr.sum.Orgs {
			cells = append(cells, fmtStat(cr.sum.Orgs[i].UserKJs, 1, 3))
		}
		t := cr.sum.Total
		cells = append(cells, fmtStat(t.KJs, 1, 3), fmtStat(t.EnergyJ, 1e-6, 2), fmtStat(t.MakespanSeconds, 1.0/60, 1))
		md.row(cells...)
	}
	md.f("\nTurnaround in minutes: arithmetic mean per organisation, then over all tasks the mean, geometric mean and bounded slowdown; preemptions per run.\n\n")
	md.header("case", "U1", "U2", "U3", "U4", "all: mean", "all: geo. mean", "all: b. slowdown", "preemptions")
	for _, cr := range rows {
		cells := []string{cr.c.Name}
		for i := range cr.sum.Orgs {
			cells = append(cells, fmtStat(cr.sum.Orgs[i].TurnaroundMean, 1.0/60, 1))
		}
		t := cr.sum.Total
		cells = append(cells, fmtStat(t.TurnaroundMean, 1.0/60, 1), fmtStat(t.TurnaroundGeoMean, 1.0/60, 1),
			fmtStat(t.BoundedSlowdownMean, 1, 2), fmtStat(t.Preemptions, 1, 1))
		md.row(cells...)
	}
	md.f("\n")
}

func writeSweeps(md *mdWriter, r *campaignResults, fig func(string), suffix string) {
	header := false
	for _, s := range sequences {
		for _, ck := range ckptModes {
			if suffix != "" && ck.label == "CC" {
				continue // iSPD: CC = SC
			}
			first := r.get(seqCase(s.name, ck.label, limits[0]))
			if first == nil {
				continue
			}
			if !header {
				md.f("## Satisfaction sweeps (figures 2-10 and appendix A)%s\n\n", suffix)
				md.f("Satisfaction (eq. 4.1) per organisation with the late organisation's limit varied; in brackets the factors time ratio · α · β at the same limit (means over runs; the product of means is not exactly the mean of products); then u: the author's satisfacaoGeralUso (β over the organisation's own span of use).\n\n")
				header = true
			}
			md.f("### %s %s (%s late)\n\n", s.name, ck.label, s.late)
			cols := []string{"limit of " + s.late}
			for _, o := range first.sum.Orgs {
				cols = append(cols, o.Name)
			}
			md.header(cols...)
			for _, l := range limits {
				cr := r.get(seqCase(s.name, ck.label, l))
				if cr == nil {
					continue
				}
				cells := []string{l}
				for _, o := range cr.sum.Orgs {
					cells = append(cells, fmt.Sprintf("%s (%.0f·%.2f·%.2f) u %.0f", fmtStat(o.SatisfactionEHOSEP, 1, 1), o.TimeRatio.Mean, o.Alpha.Mean, o.Beta.Mean, o.SatisfactionUse.Mean))
				}
				md.row(cells...)
			}
			md.f("\n")
			fig(s.name + ck.label)
		}
	}
}

// sharing is §4.6's comparison for organisation o at limit l: the relative
// difference (federation − alone)/alone · 100 of its local consumption
// (KJ/s on its own machines, whoever used them) and of its mean
// turnaround; ok is false if a case did not run.
func sharing(r *campaignResults, l, o string) (energy, turnaround float64, ok bool) {
	fed, alone := r.get("P1-ehosep-"+l), r.get("I46-"+o)
	if fed == nil || alone == nil {
		return math.NaN(), math.NaN(), false
	}
	var f *sim.OrgSummary
	for i := range fed.sum.Orgs {
		if fed.sum.Orgs[i].Name == o {
			f = &fed.sum.Orgs[i]
		}
	}
	if f == nil || len(alone.sum.Orgs) != 1 {
		return math.NaN(), math.NaN(), false
	}
	a := &alone.sum.Orgs[0]
	return plot.RelPct(f.OwnerKJs.Mean, a.OwnerKJs.Mean), plot.RelPct(f.TurnaroundMean.Mean, a.TurnaroundMean.Mean), true
}

// engineResults is one engine's results of a campaign, labelled for a
// table's rows.
type engineResults struct {
	label string
	r     *campaignResults
}

// engines lists r's own results ("ours"), then the iSPD engine's when
// that engine ran too.
func (r *campaignResults) engines() []engineResults {
	out := []engineResults{{"ours", r}}
	if r.ispd != nil {
		out = append(out, engineResults{"iSPD", r.ispd})
	}
	return out
}

func writeSharing(md *mdWriter, r *campaignResults) {
	header := false
	for _, e := range r.engines() {
		for _, l := range limits {
			cells := []string{e.label, l}
			any := false
			for _, o := range sharingOrgs {
				en, tt, ok := sharing(e.r, l, o)
				any = any || ok
				cells = append(cells, fmtPct(en)+" / "+fmtPct(tt))
			}
			if !any {
				continue
			}
			if !header {
				md.f("## Sharing against keeping one's machines (§4.6, figures 19-22)\n\n")
				md.f("Each organisation in test 1 (`P1-ehosep-L`, everyone at limit L) against the same organisation alone with its own tasks on its own machines under SJF (`I46-Uk`: EHOSEP with one organisation, L1499). Cells: relative difference (federation − alone)/alone · 100 of its **local consumption** (KJ/s on its own machines, whoever used them) / of its **mean turnaround**; negative means sharing is better. The figures are not in the seed text; the prose (L1509-1525) is checked in the findings above (`I46-*`).\n\n")
				md.header("engine", "limit", "U1 local / turnaround", "U2", "U3", "U4")
				header = true
			}
			md.row(cells...)
		}
	}
	if header {
		md.f("\n")
	}
}

func writeHosep12(md *mdWriter, r *campaignResults, fig func(string)) {
	header := false
	for _, ck := range ckptModes {
		for _, d := range hosepDemands {
			o, h := r.get("H12-"+d+"-"+ck.label+"-osep"), r.get("H12-"+d+"-"+ck.label+"-hosep")
			if o == nil || h == nil {
				continue
			}
			if !header {
				md.f("## HOSEP 12-node grid (seed 001 §4)\n\n")
				md.f("Satisfaction by the HOSEP paper's formula (eqs. 1-2: 100 · ideal/real time, ideal on a machine of the organisation's own mean power), User1 late. Published (prose only): under OSEP User1 is about as satisfied as User2 and little above User4; under HOSEP User1 is always the most satisfied, about 80 %%, and the others follow their contributed power.\n\n")
				md.header("demand", "ckpt", "policy", "User1", "User2", "User3", "User4", "preemptions")
				header = true
			}
			for _, cr := range []*caseResult{o, h} {
				cells := []string{d, ck.label, cr.c.Policy}
				for i := range cr.sum.Orgs {
					cells = append(cells, fmtStat(cr.sum.Orgs[i].SatisfactionHOSEP, 1, 1))
				}
				cells = append(cells, fmtStat(cr.sum.Total.Preemptions, 1, 1))
				md.row(cells...)
			}
		}
	}
	if header {
		md.f("\n")
		fig("H12CC")
		fig("H12SC")
	}
	writeHosep12Variants(md, r)
}

// writeHosep12Variants sets the HOSEP grid's satisfaction under the
// paper's definition 5 (ideal on the organisation's mean own machine)
// beside the ideal on the machine that completed the task, under both
// engines (SC; CC equals SC in both here).
func writeHosep12Variants(md *mdWriter, r *campaignResults) {
	header := false
	for _, e := range r.engines() {
		for _, d := range hosepDemands {
			for _, pol := range []string{"osep", "hosep"} {
				cr := e.r.get("H12-" + d + "-SC-" + pol)
				if cr == nil {
					continue
				}
				if !header {
					md.f("### HOSEP 12-node grid: two definitions of the ideal time, two engines\n\n")
					md.f("SC. \"def. 5\": the paper's definition 5 (ideal on a machine of the organisation's own mean power, the table above); \"exec.\": the ideal on the machine that completed the task. Published: under HOSEP User1 the most satisfied, about 80 %%, the others following their power.\n\n")
					md.header("engine", "demand", "policy", "User1 def. 5", "User2", "User3", "User4", "User1 exec.", "User2", "User3", "User4")
					header = true
				}
				cells := []string{e.label, d, pol}
				for _, get := range []func(o *sim.OrgSummary) sim.Stat{satHOSEP, func(o *sim.OrgSummary) sim.Stat { return o.SatisfactionHOSEPExec }} {
					for i := range cr.sum.Orgs {
						cells = append(cells, fmtStat(get(&cr.sum.Orgs[i]), 1, 1))
					}
				}
				md.row(cells...)
			}
		}
	}
	if header {
		md.f("\n")
	}
}

// writeFlips lists the comparisons of tables 11-18 where the verdict
// (better or worse) depends on the metric: KJ/s against total joules, and
// mean turnaround against its geometric mean and bounded slowdown (seed
// 002's point).
func writeFlips(md *mdWriter, r *campaignResults) {
	type flip struct{ where, values string }
	var flips []flip
	orgs := []string{"U1", "U2", "U3", "U4", "total"}
	for _, c := range comparisons {
		vs := variants(c.metric)
		for _, l := range limits {
			rows := make([][]float64, len(vs))
			ok := true
			for vi, v := range vs {
				rows[vi] = relRow(r, c.subject(l), c.base(l), v.m)
				ok = ok && rows[vi] != nil
			}
			if !ok {
				continue
			}
			for i := range orgs {
				pos, neg := false, false
				var parts []string
				for vi, v := range vs {
					x := rows[vi][i]
					// Differences under 1 % are noise at 60 runs, not a
					// verdict.
					if finite(x) && x > 1 {
						pos = true
					}
					if finite(x) && x < -1 {
						neg = true
					}
					parts = append(parts, fmt.Sprintf("%s %s", strings.TrimPrefix(v.label, "ours, "), fmtPct(x)))
				}
				if pos && neg {
					flips = append(flips, flip{fmt.Sprintf("table %d, %s, %s", c.num, l, orgs[i]), strings.Join(parts, "; ")})
				}
			}
		}
	}
	if len(flips) == 0 && r.get("P1-hosep") == nil && r.get("P2-hosep") == nil {
		return
	}
	md.f("## Where the verdict depends on the metric\n\n")
	md.f("Cells of tables 11-18 (ours) where one metric says the subject is more than 1 %% better and another more than 1 %% worse.\n\n")
	if len(flips) == 0 {
		md.f("None.\n\n")
		return
	}
	md.header("cell", "relative differences (%)")
	for _, fl := range flips {
		md.row(fl.where, fl.values)
	}
	md.f("\n")
}

func writeCaseIndex(md *mdWriter, r *campaignResults) {
	md.f("## Cases\n\n")
	md.f("Every case with the `peer sim` flags that reproduce it alone (add `--runs %d --seed %d`; the full summaries are in results.json).\n\n", r.runs, r.seed)
	md.header("case", "command")
	for _, cr := range r.order {
		c := cr.c
		cmd := fmt.Sprintf("`peer sim --scenario examples/scenarios/%s --policy %s --checkpoint %s", c.Scenario, c.Policy, c.Checkpoint)
		if c.Late != "" {
			cmd += " --late " + c.Late
		}
		if c.LateLimit != "" {
			cmd += " --limit " + c.LateLimit
		}
		if c.AllLimit != "" {
			cmd += " --limit-all " + c.AllLimit
		}
		md.row(c.Name, cmd+"`")
	}
	md.f("\n")
}

// ---- the published findings, checked ----

// checker accumulates the sub-claims of one finding.
type checker struct {
	r       *campaignResults
	form    satForm
	missing bool
	// usedSat says the finding read eq. 4.1, so that its other forms are
	// worth checking too.
	usedSat bool
	ok, n   int
	parts   []string
}

// satForm is a reading of eq. 4.1 (POLICY.md §5): the time ratios summed
// over the organisation's tasks (as printed) or averaged (as the author's
// code does, our decision), and β with or without the +1 of the code.
type satForm struct {
	name       string
	sum, plus1 bool
	// use reads the author's second form, satisfacaoGeralUso (β over the
	// organisation's own span of use; Metricas.java L604-653).
	use bool
}

var (
	decidedForm = satForm{name: "as decided (mean, +1)", plus1: true}
	otherForms  = []satForm{
		{name: "sum, +1", sum: true, plus1: true},
		{name: "mean, no +1"},
		{name: "as printed (sum, no +1)", sum: true},
		{name: "satisfacaoGeralUso (mean, +1, β over own span)", plus1: true, use: true},
	}
)

// stat returns org's metric in a case, marking the finding not run when the
// case is absent.
func (c *checker) stat(caseName, org string, get func(o *sim.OrgSummary) sim.Stat) float64 {
	cr := c.r.get(caseName)
	if cr == nil {
		c.missing = true
		return math.NaN()
	}
	for i := range cr.sum.Orgs {
		if cr.sum.Orgs[i].Name == org {
			return get(&cr.sum.Orgs[i]).Mean
		}
	}
	c.missing = true
	return math.NaN()
}

func satEHOSEP(o *sim.OrgSummary) sim.Stat { return o.SatisfactionEHOSEP }
func satHOSEP(o *sim.OrgSummary) sim.Stat  { return o.SatisfactionHOSEP }

// sat is the eq. 4.1 satisfaction of org in a case.
func (c *checker) sat(caseName, org string) float64 {
	c.usedSat = true
	if c.form == decidedForm {
		return c.stat(caseName, org, satEHOSEP)
	}
	if c.form.use {
		return c.stat(caseName, org, func(o *sim.OrgSummary) sim.Stat { return o.SatisfactionUse })
	}
	// Another form: recompute each run's S from its factors, then average
	// over runs as sim.Stat does.
	cr := c.r.get(caseName)
	if cr == nil {
		c.missing = true
		return math.NaN()
	}
	var vals []float64
	for _, run := range cr.sum.PerRun {
		for _, o := range run.Orgs {
			if o.Name != org {
				continue
			}
			v := o.TimeRatio * o.Alpha
			if c.form.sum {
				v *= float64(o.Tasks)
			}
			if c.form.plus1 {
				v *= o.Beta
			} else {
				v *= o.Beta - 1
			}
			vals = append(vals, v)
		}
	}
	st := sim.NewStat(vals)
	if st.N == 0 {
		c.missing = true
	}
	return st.Mean
}

// claim records one sub-claim.
func (c *checker) claim(ok bool, format string, args ...any) {
	if c.missing {
		return
	}
	c.n++
	mark := "✗"
	if ok {
		c.ok++
		mark = "✓"
	}
	c.parts = append(c.parts, mark+" "+fmt.Sprintf(format, args...))
}

// gt claims a > b, two named values.
func (c *checker) gt(label string, an string, a float64, bn string, b float64) {
	c.claim(a > b, "%s%s %.1f > %s %.1f", label, an, a, bn, b)
}

func (c *checker) verdict() (string, string) {
	switch {
	case c.missing:
		return "not run", ""
	case c.ok == c.n:
		return "reproduced", strings.Join(c.parts, "; ")
	case c.ok == 0:
		return "not reproduced", strings.Join(c.parts, "; ")
	}
	return fmt.Sprintf("partly (%d of %d)", c.ok, c.n), strings.Join(c.parts, "; ")
}

// finding is one published claim and how our data is checked against it.
type finding struct {
	id, where, claim string
	check            func(c *checker)
}

func findings() []finding {
	var fs []finding
	lim := func(l string) string { return l + ": " }
	for _, ck := range []string{"CC", "SC"} {
		s := func(l string) string { return seqCase("S1M1", ck, l) }
		fs = append(fs,
			finding{"S1M1" + ck + "-a", "§4.3.1 L1230", "S1M1 " + ck + ": at 80 % the late U1 is less satisfied than U2", func(c *checker) {
				c.gt(lim("80%"), "U2", c.sat(s("80%"), "U2"), "U1", c.sat(s("80%"), "U1"))
			}},
			finding{"S1M1" + ck + "-b", "§4.3.1 L1232", "S1M1 " + ck + ": U1's satisfaction rises with its limit up to 150 %, then falls at whole system (it loses the advantage of the lower limit)", func(c *checker) {
				v := func(l string) float64 { return c.sat(s(l), "U1") }
				c.gt("U1 ", "150%", v("150%"), "100%", v("100%"))
				c.gt("U1 ", "100%", v("100%"), "80%", v("80%"))
				c.gt("U1 ", "150%", v("150%"), "system", v("system"))
			}},
			finding{"S1M1" + ck + "-c", "§4.3.1 L1234", "S1M1 " + ck + ": from 100 % on, satisfaction follows contributed power (U1 > U2 > U3, U4)", func(c *checker) {
				for _, l := range limits[1:] {
					c.gt(lim(l), "U1", c.sat(s(l), "U1"), "U2", c.sat(s(l), "U2"))
					c.gt(lim(l), "U2", c.sat(s(l), "U2"), "max(U3,U4)", math.Max(c.sat(s(l), "U3"), c.sat(s(l), "U4")))
				}
			}},
			finding{"S1M1" + ck + "-d", "§4.3.1 L1234", "S1M1 " + ck + ": U4 above U3 throughout (similar power, U4 far more efficient)", func(c *checker) {
				for _, l := range limits {
					c.gt(lim(l), "U4", c.sat(s(l), "U4"), "U3", c.sat(s(l), "U3"))
				}
			}},
		)
	}
	fs = append(fs, finding{"S1M1-cc", "§4.3.1 L1238", "S1M1: checkpointing has little impact on satisfaction (CC ≈ SC)", func(c *checker) {
		worst, where := 0.0, ""
		for _, l := range limits {
			for _, o := range []string{"U1", "U2", "U3", "U4"} {
				cc, sc := c.sat(seqCase("S1M1", "CC", l), o), c.sat(seqCase("S1M1", "SC", l), o)
				if d := math.Abs(cc-sc) / math.Abs(sc); d > worst {
					worst, where = d, fmt.Sprintf("%s at %s: CC %.1f, SC %.1f", o, l, cc, sc)
				}
			}
		}
		if where == "" {
			where = "every organisation at every limit: CC = SC"
		}
		c.claim(worst < 0.10, "largest abs(CC − SC) / SC = %.1f %% (%s); claim holds if < 10 %%", 100*worst, where)
	}})
	sc := func(seq string) func(string) string {
		return func(l string) string { return seqCase(seq, "SC", l) }
	}
	s2, s3, s4 := sc("S2M1"), sc("S3M1"), sc("S4M1")
	fs = append(fs,
		finding{"S2M1-a", "§4.3.2 L1254", "S2M1 SC: while U2's limit is below the others', its satisfaction rises with the limit and passes U1's", func(c *checker) {
			v := func(l string) float64 { return c.sat(s2(l), "U2") }
			c.gt("U2 ", "100%", v("100%"), "80%", v("80%"))
			c.gt("U2 ", "150%", v("150%"), "100%", v("100%"))
			best, at := math.Inf(-1), ""
			for _, l := range limits[:3] {
				if d := c.sat(s2(l), "U2") - c.sat(s2(l), "U1"); d > best {
					best, at = d, l
				}
			}
			c.claim(best > 0, "U2 − U1 at its best limit below system (%s): %+.1f", at, best)
		}},
		finding{"S2M1-b", "§4.3.2 L1256", "S2M1 SC: at whole system U2 falls below U1", func(c *checker) {
			c.gt(lim("system"), "U1", c.sat(s2("system"), "U1"), "U2", c.sat(s2("system"), "U2"))
		}},
		finding{"S2M1-c", "§4.3.2 L1262", "S2M1 SC: U4 above U3 throughout", func(c *checker) {
			for _, l := range limits {
				c.gt(lim(l), "U4", c.sat(s2(l), "U4"), "U3", c.sat(s2(l), "U3"))
			}
		}},
		finding{"S3M1-a", "§4.3.3 L1266", "S3M1 SC: at 80 % the late U3 is more satisfied than U1", func(c *checker) {
			c.gt(lim("80%"), "U3", c.sat(s3("80%"), "U3"), "U1", c.sat(s3("80%"), "U1"))
		}},
		finding{"S3M1-b", "§4.3.3 L1268", "S3M1 SC: as U3's limit rises its satisfaction falls; U2's rises a little, U1's and U4's fall a little", func(c *checker) {
			c.gt("U3 ", "80%", c.sat(s3("80%"), "U3"), "system", c.sat(s3("system"), "U3"))
			c.gt("U2 ", "system", c.sat(s3("system"), "U2"), "80%", c.sat(s3("80%"), "U2"))
			c.gt("U1 ", "80%", c.sat(s3("80%"), "U1"), "system", c.sat(s3("system"), "U1"))
			c.gt("U4 ", "80%", c.sat(s3("80%"), "U4"), "system", c.sat(s3("system"), "U4"))
		}},
		finding{"S4M1-a", "§4.3.4 L1272", "S4M1 SC: at 80 % everyone else is more satisfied than in the other Model 1 sequences (U4 takes few machines)", func(c *checker) {
			for _, o := range []struct{ org, others string }{{"U1", "S2M1 S3M1"}, {"U2", "S1M1 S3M1"}, {"U3", "S1M1 S2M1"}} {
				for _, other := range strings.Fields(o.others) {
					c.gt(o.org+": ", "S4M1", c.sat(s4("80%"), o.org), other, c.sat(sc(other)("80%"), o.org))
				}
			}
		}},
		finding{"S4M1-b", "§4.3.4 L1282", "S4M1 SC: up to 150 %, U4 is more satisfied than U2", func(c *checker) {
			for _, l := range limits[:3] {
				c.gt(lim(l), "U4", c.sat(s4(l), "U4"), "U2", c.sat(s4(l), "U2"))
			}
		}},
		finding{"S4M1-c", "§4.3.4 L1286", "S4M1 SC: at whole system satisfaction follows the quotas (U1 > U2 > U4 > U3)", func(c *checker) {
			v := func(o string) float64 { return c.sat(s4("system"), o) }
			c.gt("", "U1", v("U1"), "U2", v("U2"))
			c.gt("", "U2", v("U2"), "U4", v("U4"))
			c.gt("", "U4", v("U4"), "U3", v("U3"))
		}},
	)
	m1, m2, m3 := sc("S1M2"), sc("S2M2"), sc("S3M2")
	fs = append(fs,
		finding{"S1M2-a", "§4.3.5 L1295", "S1M2 SC: U2 more satisfied than U3 throughout (efficiency)", func(c *checker) {
			for _, l := range limits {
				c.gt(lim(l), "U2", c.sat(m1(l), "U2"), "U3", c.sat(m1(l), "U3"))
			}
		}},
		finding{"S1M2-b", "§4.3.5 L1295", "S1M2 SC: the late, limited U1 more satisfied than U2 throughout", func(c *checker) {
			for _, l := range limits {
				c.gt(lim(l), "U1", c.sat(m1(l), "U1"), "U2", c.sat(m1(l), "U2"))
			}
		}},
		finding{"S2M2-a", "§4.3.6 L1299-1304", "S2M2 SC: U2 less satisfied than U1 at 80 % and 100 %, more only at 150 % (hypothesis III)", func(c *checker) {
			for _, l := range limits[:2] {
				c.gt(lim(l), "U1", c.sat(m2(l), "U1"), "U2", c.sat(m2(l), "U2"))
			}
			c.gt(lim("150%"), "U2", c.sat(m2("150%"), "U2"), "U1", c.sat(m2("150%"), "U1"))
		}},
		finding{"S2M2-b", "§4.3.6 L1304", "S2M2 SC: U1 and U2 far more satisfied than U3 throughout", func(c *checker) {
			for _, l := range limits {
				c.gt(lim(l), "min(U1,U2)", math.Min(c.sat(m2(l), "U1"), c.sat(m2(l), "U2")), "U3", c.sat(m2(l), "U3"))
			}
		}},
		finding{"S3M2-a", "§4.3.7 L1308", "S3M2 SC: as the late U3 raises its limit, U1's satisfaction falls", func(c *checker) {
			c.gt("U1 ", "80%", c.sat(m3("80%"), "U1"), "system", c.sat(m3("system"), "U1"))
		}},
		finding{"S3M2-b", "§4.3.7 L1308-1310", "S3M2 SC: U1 and U2 above U3 throughout, however low U3's limit (hypothesis III not confirmed)", func(c *checker) {
			for _, l := range limits {
				c.gt(lim(l), "min(U1,U2)", math.Min(c.sat(m3(l), "U1"), c.sat(m3(l), "U2")), "U3", c.sat(m3(l), "U3"))
			}
		}},
	)
	rel := func(c *checker, cmp comparison, l string, m plot.Metric) []float64 {
		row := relRow(c.r, cmp.subject(l), cmp.base(l), m)
		if row == nil {
			c.missing = true
			return []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()}
		}
		return row
	}
	t := func(n int) comparison { return comparisons[n-11] }
	fs = append(fs,
		finding{"T11-a", "§4.4.1 L1362, table 11", "Test 1: the tighter the limits, the more energy EHOSEP saves against HOSEP (total −51.67, −34.94, −11.73, +2.55 %)", func(c *checker) {
			var tot []float64
			for _, l := range limits {
				tot = append(tot, rel(c, t(11), l, plot.EnergyKJs)[4])
			}
			c.claim(tot[0] < 0, "80%%: total %+.2f %% < 0", tot[0])
			for k := 1; k < len(limits); k++ {
				c.claim(tot[k] > tot[k-1], "%s: total %+.2f %% > %s: %+.2f %%", limits[k], tot[k], limits[k-1], tot[k-1])
			}
		}},
		finding{"T11-b", "§4.4.1 L1381, table 11", "Test 1: with unlimited power EHOSEP uses about as much energy as HOSEP (total +2.55 %)", func(c *checker) {
			v := rel(c, t(11), "system", plot.EnergyKJs)[4]
			c.claim(math.Abs(v) < 5, "system: total %+.2f %% within ±5 %%", v)
		}},
		finding{"T12-a", "§4.4.1 L1362, L1377, table 12", "Test 1: at 80 % U2 and U4 lose most turnaround (+42.73 %, +106.93 %), U4 most", func(c *checker) {
			v := rel(c, t(12), "80%", plot.Turnaround)
			c.claim(v[3] > v[0] && v[3] > v[1] && v[3] > v[2], "U4 %+.1f %% the largest (U1 %+.1f, U2 %+.1f, U3 %+.1f)", v[3], v[0], v[1], v[2])
			c.claim(v[1] > v[0] && v[1] > v[2], "U2 %+.1f %% above U1 and U3", v[1])
		}},
		finding{"T12-b", "§4.4.1 L1379, table 12", "Test 1: U1's turnaround is lower under EHOSEP at every limit", func(c *checker) {
			for _, l := range limits {
				v := rel(c, t(12), l, plot.Turnaround)[0]
				c.claim(v < 0, "%s: U1 %+.2f %%", l, v)
			}
		}},
		finding{"T13", "§4.4.2, table 13", "Test 2: the late U2 uses less energy under EHOSEP at every limit (−12.50, −1.95, −7.73, −11.18 %)", func(c *checker) {
			for _, l := range limits {
				v := rel(c, t(13), l, plot.EnergyKJs)[1]
				c.claim(v < 0, "%s: U2 %+.2f %%", l, v)
			}
		}},
		finding{"T14", "§4.4.2 L1393, table 14", "Test 2: U2's turnaround is much worse at 80 % (+44.88 %), improves as its limit rises, and beats HOSEP only at whole system", func(c *checker) {
			var v []float64
			for _, l := range limits {
				v = append(v, rel(c, t(14), l, plot.Turnaround)[1])
			}
			c.claim(v[0] > 10, "80%%: U2 %+.1f %% > +10 %%", v[0])
			for k := 1; k < len(v); k++ {
				c.claim(v[k] < v[k-1], "%s: U2 %+.1f %% < %s: %+.1f %%", limits[k], v[k], limits[k-1], v[k-1])
			}
			c.claim(v[3] < 0, "system: U2 %+.1f %% < 0", v[3])
		}},
	)
	for _, bf := range []struct {
		id, where, claim string
		energy, turn     int
	}{
		{"BF-1", "§4.5, tables 15-16", "Test 1: Best Fit raises energy (published: 14 of 16 cells) and turnaround (16 of 16) against Worst Fit", 15, 16},
		{"BF-2", "§4.5, tables 17-18", "Test 2: Best Fit raises energy (published: 16 of 16 cells) and turnaround (16 of 16) against Worst Fit", 17, 18},
	} {
		fs = append(fs, finding{bf.id, bf.where, bf.claim, func(c *checker) {
			for _, tn := range []int{bf.energy, bf.turn} {
				pos, n := 0, 0
				for _, l := range limits {
					for _, v := range rel(c, t(tn), l, t(tn).metric)[:4] {
						if finite(v) {
							n++
							if v > 0 {
								pos++
							}
						}
					}
				}
				pubPos := 0
				for _, row := range t(tn).rows {
					for _, v := range row[:4] {
						if v > 0 {
							pubPos++
						}
					}
				}
				c.claim(pos >= pubPos-2 && pos > n/2, "table %d: %d of %d cells positive (published %d)", tn, pos, n, pubPos)
			}
		}})
	}
	for _, ck := range []string{"CC", "SC"} {
		h := func(d, pol string) string { return "H12-" + d + "-" + ck + "-" + pol }
		hs := func(c *checker, d, pol, org string) float64 { return c.stat(h(d, pol), org, satHOSEP) }
		fs = append(fs,
			finding{"H12" + ck + "-a", "seed 001 §4", "HOSEP 12 nodes, " + ck + ": under OSEP User1 is about as satisfied as User2 (within 20 %)", func(c *checker) {
				for _, d := range hosepDemands {
					u1, u2 := hs(c, d, "osep", "User1"), hs(c, d, "osep", "User2")
					c.claim(math.Abs(u1/u2-1) < 0.2, "%s: User1 %.1f, User2 %.1f", d, u1, u2)
				}
			}},
			finding{"H12" + ck + "-b", "seed 001 §4", "HOSEP 12 nodes, " + ck + ": under HOSEP User1 is the most satisfied, about 80 %, and the others follow their power (User2 > User3 > User4)", func(c *checker) {
				for _, d := range hosepDemands {
					u := []float64{hs(c, d, "hosep", "User1"), hs(c, d, "hosep", "User2"), hs(c, d, "hosep", "User3"), hs(c, d, "hosep", "User4")}
					c.claim(u[0] > u[1] && u[0] > u[2] && u[0] > u[3], "%s: User1 %.1f the highest (%.1f, %.1f, %.1f)", d, u[0], u[1], u[2], u[3])
					c.claim(u[0] >= 65 && u[0] <= 95, "%s: User1 %.1f within 65-95", d, u[0])
					c.claim(u[1] > u[2] && u[2] > u[3], "%s: User2 %.1f > User3 %.1f > User4 %.1f", d, u[1], u[2], u[3])
				}
			}},
			finding{"H12" + ck + "-c", "seed 001 §4", "HOSEP 12 nodes, " + ck + ": HOSEP's gain for User1 over OSEP grows with task size (low < medium < high demand)", func(c *checker) {
				var g []float64
				for _, d := range hosepDemands {
					g = append(g, hs(c, d, "hosep", "User1")-hs(c, d, "osep", "User1"))
				}
				c.claim(g[0] < g[1] && g[1] < g[2], "gain %+.1f, %+.1f, %+.1f points", g[0], g[1], g[2])
			}},
		)
	}
	// §4.6 (L1509-1525): sharing against each organisation alone.
	sh := func(c *checker, l, o string) (float64, float64) {
		e, t, ok := sharing(c.r, l, o)
		if !ok {
			c.missing = true
		}
		return e, t
	}
	fs = append(fs,
		finding{"I46-a", "§4.6 L1509", "Sharing at 80 %: every organisation's local consumption is lower than alone, U1's and U3's savings the largest", func(c *checker) {
			var e [4]float64
			for k, o := range sharingOrgs {
				e[k], _ = sh(c, "80%", o)
				c.claim(e[k] < 0, "%s local %+.1f %%", o, e[k])
			}
			c.claim(math.Max(e[0], e[2]) < math.Min(e[1], e[3]), "U1 %+.1f and U3 %+.1f below U2 %+.1f and U4 %+.1f", e[0], e[2], e[1], e[3])
		}},
		finding{"I46-b", "§4.6 L1509-1511", "Sharing at 80 %: U1's and U2's mean turnaround 20-60 % higher than alone; U3's lower (about −60 %); U4's not lower", func(c *checker) {
			_, t1 := sh(c, "80%", "U1")
			_, t2 := sh(c, "80%", "U2")
			_, t3 := sh(c, "80%", "U3")
			_, t4 := sh(c, "80%", "U4")
			c.claim(t1 >= 20 && t1 <= 60, "U1 %+.1f %% within +20 to +60", t1)
			c.claim(t2 >= 20 && t2 <= 60, "U2 %+.1f %% within +20 to +60", t2)
			c.claim(t3 < -30, "U3 %+.1f %% well below 0", t3)
			c.claim(t4 >= 0, "U4 %+.1f %% not below 0", t4)
		}},
		finding{"I46-c", "§4.6 L1521", "As the limits rise, local savings shrink and U3's and U4's turnarounds fall", func(c *checker) {
			for _, o := range sharingOrgs {
				e80, t80 := sh(c, "80%", o)
				es, ts := sh(c, "system", o)
				c.claim(es > e80, "%s local %+.1f %% at system > %+.1f %% at 80 %%", o, es, e80)
				if o == "U3" || o == "U4" {
					c.claim(ts < t80, "%s turnaround %+.1f %% at system < %+.1f %% at 80 %%", o, ts, t80)
				}
			}
		}},
		finding{"I46-d", "§4.6 L1521-1525", "Without limits, U1, U2 and U4 still save at least 20 % of local consumption; U1's and U2's turnaround rises by at most 30 %", func(c *checker) {
			for _, o := range []string{"U1", "U2", "U4"} {
				e, _ := sh(c, "system", o)
				c.claim(e <= -20, "%s local %+.1f %% ≤ −20 %%", o, e)
			}
			for _, o := range []string{"U1", "U2"} {
				_, t := sh(c, "system", o)
				c.claim(t <= 30, "%s turnaround %+.1f %% ≤ +30 %%", o, t)
			}
		}},
	)
	// The same claims with the ideal time on the machine that completed the
	// task (the first half of seed 001's definition 5: "esse tempo agora
	// depende da máquina utilizada"), SC (CC is the same here).
	hx := func(c *checker, d, pol, org string) float64 {
		return c.stat("H12-"+d+"-SC-"+pol, org, func(o *sim.OrgSummary) sim.Stat { return o.SatisfactionHOSEPExec })
	}
	fs = append(fs,
		finding{"H12x-a", "seed 001 §4", "HOSEP 12 nodes, SC, ideal on the executing machine: under OSEP User1 is about as satisfied as User2 (within 20 %)", func(c *checker) {
			for _, d := range hosepDemands {
				u1, u2 := hx(c, d, "osep", "User1"), hx(c, d, "osep", "User2")
				c.claim(math.Abs(u1/u2-1) < 0.2, "%s: User1 %.1f, User2 %.1f", d, u1, u2)
			}
		}},
		finding{"H12x-b", "seed 001 §4", "HOSEP 12 nodes, SC, ideal on the executing machine: under HOSEP User1 is the most satisfied, about 80 %, and the others follow their power", func(c *checker) {
			for _, d := range hosepDemands {
				u := []float64{hx(c, d, "hosep", "User1"), hx(c, d, "hosep", "User2"), hx(c, d, "hosep", "User3"), hx(c, d, "hosep", "User4")}
				c.claim(u[0] > u[1] && u[0] > u[2] && u[0] > u[3], "%s: User1 %.1f the highest (%.1f, %.1f, %.1f)", d, u[0], u[1], u[2], u[3])
				c.claim(u[0] >= 65 && u[0] <= 95, "%s: User1 %.1f within 65-95", d, u[0])
				c.claim(u[1] > u[2] && u[2] > u[3], "%s: User2 %.1f > User3 %.1f > User4 %.1f", d, u[1], u[2], u[3])
			}
		}},
	)
	return fs
}

// verdictCounts counts the findings reproduced fully, partly and not.
type verdictCounts struct{ full, part, not int }

func (v *verdictCounts) add(verdict string) {
	switch {
	case verdict == "reproduced":
		v.full++
	case verdict == "not reproduced":
		v.not++
	case strings.HasPrefix(verdict, "partly"):
		v.part++
	}
}

// countVerdicts checks every finding on r under the decided form.
func countVerdicts(r *campaignResults, satOnly bool) verdictCounts {
	var v verdictCounts
	for _, f := range findings() {
		c := &checker{r: r, form: decidedForm}
		f.check(c)
		if satOnly && !c.usedSat {
			continue
		}
		verdict, _ := c.verdict()
		v.add(verdict)
	}
	return v
}

func writeFindings(md *mdWriter, r *campaignResults) {
	md.f("## Published findings, checked\n\n")
	md.f("Each published claim (seed 000 §4.3-4.5, seed 001 §4) is checked against our means: ✓ / ✗ per sub-claim, the numbers beside. A sub-claim compares means only; look up the CIs in the tables below before reading much into a difference of a few points. Satisfaction is eq. 4.1 as POLICY.md §5 decided (mean over tasks, β with +1); the column \"other forms\" gives the verdict under the other readings of eq. 4.1, recomputed run by run from the same simulations (\"sum\" multiplies each organisation's figure by its number of tasks; satisfacaoGeralUso is the author's code's second form). The last two columns check the same claim on the campaign run under the author's iSPD semantics (`--engine ispd`, lab/sim/ispd.go).\n\n")
	md.header("id", "source", "claim", "verdict", "our numbers", "other forms of eq. 4.1", "iSPD semantics", "iSPD numbers")
	for _, f := range findings() {
		c := &checker{r: r, form: decidedForm}
		f.check(c)
		v, detail := c.verdict()
		others := "—"
		if c.usedSat && !c.missing {
			var parts []string
			for _, form := range otherForms {
				oc := &checker{r: r, form: form}
				f.check(oc)
				ov, _ := oc.verdict()
				parts = append(parts, form.name+": "+ov)
			}
			others = strings.Join(parts, "; ")
		}
		iv, idetail := "not run", ""
		if r.ispd != nil {
			ic := &checker{r: r.ispd, form: decidedForm}
			f.check(ic)
			iv, idetail = ic.verdict()
			if ic.usedSat && !ic.missing {
				uc := &checker{r: r.ispd, form: otherForms[len(otherForms)-1]}
				f.check(uc)
				uv, udetail := uc.verdict()
				idetail += " — with satisfacaoGeralUso: **" + uv + "**: " + udetail
			}
		}
		md.row(f.id, f.where, f.claim, "**"+v+"**", detail, others, "**"+iv+"**", idetail)
	}
	md.f("\n")
}

// writeEngineSummary sets the two engines side by side: per published
// table the signs that agree and the mean absolute difference, and the
// findings' verdicts.
func writeEngineSummary(md *mdWriter, r *campaignResults) {
	if r.ispd == nil {
		return
	}
	md.f("## The two engines at a glance\n\n")
	md.f("This project's model (`--engine default`) and the author's iSPD semantics (`--engine ispd`) on the same seeds. Per table: signs that agree with the published cells (4 organisations × 4 limits) and the mean absolute difference in percentage points, in the paper's metric.\n\n")
	md.header("table", "ours: signs", "ours: mean abs. diff.", "iSPD: signs", "iSPD: mean abs. diff.")
	for _, c := range comparisons {
		a, b := tableAgreement(r, c), tableAgreement(r.ispd, c)
		if a.cells == 0 && b.cells == 0 {
			continue
		}
		md.row(fmt.Sprint(c.num), fmt.Sprintf("%d / %d", a.agree, a.cells), fmt.Sprintf("%.1f", a.mad),
			fmt.Sprintf("%d / %d", b.agree, b.cells), fmt.Sprintf("%.1f", b.mad))
	}
	md.f("\n")
	md.header("findings", "ours: full / partly / not", "iSPD: full / partly / not")
	for _, k := range []struct {
		label   string
		satOnly bool
	}{{"§4.3 satisfaction", true}, {"all", false}} {
		a, b := countVerdicts(r, k.satOnly), countVerdicts(r.ispd, k.satOnly)
		md.row(k.label, fmt.Sprintf("%d / %d / %d", a.full, a.part, a.not), fmt.Sprintf("%d / %d / %d", b.full, b.part, b.not))
	}
	md.f("\n")
}
