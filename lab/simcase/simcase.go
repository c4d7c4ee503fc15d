// Package simcase is the body of `peer sim`: one case of the simulator (a
// scenario under a policy, with the command's options), run over many
// seeds and reported as a table, one JSON object, or files (per-task CSV,
// the summary JSON and charts). `peer reproduce` builds its cases here too.
package simcase

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coopgrid/coopgrid/lab"
	"github.com/coopgrid/coopgrid/lab/plot"
	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/policy"
)

// Options are the settings of `peer sim`, one per flag (docs/SCENARIOS.md).
type Options struct {
	Scenario   string
	Policy     string
	Late       string
	Limit      string
	LimitAll   string
	Checkpoint string
	Tick       string
	// Engine is "default" or "ispd" ("" = the scenario's sim.engine).
	Engine  string
	Runs    int
	Seed    uint64
	Workers int
	JSON    bool
	Out     string
	Trace   string
}

// parseOptionalSeconds reads "off" as 0, "" as def, else a Go duration.
func parseOptionalSeconds(flag, v string, def float64) (float64, error) {
	switch v {
	case "":
		return def, nil
	case "off", "0":
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, lab.Usagef("--%s %q: want a duration like 5m or 30s, or off", flag, v)
	}
	return d.Seconds(), nil
}

// Case is everything needed to run one case of the simulator.
type Case struct {
	sc      *scenario.Scenario
	opts    scenario.Options
	pol     policy.Policy
	cfg     sim.Config
	runs    int
	seed    uint64
	workers int
}

// Simulate runs the case: its runs in parallel, aggregated in run order.
func (c *Case) Simulate(ctx context.Context) (*sim.Summary, error) {
	return sim.RunMany(ctx, c.generator(), c.pol, c.cfg, c.runs, c.workers)
}

// SimulateKeepingTasks is Simulate that also returns every run's task
// records, in run order, for per-task comparisons such as
// sim.RelativePerformance (the Summary keeps those of run 0 only).
func (c *Case) SimulateKeepingTasks(ctx context.Context) (*sim.Summary, [][]sim.TaskRecord, error) {
	tasks := make([][]sim.TaskRecord, c.runs)
	cfg := c.cfg
	// Each run writes its own element: no two goroutines share one.
	cfg.OnRun = func(k int, r *sim.Result) { tasks[k] = r.Tasks }
	sum, err := sim.RunMany(ctx, c.generator(), c.pol, cfg, c.runs, c.workers)
	if err != nil {
		return nil, nil, err
	}
	return sum, tasks, nil
}

func (c *Case) generator() sim.Generator {
	return func(run int) (*scenario.Instance, error) {
		return c.sc.Instance(c.opts, c.seed+uint64(run))
	}
}

// Build resolves the options into a case: the scenario file read, the
// policy chosen, run 1's instance drawn. Bad options and bad scenario files
// are *lab.UsageError.
func Build(f Options) (*Case, error) {
	if f.Scenario == "" {
		return nil, lab.Usagef("--scenario is required")
	}
	if f.Runs < 1 {
		return nil, lab.Usagef("--runs %d: want at least 1", f.Runs)
	}
	if f.Workers < 1 {
		return nil, lab.Usagef("--workers %d: want at least 1", f.Workers)
	}
	pol, err := policy.New(f.Policy)
	if err != nil {
		return nil, lab.Usagef("--policy: %v", err)
	}
	sc, err := scenario.Load(f.Scenario)
	if err != nil {
		return nil, &lab.UsageError{Err: err}
	}
	ckpt, err := parseOptionalSeconds("checkpoint", f.Checkpoint, sc.CheckpointSeconds)
	if err != nil {
		return nil, err
	}
	tick, err := parseOptionalSeconds("tick", f.Tick, sc.TickSeconds)
	if err != nil {
		return nil, err
	}
	engine := f.Engine
	if engine == "" {
		engine = sc.Engine
	}
	switch engine {
	case "", sim.EngineDefault:
		engine = sim.EngineDefault
	case sim.EngineISPD:
		// iSPD has no tick and no checkpoint that keeps anything
		// (lab/sim/ispd.go rules 2 and 4); the report shows what ran.
		tick, ckpt = 0, 0
		pol = sim.ISPDPolicy(pol)
	default:
		return nil, lab.Usagef("--engine %q: want %s or %s", engine, sim.EngineDefault, sim.EngineISPD)
	}
	c := &Case{
		sc:   sc,
		opts: scenario.Options{Late: f.Late, LateLimit: f.Limit, AllLimit: f.LimitAll, ISPDWorkload: engine == sim.EngineISPD},
		pol:  pol,
		cfg: sim.Config{
			Engine:                 engine,
			TickSeconds:            tick,
			CheckpointBlockSeconds: ckpt,
			// EHOSEP guarantees the limits: a pass that breaks one is a bug
			// worth stopping for. OSEP and HOSEP ignore limits by design.
			EnforceLimits: strings.HasPrefix(pol.Name(), "ehosep"),
		},
		runs: f.Runs, seed: f.Seed, workers: f.Workers,
	}
	// Resolve run 1 now so that a bad --late or --limit is a usage error
	// before any work starts.
	if _, err := c.sc.Instance(c.opts, c.seed); err != nil {
		return nil, &lab.UsageError{Err: err}
	}
	return c, nil
}

