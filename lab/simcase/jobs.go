package simcase

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/coopgrid/coopgrid/lab"
	"github.com/coopgrid/coopgrid/lab/plot"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/policy"
)

// JobOptions are the settings of `peer sim` on rigid parallel jobs (seed
// 002; docs/POLICY.md "Parallel jobs"): a workload from an SWF trace or
// the synthetic model, one job policy or two compared.
type JobOptions struct {
	SWF       string
	Synthetic int
	Procs     int64
	Load      float64
	// EstimateFactor bounds tr/te in the synthetic model (0: its default).
	EstimateFactor float64
	KeepCancelled  bool
	// Policy is the job policy of a single run; Compare "A,B" runs both and
	// reports the relative performance tt_A/tt_B.
	Policy  string
	Compare string
	// MoldableSerial bounds the Amdahl serial fraction of the moldable
	// jobs' speed-up (sim.MakeMoldable; 0: linear speed-up). `peer sim`
	// defaults it to DefaultMoldableSerial.
	MoldableSerial float64
	// SATargets > 0 runs seed 002's chapter 5 instead (runSATargets): the
	// workload made moldable, and that many target jobs.
	SATargets int
	Seed      uint64
	JSON      bool
	Out       string
}

// Enabled says the options ask for a rigid-job simulation.
func (f JobOptions) Enabled() bool { return f.SWF != "" || f.Synthetic > 0 }

// JobReport is the JSON shape of `peer sim --swf/--synthetic --json`.
type JobReport struct {
	Workload    JobWorkload               `json:"workload"`
	PolicyOrder []string                  `json:"policy_order"`
	Policies    map[string]sim.JobMetrics `json:"policies"`
	// Relative is present with --compare.
	Relative *JobRelative `json:"relative_performance,omitempty"`
}

// JobWorkload says what ran.
type JobWorkload struct {
	Source  string          `json:"source"`
	Procs   int64           `json:"procs"`
	Jobs    int             `json:"jobs"`
	Skipped *sim.SWFSkipped `json:"skipped,omitempty"`
	// Moldable says the jobs were given alternative requests
	// (sim.MakeMoldable), with Amdahl serial fractions up to MaxSerial.
	Moldable  bool             `json:"moldable,omitempty"`
	MaxSerial *float64         `json:"moldable_max_serial,omitempty"`
	Model     *sim.LublinModel `json:"model,omitempty"`
}

// JobRelative is seed 002's relative performance (§4.1) of A against B.
type JobRelative struct {
	A string `json:"a"`
	B string `json:"b"`
	// ABetter, Tie, BBetter are the shares of jobs (0-1).
	ABetter float64 `json:"a_better"`
	Tie     float64 `json:"tie"`
	BBetter float64 `json:"b_better"`
	// Quantiles of tt_A/tt_B: p01, p05, p25, p50, p75, p95, p99.
	Quantiles map[string]float64 `json:"quantiles"`
	// ByCharacteristic splits the jobs into thirds by n, tr, tr×n, te and
	// te×n (seed 002 §4.5, tables 6-25).
	ByCharacteristic []sim.RelPerfGroup `json:"by_characteristic"`
}

