package simcase

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/coopgrid/coopgrid/lab"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/policy"
)

// SAReport is the JSON shape of `peer sim --sa-targets N`: seed 002's
// chapter 5 on one moldable workload. Keys of the maps are the modes
// static, sa_s and sa_i.
type SAReport struct {
	Workload JobWorkload `json:"workload"`
	Targets  int         `json:"targets"`
	// Whole are the runs where every job uses one mode (table 38), with
	// the shares of jobs that ran wider and narrower than their static
	// request.
	Whole map[string]SAWhole `json:"whole_workload"`
	// WholeRelative is the relative performance tt_sa_s/tt_sa_i over every
	// job (table 39).
	WholeRelative Share `json:"whole_relative_sa_s_sa_i"`
	// Widest is every job on all the processors with linear speed-up, and
	// WidestRelative its relative performance against the static requests,
	// tt_widest/tt_static (tables 40-41).
	Widest         sim.JobMetrics `json:"widest_linear"`
	WidestRelative Share          `json:"widest_relative_widest_static"`
	// Scenarios are the target experiments, one per workload mode (tables
	// 29-37).
	Scenarios []SAScenario `json:"scenarios"`
}

// SAWhole is one whole-workload run.
type SAWhole struct {
	sim.JobMetrics
	Wider    float64 `json:"wider"`
	Narrower float64 `json:"narrower"`
}

// Share is a relative-performance summary of A against B: the shares of
// jobs (0-1) where A is faster, both are equal, B is faster.
type Share struct {
	A       string  `json:"a"`
	B       string  `json:"b"`
	ABetter float64 `json:"a_better"`
	Tie     float64 `json:"tie"`
	BBetter float64 `json:"b_better"`
}

// SAScenario is the targets in a workload whose other jobs use one mode:
// their metrics per target mode (tables 31, 34, 37) and the relative
// performance of the target with SA against the static target (tables
// 29-30, 32-33, 35-36).
type SAScenario struct {
	Workload string                       `json:"workload"`
	Target   map[string]sim.TargetMetrics `json:"target"`
	VsStatic []Share                      `json:"vs_static"`
}

func share(a, b string, ra, rb []sim.JobRecord) (Share, error) {
	rp, err := sim.JobRelativePerformance(ra, rb)
	if err != nil {
		return Share{}, err
	}
	return Share{A: a, B: b, ABetter: rp.ABetter, Tie: rp.Tie, BBetter: rp.BBetter}, nil
}

// runSATargets is `peer sim --sa-targets N`: the workload made moldable,
// the three whole-workload runs and N targets in each (table 28), all
// under conservative backfilling as in the seed (L1125).
func runSATargets(ctx context.Context, f JobOptions, out io.Writer) error {
	jobs, wl, err := f.workload()
	if err != nil {
		return err
	}
	if jobs, err = f.moldable(jobs, &wl); err != nil {
		return err
	}
	targets, err := sim.PickTargets(jobs, f.SATargets, f.Seed)
	if err != nil {
		return lab.Usagef("--sa-targets: %v", err)
	}
	res, err := sim.SimulateTargets(ctx, wl.Procs, jobs, targets)
	if err != nil {
		return err
	}
	rep := SAReport{Workload: wl, Targets: len(targets), Whole: map[string]SAWhole{}}
	static := make(map[string]int64, len(jobs))
	for _, j := range jobs {
		static[j.ID] = j.Procs
	}
	for _, w := range sim.SAModes() {
		m, err := sim.JobMetricsOf(wl.Procs, res.Workload[w])
		if err != nil {
			return fmt.Errorf("%s workload: %w", w, err)
		}
		wh := SAWhole{JobMetrics: m}
		for _, r := range res.Workload[w] {
			switch {
			case r.Procs > static[r.ID]:
				wh.Wider++
			case r.Procs < static[r.ID]:
				wh.Narrower++
			}
		}
		wh.Wider /= float64(len(jobs))
		wh.Narrower /= float64(len(jobs))
		rep.Whole[w.String()] = wh
	}
	if rep.WholeRelative, err = share("sa_s", "sa_i", res.Workload[sim.SASubmit], res.Workload[sim.SAStart]); err != nil {
		return err
	}
	wide, err := sim.WidenLinear(jobs, wl.Procs)
	if err != nil {
		return err
	}
	wideRecs, err := sim.SimulateJobs(ctx, wl.Procs, wide, policy.Conservative)
	if err != nil {
		return fmt.Errorf("widest workload: %w", err)
	}
	if rep.Widest, err = sim.JobMetricsOf(wl.Procs, wideRecs); err != nil {
		return fmt.Errorf("widest workload: %w", err)
	}
	if rep.WidestRelative, err = share("widest", "static", wideRecs, res.Workload[sim.SAStatic]); err != nil {
		return err
	}
	for _, w := range sim.SAModes() {
		sc := SAScenario{Workload: w.String(), Target: map[string]sim.TargetMetrics{}}
		for _, t := range sim.SAModes() {
			if sc.Target[t.String()], err = sim.TargetMetricsOf(wl.Procs, res.Target[w][t], jobs, targets); err != nil {
				return fmt.Errorf("targets with %s in a %s workload: %w", t, w, err)
			}
		}
		for _, t := range []sim.SAMode{sim.SASubmit, sim.SAStart} {
			s, err := share(t.String(), "static", res.Target[w][t], res.Target[w][sim.SAStatic])
			if err != nil {
				return err
			}
			sc.VsStatic = append(sc.VsStatic, s)
		}
		rep.Scenarios = append(rep.Scenarios, sc)
	}
	if f.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printSAReport(out, rep)
	return nil
}