// Run runs one case as Build resolves f, for as many runs as it says, and
// writes the report to out (a table, or JSON with f.JSON) and the files of
// f.Out and f.Trace.
func Run(ctx context.Context, f Options, out io.Writer) error {
	c, err := Build(f)
	if err != nil {
		return err
	}
	var tw *sim.TraceWriter
	if f.Trace != "" {
		file, err := os.Create(f.Trace)
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		defer file.Close()
		tw = sim.NewTraceWriter(file)
		c.cfg.Trace = tw.Event
	}
	sum, err := c.Simulate(ctx)
	if err != nil {
		return err
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	report := NewReport(c, sum)
	if f.Out != "" {
		if err := writeOut(f.Out, report, sum); err != nil {
			return err
		}
	}
	if f.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printTable(out, c, sum)
	if f.Out != "" {
		fmt.Fprintf(out, "\nwrote %s\n", f.Out)
	}
	return nil
}

// Report is the JSON shape of `peer sim --json` (issue 2): each metric is
// {"mean":…,"ci95":…,"n":…}, n the runs where it is defined.
type Report struct {
	Scenario   string               `json:"scenario"`
	Policy     string               `json:"policy"`
	Engine     string               `json:"engine"`
	Runs       int                  `json:"runs"`
	Seed       uint64               `json:"seed"`
	Checkpoint float64              `json:"checkpoint_block_s"`
	Tick       float64              `json:"tick_s"`
	Note       string               `json:"note"`
	Orgs       map[string]OrgReport `json:"orgs"`
	OrgOrder   []string             `json:"org_order"`
	Total      map[string]sim.Stat  `json:"total"`
	Limits     map[string]float64   `json:"limits_w"`
}

// OrgReport is one organisation's figures in a Report.
type OrgReport struct {
	Satisfaction      sim.Stat `json:"satisfaction"`
	SatisfactionHOSEP sim.Stat `json:"satisfaction_hosep"`
	// The other satisfactions (issue 19): the author's
	// satisfacaoGeralUso (β over the organisation's own span of use) and
	// the HOSEP formula with the ideal time on the executing machine.
	SatisfactionUse       sim.Stat `json:"satisfaction_geral_uso"`
	SatisfactionHOSEPExec sim.Stat `json:"satisfaction_hosep_exec"`
	EnergyJ               sim.Stat `json:"energy_j"`
	EnergyKJs             sim.Stat `json:"energy_kj_s"`
	OwnerEnergyJ          sim.Stat `json:"owner_energy_j"`
	OwnerEnergyKJs        sim.Stat `json:"owner_energy_kj_s"`
	IdleEnergyJ           sim.Stat `json:"idle_energy_j"`
	Turnaround            sim.Stat `json:"turnaround_s"`
	TurnaroundGeoMean     sim.Stat `json:"turnaround_geomean_s"`
	BoundedSlowdown       sim.Stat `json:"bounded_slowdown"`
	BoundedSlowdown100    sim.Stat `json:"bounded_slowdown_100"`
	Preemptions           sim.Stat `json:"preemptions"`
	WastedMFlop           sim.Stat `json:"wasted_mflop"`
}

// SatisfactionNote says which satisfaction the reports show.
const SatisfactionNote = "satisfaction is seed 000 eq. 4.1 as the author's simulator code computes it: mean over tasks (not the printed sum) and beta with +1; see POLICY.md §5. satisfaction_geral_uso is the code's second form (Metricas.java satisfacaoGeralUso: beta over the organisation's own span of use); satisfaction_hosep_exec is seed 001's with the ideal time on the machine that completed the task"

// NewReport is the report of case c's summary s.
func NewReport(c *Case, s *sim.Summary) Report {
	r := Report{
		Scenario: s.Scenario, Policy: s.Policy, Engine: c.cfg.Engine, Runs: s.Runs, Seed: c.seed,
		Checkpoint: c.cfg.CheckpointBlockSeconds, Tick: c.cfg.TickSeconds,
		Note: SatisfactionNote, Orgs: map[string]OrgReport{}, Limits: map[string]float64{},
		Total: map[string]sim.Stat{
			"energy_j":             s.Total.EnergyJ,
			"energy_kj_s":          s.Total.KJs,
			"idle_energy_j":        s.Total.IdleJ,
			"makespan_s":           s.Total.MakespanSeconds,
			"turnaround_s":         s.Total.TurnaroundMean,
			"turnaround_geomean_s": s.Total.TurnaroundGeoMean,
			"bounded_slowdown":     s.Total.BoundedSlowdownMean,
			"bounded_slowdown_100": s.Total.BoundedSlowdown100Mean,
			"preemptions":          s.Total.Preemptions,
			"wasted_mflop":         s.Total.WastedMFlop,
		},
	}
	if inst, err := c.sc.Instance(c.opts, c.seed); err == nil {
		for _, o := range inst.Orgs {
			r.Limits[o.Name] = float64(o.LimitMilliW) / 1000
		}
	}
	for _, o := range s.Orgs {
		r.OrgOrder = append(r.OrgOrder, o.Name)
		r.Orgs[o.Name] = OrgReport{
			Satisfaction: o.SatisfactionEHOSEP, SatisfactionHOSEP: o.SatisfactionHOSEP,
			SatisfactionUse: o.SatisfactionUse, SatisfactionHOSEPExec: o.SatisfactionHOSEPExec,
			EnergyJ: o.UserJ, EnergyKJs: o.UserKJs, OwnerEnergyJ: o.OwnerJ, OwnerEnergyKJs: o.OwnerKJs,
			IdleEnergyJ: o.IdleJ, Turnaround: o.TurnaroundMean, TurnaroundGeoMean: o.TurnaroundGeoMean,
			BoundedSlowdown: o.BoundedSlowdownMean, BoundedSlowdown100: o.BoundedSlowdown100Mean, Preemptions: o.Preemptions, WastedMFlop: o.WastedMFlop,
		}
	}
	return r
}

// pm formats a Stat as "mean ± ci".
func pm(s sim.Stat, scale float64, prec int) string {
	if s.N == 0 {
		return "n/a"
	}
	if s.N < 2 {
		return fmt.Sprintf("%.*f", prec, s.Mean*scale)
	}
	return fmt.Sprintf("%.*f ± %.*f", prec, s.Mean*scale, prec, s.CI95*scale)
}

func printTable(out io.Writer, c *Case, s *sim.Summary) {
	ck := "off"
	if c.cfg.CheckpointBlockSeconds > 0 {
		ck = (time.Duration(c.cfg.CheckpointBlockSeconds * float64(time.Second))).String()
	}
	runs := fmt.Sprintf("%d runs", s.Runs)
	if s.Runs == 1 {
		runs = "1 run"
	}
	fmt.Fprintf(out, "scenario %s · policy %s · engine %s · %s (seed %d) · checkpoint %s · mean ± 95%% CI\n\n",
		s.Scenario, s.Policy, c.cfg.Engine, runs, c.seed, ck)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "org\tsatisfaction\tsat. (uso)\tsat. (HOSEP)\tsat. (HOSEP, exec.)\tenergy MJ\tKJ/s\tturnaround min\tgeomean min\tbounded slowdown\tpreemptions\t")
	for _, o := range s.Orgs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", o.Name,
			pm(o.SatisfactionEHOSEP, 1, 1), pm(o.SatisfactionUse, 1, 1), pm(o.SatisfactionHOSEP, 1, 1), pm(o.SatisfactionHOSEPExec, 1, 1),
			pm(o.UserJ, 1e-6, 2), pm(o.UserKJs, 1, 3),
			pm(o.TurnaroundMean, 1.0/60, 1), pm(o.TurnaroundGeoMean, 1.0/60, 1),
			pm(o.BoundedSlowdownMean, 1, 2), pm(o.Preemptions, 1, 1))
	}
	t := s.Total
	fmt.Fprintf(tw, "total\t\t\t\t\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
		pm(t.EnergyJ, 1e-6, 2), pm(t.KJs, 1, 3), pm(t.TurnaroundMean, 1.0/60, 1),
		pm(t.TurnaroundGeoMean, 1.0/60, 1), pm(t.BoundedSlowdownMean, 1, 2), pm(t.Preemptions, 1, 1))
	tw.Flush()
	fmt.Fprintf(out, "\nmakespan %s min\n%s\n", pm(t.MakespanSeconds, 1.0/60, 1), SatisfactionNote)
}

// writeOut writes the summary JSON, run 1's per-task CSV and the
// satisfaction, energy and turnaround charts into dir.
func writeOut(dir string, report Report, s *sim.Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	js, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return fmt.Errorf("summary json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "tasks.csv"))
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := sim.WriteTasksCSV(f, s.First); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return WritePlots(dir, fmt.Sprintf("%s · %s · %d runs", report.Scenario, report.Policy, report.Runs), s)
}

// WritePlots draws one case's satisfaction, energy and turnaround bars
// into dir (used by `peer sim --out` and `peer demo`).
func WritePlots(dir, title string, s *sim.Summary) error {
	for _, p := range []struct {
		file string
		m    plot.Metric
	}{
		{"satisfaction.png", plot.Satisfaction},
		{"energy.png", plot.Energy},
		{"turnaround.png", plot.Turnaround},
	} {
		if err := plot.CaseBars(filepath.Join(dir, p.file), title, s, p.m); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	return nil
}