func (f JobOptions) workload() ([]sim.RigidJob, JobWorkload, error) {
	if f.SWF != "" && f.Synthetic > 0 {
		return nil, JobWorkload{}, lab.Usagef("--swf and --synthetic: give one workload")
	}
	if f.Procs < 0 {
		return nil, JobWorkload{}, lab.Usagef("--procs %d: want > 0", f.Procs)
	}
	if f.SWF != "" {
		file, err := os.Open(f.SWF)
		if err != nil {
			return nil, JobWorkload{}, lab.Usagef("--swf: %v", err)
		}
		defer file.Close()
		tr, err := sim.ReadSWF(file, f.SWF)
		if err != nil {
			return nil, JobWorkload{}, lab.Usagef("--swf: %v", err)
		}
		procs := f.Procs
		if procs == 0 {
			if procs, err = tr.MaxProcs(); err != nil {
				return nil, JobWorkload{}, lab.Usagef("--swf: %v", err)
			}
			if procs == 0 {
				return nil, JobWorkload{}, lab.Usagef("--swf %s: the header states no MaxProcs or MaxNodes: give --procs", f.SWF)
			}
		}
		jobs, sk, err := tr.RigidJobs(procs, f.KeepCancelled)
		if err != nil {
			return nil, JobWorkload{}, lab.Usagef("--swf: %v", err)
		}
		return jobs, JobWorkload{Source: "swf:" + filepath.Base(f.SWF), Procs: procs, Jobs: len(jobs), Skipped: &sk}, nil
	}
	m := sim.DefaultLublinModel()
	m.Jobs, m.Seed = f.Synthetic, f.Seed
	if f.Procs > 0 {
		m.Procs = f.Procs
	}
	if f.Load > 0 {
		m.Load = f.Load
	}
	if f.EstimateFactor != 0 {
		m.EstimateFactor = f.EstimateFactor
	}
	jobs, err := m.Generate()
	if err != nil {
		return nil, JobWorkload{}, lab.Usagef("--synthetic: %v", err)
	}
	return jobs, JobWorkload{Source: "lublin-feitelson-2003", Procs: m.Procs, Jobs: len(jobs), Model: &m}, nil
}

// moldable gives the jobs alternative requests and says so in wl.
func (f JobOptions) moldable(jobs []sim.RigidJob, wl *JobWorkload) ([]sim.RigidJob, error) {
	out, err := sim.MakeMoldable(jobs, wl.Procs, f.MoldableSerial, f.Seed)
	if err != nil {
		return nil, lab.Usagef("--moldable-serial: %v", err)
	}
	serial := f.MoldableSerial
	wl.Moldable, wl.MaxSerial = true, &serial
	return out, nil
}

func (f JobOptions) policies() ([]string, error) {
	names := []string{f.Policy}
	if f.Compare != "" {
		a, b, ok := strings.Cut(f.Compare, ",")
		if !ok || a == "" || b == "" || a == b {
			return nil, lab.Usagef("--compare %q: want two different job policies A,B", f.Compare)
		}
		names = []string{a, b}
	}
	for _, n := range names {
		if _, _, err := jobPolicy(n); err != nil {
			return nil, lab.Usagef("%v", err)
		}
	}
	return names, nil
}

// The SA modes (seed 002 chapter 5) run as job policies of their own on a
// moldable workload: sa_s (SA at submission) and sa_i (SA embedded in the
// scheduler), both over conservative backfilling as in the seed (L1125).
const (
	policySAs = "sa_s"
	policySAi = "sa_i"
	// DefaultMoldableSerial is MakeMoldable's bound on Amdahl's serial
	// fraction unless --moldable-serial says otherwise (docs/POLICY.md §8).
	DefaultMoldableSerial = 0.1
)

func jobPolicy(name string) (policy.JobPolicy, sim.SAMode, error) {
	switch name {
	case policySAs:
		return policy.Conservative, sim.SASubmit, nil
	case policySAi:
		return policy.ConservativeSAi, sim.SAStart, nil
	case "conservative-sai":
		return nil, 0, fmt.Errorf("job policy %q: use sa_i", name)
	}
	p, err := policy.NewJobPolicy(name)
	if err != nil {
		return nil, 0, fmt.Errorf("%w, or sa_s, sa_i (moldable jobs)", err)
	}
	return p, sim.SAStatic, nil
}

