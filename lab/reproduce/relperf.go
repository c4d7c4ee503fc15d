package reproduce

import (
	"fmt"
	"strings"

	"github.com/coopgrid/coopgrid/lab/plot"
	"github.com/coopgrid/coopgrid/lab/sim"
)

// Seed 002's relative performance (Moreira 2003, §4.1, L665-L682): the
// per-task ratios tt_EHOSEP/tt_HOSEP of the campaign's main comparison, over
// the same 60 workloads.

// relPerfTies are the tie bands of the tables: seed 002 counts a ratio of
// exactly 1 as a tie (L680); 1e-9 absorbs float rounding only. The 1 % band
// says how many of the wins are too small to matter.
const (
	relPerfEqual = 1e-9
	relPerfBand  = 0.01
)

// relPerfTest is one of the dissertation's performance tests: EHOSEP at a
// limit (subject) against HOSEP (base) on the same workloads.
type relPerfTest struct {
	key, label    string
	subject, base func(limit string) string
}

var relPerfTests = []relPerfTest{
	{"P1", "test 1 (nobody late, all at the limit)", p1("ehosep"), fixed("P1-hosep")},
	{"P2", "test 2 (U2 late, its limit varied)", s2m1sc, fixed("P2-hosep")},
}

// relPerfCell is one comparison: the federation's tasks, then each
// organisation's, at the equal tie and the 1 % band.
type relPerfCell struct {
	test, limit string
	all, band   *sim.RelPerf
	orgs        []string
	byOrg       []*sim.RelPerf
}

// relPerfCases are the names of the cases whose task records the
// comparison needs.
func relPerfCases() map[string]bool {
	names := map[string]bool{}
	for _, t := range relPerfTests {
		for _, l := range limits {
			names[t.subject(l)], names[t.base(l)] = true, true
		}
	}
	return names
}

// computeRelPerf pairs the task records that the campaign kept for the
// compared cases, then lets them go (they are 60 runs × 300 records per
// case). A case without records (not in relPerfCases) is an error.
func computeRelPerf(r *campaignResults) ([]relPerfCell, error) {
	load := func(name string) ([][]sim.TaskRecord, error) {
		cr := r.get(name)
		if len(cr.tasks) != cr.sum.Runs {
			return nil, fmt.Errorf("relative performance: case %s: task records of %d runs kept, want %d", name, len(cr.tasks), cr.sum.Runs)
		}
		return cr.tasks, nil
	}
	defer func() {
		for _, cr := range r.order {
			cr.tasks = nil
		}
	}()
	var cells []relPerfCell
	for _, t := range relPerfTests {
		for _, l := range limits {
			sn, bn := t.subject(l), t.base(l)
			if r.get(sn) == nil || r.get(bn) == nil {
				continue
			}
			a, err := load(sn)
			if err != nil {
				return nil, err
			}
			b, err := load(bn)
			if err != nil {
				return nil, err
			}
			cell := relPerfCell{test: t.key, limit: l}
			if cell.all, err = sim.RelativePerformance(a, b, relPerfEqual); err != nil {
				return nil, fmt.Errorf("%s against %s: %w", sn, bn, err)
			}
			if cell.band, err = sim.RelativePerformance(a, b, relPerfBand); err != nil {
				return nil, fmt.Errorf("%s against %s: %w", sn, bn, err)
			}
			for _, o := range r.get(sn).sum.Orgs {
				rp, err := sim.RelativePerformance(ofOrg(a, o.Name), ofOrg(b, o.Name), relPerfEqual)
				if err != nil {
					return nil, fmt.Errorf("%s against %s, %s: %w", sn, bn, o.Name, err)
				}
				cell.orgs = append(cell.orgs, o.Name)
				cell.byOrg = append(cell.byOrg, rp)
			}
			cells = append(cells, cell)
		}
	}
	return cells, nil
}

func ofOrg(runs [][]sim.TaskRecord, org string) [][]sim.TaskRecord {
	out := make([][]sim.TaskRecord, len(runs))
	for k, run := range runs {
		for _, t := range run {
			if t.Org == org {
				out[k] = append(out[k], t)
			}
		}
	}
	return out
}

func pct(v float64) string { return fmt.Sprintf("%.1f", 100*v) }

func relPerfFigure(r *campaignResults, test string) []plot.CDFPanel {
	var panels []plot.CDFPanel
	for _, e := range []*campaignResults{r, r.ispd} {
		if e == nil {
			continue
		}
		var series []plot.CDFSeries
		for _, c := range e.relperf {
			if c.test == test {
				series = append(series, plot.CDFSeries{Name: c.limit, Points: c.all.CDF})
			}
		}
		if len(series) > 0 {
			panels = append(panels, plot.CDFPanel{Title: e.engine + " engine", Series: series})
		}
	}
	return panels
}

func writeRelPerf(md *mdWriter, r *campaignResults, fig func(string)) {
	if len(r.relperf) == 0 && (r.ispd == nil || len(r.ispd.relperf) == 0) {
		return
	}
	md.f("## Relative performance (seed 002): per-task turnaround, EHOSEP against HOSEP\n\n")
	md.f("Seed 002 §4.1 (L665-L682): every task's turnaround under EHOSEP divided by its turnaround under HOSEP on the same workload (run k of both cases draws the same tasks), pooled over the %d runs. Below 1, EHOSEP served the task sooner. \"Equal\" is a ratio of 1 (to 1 part in 10⁹, float rounding only, as the seed counts only exact equality); \"±1 %%\" counts a task as a tie when neither turnaround is more than 1 %% above the other. Shares in %% of tasks; quantiles of the ratio.\n\n", r.runs)
	for _, e := range []*campaignResults{r, r.ispd} {
		if e == nil || len(e.relperf) == 0 {
			continue
		}
		md.f("**%s engine.**\n\n", e.engine)
		md.header("test", "limit", "tasks", "EHOSEP better / equal / HOSEP better", "±1 %: EHOSEP / tie / HOSEP", "ratio p5 / p25 / median / p75 / p95")
		for _, c := range e.relperf {
			var qs []string
			for _, q := range []float64{0.05, 0.25, 0.5, 0.75, 0.95} {
				qs = append(qs, fmt.Sprintf("%.3g", c.all.Quantile(q)))
			}
			md.row(c.test, c.limit, fmt.Sprint(len(c.all.Ratios)),
				pct(c.all.ABetter)+" / "+pct(c.all.Tie)+" / "+pct(c.all.BBetter),
				pct(c.band.ABetter)+" / "+pct(c.band.Tie)+" / "+pct(c.band.BBetter),
				strings.Join(qs, " / "))
		}
		md.f("\nPer organisation (its own tasks), EHOSEP better / equal / HOSEP better:\n\n")
		if len(e.relperf) > 0 {
			md.header(append([]string{"test", "limit"}, e.relperf[0].orgs...)...)
		}
		for _, c := range e.relperf {
			cells := []string{c.test, c.limit}
			for _, rp := range c.byOrg {
				cells = append(cells, pct(rp.ABetter)+" / "+pct(rp.Tie)+" / "+pct(rp.BBetter))
			}
			md.row(cells...)
		}
		md.f("\n")
	}
	for _, t := range relPerfTests {
		fig("relperf" + t.key)
	}
}