// The seed's table numbers per workload mode: relative performance of SA_s
// and SA_i targets, then their metrics.
var saTables = map[string]string{"static": "tables 29-31", "sa_s": "tables 32-34", "sa_i": "tables 35-37"}

func printSAReport(out io.Writer, rep SAReport) {
	w := rep.Workload
	fmt.Fprintf(out, "workload %s: %d moldable jobs on %d processors, conservative backfilling; %d targets\n\n", w.Source, w.Jobs, w.Procs, rep.Targets)
	modes := sim.SAModes()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "every job uses (table 38)\t")
	for _, m := range modes {
		fmt.Fprintf(tw, "%s\t", m)
	}
	fmt.Fprintln(tw)
	wholeRows := []struct {
		name string
		get  func(SAWhole) string
	}{
		{"geometric mean tt (s)", func(m SAWhole) string { return fmt.Sprintf("%.0f", m.GeometricMeanTurnaround) }},
		{"mean tt (s)", func(m SAWhole) string { return fmt.Sprintf("%.0f", m.MeanTurnaround) }},
		{"mean wait (s)", func(m SAWhole) string { return fmt.Sprintf("%.0f", m.MeanWait) }},
		{"utilisation", func(m SAWhole) string { return fmt.Sprintf("%.3f", m.Utilisation) }},
		{"jobs wider than static (%)", func(m SAWhole) string { return fmt.Sprintf("%.1f", 100*m.Wider) }},
		{"jobs narrower than static (%)", func(m SAWhole) string { return fmt.Sprintf("%.1f", 100*m.Narrower) }},
	}
	for _, r := range wholeRows {
		fmt.Fprintf(tw, "%s\t", r.name)
		for _, m := range modes {
			fmt.Fprintf(tw, "%s\t", r.get(rep.Whole[m.String()]))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	r := rep.WholeRelative
	fmt.Fprintf(out, "relative performance tt_sa_s/tt_sa_i per job (table 39): sa_s faster %.1f %%, equal %.1f %%, sa_i faster %.1f %%\n",
		100*r.ABetter, 100*r.Tie, 100*r.BBetter)
	r = rep.WidestRelative
	fmt.Fprintf(out, "every job on all %d processors, linear speed-up (tables 40-41): geometric mean tt %.0f s; against static requests: widest faster %.1f %%, equal %.1f %%, static faster %.1f %%\n",
		w.Procs, rep.Widest.GeometricMeanTurnaround, 100*r.ABetter, 100*r.Tie, 100*r.BBetter)
	targetRows := []struct {
		name string
		get  func(sim.TargetMetrics) string
	}{
		{"mean tt (s)", func(m sim.TargetMetrics) string { return fmt.Sprintf("%.0f", m.MeanTurnaround) }},
		{"geometric mean tt (s)", func(m sim.TargetMetrics) string { return fmt.Sprintf("%.0f", m.GeometricMeanTurnaround) }},
		{"mean slowdown", func(m sim.TargetMetrics) string { return fmt.Sprintf("%.1f", m.MeanSlowdown) }},
		{"bounded slowdown τ=10", func(m sim.TargetMetrics) string { return fmt.Sprintf("%.1f", m.MeanBoundedSlowdown10) }},
		{"bounded slowdown τ=100", func(m sim.TargetMetrics) string { return fmt.Sprintf("%.1f", m.MeanBoundedSlowdown100) }},
		{"std deviation tt (s)", func(m sim.TargetMetrics) string { return fmt.Sprintf("%.0f", m.StdDevTurnaround) }},
		{"wider than static (%)", func(m sim.TargetMetrics) string { return fmt.Sprintf("%.1f", 100*m.Wider) }},
	}
	for _, sc := range rep.Scenarios {
		fmt.Fprintf(out, "\ntarget in a %s workload (%s)\n", sc.Workload, saTables[sc.Workload])
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "the target uses\t")
		for _, m := range modes {
			fmt.Fprintf(tw, "%s\t", m)
		}
		fmt.Fprintln(tw)
		for _, r := range targetRows {
			fmt.Fprintf(tw, "%s\t", r.name)
			for _, m := range modes {
				fmt.Fprintf(tw, "%s\t", r.get(sc.Target[m.String()]))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		for _, s := range sc.VsStatic {
			fmt.Fprintf(out, "target with %s against static: static faster %.1f %%, equal %.1f %%, %s faster %.1f %%\n",
				s.A, 100*s.BBetter, 100*s.Tie, s.A, 100*s.ABetter)
		}
	}
}