// RunJobs simulates the workload under the policy (or both compared ones)
// and writes the report: a table (rows: seed 002's metrics, columns: the
// policies, as its table 5) or JSON; with Out, per-job CSVs, the report
// and the relative-performance plot.
func RunJobs(ctx context.Context, f JobOptions, out io.Writer) error {
	if f.SATargets != 0 {
		if f.SATargets < 0 || f.Compare != "" || f.Out != "" {
			return lab.Usagef("--sa-targets %d: want > 0, without --compare and --out", f.SATargets)
		}
		return runSATargets(ctx, f, out)
	}
	names, err := f.policies()
	if err != nil {
		return err
	}
	jobs, wl, err := f.workload()
	if err != nil {
		return err
	}
	if slices.Contains(names, policySAs) || slices.Contains(names, policySAi) {
		if jobs, err = f.moldable(jobs, &wl); err != nil {
			return err
		}
	}
	rep := JobReport{Workload: wl, PolicyOrder: names, Policies: map[string]sim.JobMetrics{}}
	recs := map[string][]sim.JobRecord{}
	for _, n := range names {
		pol, mode, _ := jobPolicy(n)
		rs, err := sim.SimulateMoldable(ctx, wl.Procs, jobs, pol, mode)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if rep.Policies[n], err = sim.JobMetricsOf(wl.Procs, rs); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		recs[n] = rs
	}
	var rp *sim.RelPerf
	if len(names) == 2 {
		if rp, err = sim.JobRelativePerformance(recs[names[0]], recs[names[1]]); err != nil {
			return err
		}
		rep.Relative = &JobRelative{A: names[0], B: names[1], ABetter: rp.ABetter, Tie: rp.Tie, BBetter: rp.BBetter, Quantiles: map[string]float64{}}
		for _, q := range []int{1, 5, 25, 50, 75, 95, 99} {
			rep.Relative.Quantiles[fmt.Sprintf("p%02d", q)] = rp.Quantile(float64(q) / 100)
		}
		if rep.Relative.ByCharacteristic, err = sim.JobRelativeByCharacteristic(recs[names[0]], recs[names[1]]); err != nil {
			return err
		}
	}
	if f.Out != "" {
		if err := writeJobsOut(f.Out, rep, recs, rp); err != nil {
			return err
		}
	}
	if f.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printJobTable(out, rep)
	if f.Out != "" {
		fmt.Fprintf(out, "\nwrote %s\n", f.Out)
	}
	return nil
}

func printJobTable(out io.Writer, rep JobReport) {
	w := rep.Workload
	fmt.Fprintf(out, "workload %s: %d jobs on %d processors", w.Source, w.Jobs, w.Procs)
	if w.Moldable {
		fmt.Fprint(out, ", moldable")
	}
	if w.Skipped != nil && w.Skipped.Total() > 0 {
		fmt.Fprintf(out, " (%d left out: %d cancelled, %d never ran, %d without processors, %d wider than the machine)",
			w.Skipped.Total(), w.Skipped.Cancelled, w.Skipped.NoRun, w.Skipped.NoProcs, w.Skipped.TooWide)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "metric\t")
	for _, n := range rep.PolicyOrder {
		fmt.Fprintf(tw, "%s\t", n)
	}
	fmt.Fprintln(tw)
	rows := []struct {
		name string
		get  func(sim.JobMetrics) string
	}{
		{"geometric mean tt (s)", func(m sim.JobMetrics) string { return fmt.Sprintf("%.0f", m.GeometricMeanTurnaround) }},
		{"mean tt (s)", func(m sim.JobMetrics) string { return fmt.Sprintf("%.0f", m.MeanTurnaround) }},
		{"mean wait (s)", func(m sim.JobMetrics) string { return fmt.Sprintf("%.0f", m.MeanWait) }},
		{"mean slowdown", func(m sim.JobMetrics) string { return fmt.Sprintf("%.2f", m.MeanSlowdown) }},
		{"mean bounded slowdown τ=10", func(m sim.JobMetrics) string { return fmt.Sprintf("%.2f", m.MeanBoundedSlowdown10) }},
		{"mean bounded slowdown τ=100", func(m sim.JobMetrics) string { return fmt.Sprintf("%.2f", m.MeanBoundedSlowdown100) }},
		{"mean per-processor bsld τ=10", func(m sim.JobMetrics) string { return fmt.Sprintf("%.3f", m.MeanPerProcessorBoundedSlowdown) }},
		{"throughput (jobs/h)", func(m sim.JobMetrics) string { return fmt.Sprintf("%.2f", m.ThroughputPerHour) }},
		{"utilisation", func(m sim.JobMetrics) string { return fmt.Sprintf("%.3f", m.Utilisation) }},
		{"killed at tr", func(m sim.JobMetrics) string { return strconv.Itoa(m.Killed) }},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t", r.name)
		for _, n := range rep.PolicyOrder {
			fmt.Fprintf(tw, "%s\t", r.get(rep.Policies[n]))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if r := rep.Relative; r != nil {
		fmt.Fprintf(out, "\nrelative performance tt_%s/tt_%s per job (seed 002 §4.1): %s faster for %.1f %%, equal for %.1f %%, %s faster for %.1f %%\n",
			r.A, r.B, r.A, 100*r.ABetter, 100*r.Tie, r.B, 100*r.BBetter)
		fmt.Fprintf(out, "ratio quantiles: 1 %% %.3g, 5 %% %.3g, 25 %% %.3g, median %.3g, 75 %% %.3g, 95 %% %.3g, 99 %% %.3g\n",
			r.Quantiles["p01"], r.Quantiles["p05"], r.Quantiles["p25"], r.Quantiles["p50"], r.Quantiles["p75"], r.Quantiles["p95"], r.Quantiles["p99"])
		fmt.Fprintf(out, "\nby thirds of the jobs (seed 002 §4.5), %% of jobs %s faster / equal / %s faster:\n", r.A, r.B)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "by\tsmall\tmedium\tlarge\t")
		for i := 0; i+2 < len(r.ByCharacteristic); i += 3 {
			g := r.ByCharacteristic[i : i+3]
			fmt.Fprintf(tw, "%s\t", g[0].Characteristic)
			for _, x := range g {
				fmt.Fprintf(tw, "%.1f / %.1f / %.1f\t", 100*x.ABetter, 100*x.Tie, 100*x.BBetter)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
}

func writeJobsOut(dir string, rep JobReport, recs map[string][]sim.JobRecord, rp *sim.RelPerf) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for _, n := range rep.PolicyOrder {
		if err := writeJobCSV(filepath.Join(dir, "jobs-"+n+".csv"), recs[n]); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if rp == nil {
		return nil
	}
	r := rep.Relative
	series := strings.TrimPrefix(rep.Workload.Source, "swf:")
	if rep.Workload.Model != nil {
		series = "SYNT"
	}
	title := fmt.Sprintf("Relative performance, %s (%d jobs, %d processors)", rep.Workload.Source, rep.Workload.Jobs, rep.Workload.Procs)
	panel := plot.CDFPanel{
		Title:  fmt.Sprintf("%s faster %.0f %%, equal %.0f %%, %s faster %.0f %%", r.A, 100*r.ABetter, 100*r.Tie, r.B, 100*r.BBetter),
		Series: []plot.CDFSeries{{Name: series, Points: rp.CDF}},
	}
	return plot.RelPerfCDF(filepath.Join(dir, "relperf-"+r.A+"-"+r.B+".png"), title, r.A, r.B, panel)
}

func writeJobCSV(path string, recs []sim.JobRecord) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	w := csv.NewWriter(file)
	_ = w.Write([]string{"id", "procs", "requested_s", "submit_s", "start_s", "end_s", "turnaround_s", "killed"})
	for _, r := range recs {
		_ = w.Write([]string{r.ID, strconv.FormatInt(r.Procs, 10), strconv.FormatInt(r.RequestedSeconds, 10),
			strconv.FormatInt(r.SubmitSeconds, 10), strconv.FormatInt(r.StartSeconds, 10), strconv.FormatInt(r.EndSeconds, 10),
			strconv.FormatInt(r.Turnaround(), 10), strconv.FormatBool(r.Killed)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		file.Close()
		return fmt.Errorf("--out: %s: %w", path, err)
	}
	return file.Close()
}
