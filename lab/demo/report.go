package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"text/tabwriter"

	"github.com/coopgrid/coopgrid/lab/plot"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/ledger"
)

// demoNum is a float that encodes NaN and infinities as JSON null.
type demoNum float64

func (x demoNum) MarshalJSON() ([]byte, error) {
	f := float64(x)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// demoOrgReport is one organisation's line of the final table.
type demoOrgReport struct {
	Name   string `json:"name"`
	Late   bool   `json:"late"`
	Killed bool   `json:"killed"`
	// Machines it offered; PowerQuotaW their busy power.
	Machines    int     `json:"machines"`
	PowerQuotaW float64 `json:"power_quota_w"`
	LimitW      float64 `json:"limit_w"`
	// MaxPIW is the largest PI seen in the samples.
	MaxPIW float64 `json:"max_pi_w"`
	Tasks  int     `json:"tasks"`
	Done   int     `json:"done"`
	// Satisfaction is seed 000 eq. 4.1 as `peer sim` computes it;
	// TimeRatio, Alpha and Beta are its factors.
	Satisfaction demoNum `json:"satisfaction"`
	TimeRatio    demoNum `json:"time_ratio"`
	Alpha        demoNum `json:"alpha"`
	Beta         demoNum `json:"beta"`
	// SimulatorSatisfaction is what lab/sim computes for the same tasks
	// with no failure.
	SimulatorSatisfaction demoNum `json:"simulator_satisfaction"`
	// Energy from the ledger's accounts: of its tasks wherever they ran
	// (user) and of anything run on its machines (owner).
	EnergyUserJ  float64 `json:"energy_user_j"`
	EnergyOwnerJ float64 `json:"energy_owner_j"`
	// Turnaround in simulated seconds: mean and geometric mean.
	TurnaroundS        demoNum `json:"turnaround_s"`
	TurnaroundGeoMeanS demoNum `json:"turnaround_geomean_s"`
	// Preemptions counts its runs stopped by the policy; LostRuns its runs
	// cut short by the killed peer.
	Preemptions int `json:"preemptions"`
	LostRuns    int `json:"lost_runs"`
}

// demoPlots are the charts' paths.
type demoPlots struct {
	Satisfaction string `json:"satisfaction"`
	Energy       string `json:"energy"`
	Turnaround   string `json:"turnaround"`
}

// demoReport is `peer demo --json`.
type demoReport struct {
	Scenario    string  `json:"scenario"`
	Policy      string  `json:"policy"`
	Orgs        int     `json:"org_count"`
	Scale       float64 `json:"scale"`
	Seed        uint64  `json:"seed"`
	Compression float64 `json:"compression"`
	Machines    int     `json:"machines"`

	TasksTotal  int `json:"tasks_total"`
	TasksDone   int `json:"tasks_done"`
	TasksFailed int `json:"tasks_failed"`

	LeaderBefore   string `json:"leader_before"`
	LeaderAfter    string `json:"leader_after"`
	FailoverMs     int64  `json:"failover_ms"`
	MachinesLostMs int64  `json:"machines_lost_ms"`
	KilledAtDone   int    `json:"killed_at_done"`

	// LimitsRespected: no sample saw PI > Lim, no peer's check after any
	// applied entry failed, and every surviving replica passes the
	// ledger's invariants at the end.
	LimitsRespected bool     `json:"limits_respected"`
	LimitSamples    int      `json:"limit_samples"`
	EntriesChecked  uint64   `json:"entries_checked"`
	StateHash       string   `json:"state_hash"`
	Problems        []string `json:"problems"`

	MakespanS          demoNum `json:"makespan_s"`
	SimulatorMakespanS float64 `json:"simulator_makespan_s"`
	WallS              float64 `json:"wall_s"`

	OrgReports []demoOrgReport `json:"orgs"`
	Plots      demoPlots       `json:"plots"`
	OutDir     string          `json:"out_dir"`
	DataDir    string          `json:"data_dir,omitempty"`
	Log        string          `json:"log"`
	Note       string          `json:"note"`
}

// demoNote says how the numbers are computed.
const demoNote = "satisfaction is seed 000 eq. 4.1 computed as peer sim does (mean of 100·Ideal/Real, beta with +1), on simulated time (wall time × compression); energy is the ledger's accounts; the killed organisation's alpha uses the power quota of all the machines it offered"

// demoMetrics computes each organisation's figures from the ledger's
// tasks and accounts, with the formulas of lab/sim (metrics.go, whose
// result() is not exported): satisfaction = TimeRatio·α·β with
//
//	TimeRatio = mean over its tasks of 100 · (size / mean MFLOPS of the
//	            federation's machines) / turnaround,
//	α = PowerQuota · T / OwnerJ,   β = (SystemJ − UserJ) / (Lim · T) + 1,
//
// T the makespan from the first submission. Times are simulated seconds:
// the ledger's wall-clock milliseconds times the compression, the time
// base of the simulated energy.
func demoMetrics(w *demoWorkload, tasks []ledger.Task, orgs []ledger.OrgInfo, t0Ms int64, compression float64) (*sim.Result, error) {
	inst := w.inst
	simS := func(ms int64) float64 { return float64(ms) / 1000 * compression }
	var last int64
	for _, t := range tasks {
		last = max(last, t.EndedMs)
	}
	T := simS(last - t0Ms)
	fedMean := inst.MeanMachineMFLOPS()
	acc := map[string]*ledger.OrgInfo{}
	for i := range orgs {
		acc[orgs[i].Name] = &orgs[i]
	}
	var systemJ float64
	for _, o := range orgs {
		systemJ += float64(o.Energy.UserMilliJ) / 1000
	}
	r := &sim.Result{Scenario: inst.Name, Policy: "ehosep", MakespanSeconds: T, Orgs: make([]sim.OrgMetrics, len(inst.Orgs))}
	type sums struct {
		n                     int
		ratio, tt, logTT, bsd float64
		preempt               int
	}
	per := make([]sums, len(inst.Orgs))
	var all sums
	for _, t := range tasks {
		i := inst.OrgIndex(t.Org)
		if i < 0 {
			return nil, fmt.Errorf("demo: task %s of unknown organisation %q", t.ID, t.Org)
		}
		var run float64
		for _, s := range t.Segments {
			if s.EndMs > 0 {
				run += simS(s.EndMs - s.StartMs)
			}
			if s.Outcome == ledger.OutcomePreempted {
				per[i].preempt++
			}
		}
		if t.State != ledger.TaskDone {
			continue
		}
		tt := simS(t.EndedMs - t.SubmittedMs)
		if tt <= 0 {
			// Done within the same millisecond it was submitted: not
			// possible for tasks of minutes, but never divide by zero.
			tt = simS(1)
		}
		a := &per[i]
		a.n++
		a.ratio += 100 * (float64(t.SizeMFlop) / fedMean) / tt
		a.tt += tt
		a.logTT += math.Log(tt)
		a.bsd += tt / math.Max(run, sim.BoundedSlowdownTau)
		all.n++
		all.tt += tt
		all.logTT += math.Log(tt)
		all.bsd += tt / math.Max(run, sim.BoundedSlowdownTau)
	}
	mean := func(sum float64, n int) float64 {
		if n == 0 {
			return math.NaN()
		}
		return sum / float64(n)
	}
	for i, o := range inst.Orgs {
		a := per[i]
		info := acc[o.Name]
		if info == nil {
			return nil, fmt.Errorf("demo: organisation %s is not in the ledger", o.Name)
		}
		userJ := float64(info.Energy.UserMilliJ) / 1000
		ownerJ := float64(info.Energy.OwnerMilliJ()) / 1000
		alpha, beta := math.NaN(), math.NaN()
		if ownerJ > 0 && T > 0 {
			alpha = float64(inst.PowerQuotaMilliW(i)) / 1000 * T / ownerJ
		}
		if info.LimitMilliW > 0 && T > 0 {
			beta = (systemJ-userJ)/(float64(info.LimitMilliW)/1000*T) + 1
		}
		ratio := mean(a.ratio, a.n)
		r.Orgs[i] = sim.OrgMetrics{
			Name: o.Name, Tasks: a.n,
			SatisfactionHOSEP:  math.NaN(),
			SatisfactionEHOSEP: ratio * alpha * beta,
			TimeRatio:          ratio, Alpha: alpha, Beta: beta,
			UserJ: userJ, OwnerJ: ownerJ, IdleJ: math.NaN(),
			UserKJs: userJ / 1000 / T, OwnerKJs: ownerJ / 1000 / T,
			TurnaroundMean:      mean(a.tt, a.n),
			TurnaroundGeoMean:   math.Exp(mean(a.logTT, a.n)),
			BoundedSlowdownMean: mean(a.bsd, a.n),
			Preemptions:         a.preempt,
			WastedMFlop:         math.NaN(),
		}
	}
	r.Total = sim.TotalMetrics{
		Tasks: all.n, EnergyJ: systemJ, KJs: systemJ / 1000 / T, IdleJ: math.NaN(), MakespanSeconds: T,
		TurnaroundMean: mean(all.tt, all.n), TurnaroundGeoMean: math.Exp(mean(all.logTT, all.n)),
		BoundedSlowdownMean: mean(all.bsd, all.n), WastedMFlop: math.NaN(),
	}
	for _, o := range r.Orgs {
		r.Total.Preemptions += o.Preemptions
	}
	return r, nil
}

// writeDemoPlots draws the satisfaction, energy (as user and as owner)
// and turnaround (mean and geometric mean) charts of the run into dir,
// each organisation's live value beside the simulator's prediction for
// the same tasks without the failure (pred). labels renames organisations
// on the charts (the late and the killed one).
func writeDemoPlots(dir string, r, pred *sim.Result, labels map[string]string) (demoPlots, error) {
	if len(pred.Orgs) != len(r.Orgs) {
		return demoPlots{}, fmt.Errorf("demo plots: %d organisations live, %d predicted", len(r.Orgs), len(pred.Orgs))
	}
	names := make([]string, len(r.Orgs))
	for i, o := range r.Orgs {
		names[i] = o.Name
		if l, ok := labels[o.Name]; ok {
			names[i] = l
		}
	}
	// pair is one panel: the live figure and the prediction, per
	// organisation, in the chart's unit.
	pair := func(title string, get func(o *sim.OrgMetrics) float64) plot.Panel {
		live, sim := make([]float64, len(r.Orgs)), make([]float64, len(r.Orgs))
		for i := range r.Orgs {
			live[i], sim[i] = finiteOrNaN(get(&r.Orgs[i])), finiteOrNaN(get(&pred.Orgs[i]))
		}
		return plot.Panel{Title: title, Series: []plot.Bars{
			{Name: "live federation (peer demo)", Values: live},
			{Name: "simulator's prediction (no failure)", Values: sim},
		}}
	}
	title := r.Scenario + " · ehosep · live vs simulator"
	out := demoPlots{
		Satisfaction: filepath.Join(dir, "satisfaction.png"),
		Energy:       filepath.Join(dir, "energy.png"),
		Turnaround:   filepath.Join(dir, "turnaround.png"),
	}
	charts := []struct {
		path, ylabel string
		panels       []plot.Panel
	}{
		{out.Satisfaction, plot.Satisfaction.String(), []plot.Panel{
			pair("satisfaction", func(o *sim.OrgMetrics) float64 { return o.SatisfactionEHOSEP })}},
		{out.Energy, plot.Energy.String(), []plot.Panel{
			pair("as user (its tasks, wherever they ran)", func(o *sim.OrgMetrics) float64 { return o.UserJ / 1e6 }),
			pair("as owner (its machines, whoever used them)", func(o *sim.OrgMetrics) float64 { return o.OwnerJ / 1e6 })}},
		{out.Turnaround, plot.Turnaround.String(), []plot.Panel{
			pair("mean", func(o *sim.OrgMetrics) float64 { return o.TurnaroundMean / 60 }),
			pair("geometric mean", func(o *sim.OrgMetrics) float64 { return o.TurnaroundGeoMean / 60 })}},
	}
	for _, c := range charts {
		if err := plot.GroupedBars(c.path, title, c.ylabel, names, c.panels...); err != nil {
			return demoPlots{}, err
		}
	}
	return out, nil
}

// finiteOrNaN leaves no bar (NaN) for an unbounded figure.
func finiteOrNaN(x float64) float64 {
	if math.IsInf(x, 0) {
		return math.NaN()
	}
	return x
}

// printDemoReport writes the final table and the story's figures.
func printDemoReport(out io.Writer, rep *demoReport) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%d/%d tasks done (%d failed) · makespan %s simulated (the simulator predicts %s without the failure) · %.1f s wall\n",
		rep.TasksDone, rep.TasksTotal, rep.TasksFailed, fmtSim(float64(rep.MakespanS)), fmtSim(rep.SimulatorMakespanS), rep.WallS)
	fmt.Fprintf(out, "fail-over: %s led and was killed at %d tasks done; %s led %d ms later; %s's machines were declared lost after %.1f s\n",
		rep.LeaderBefore, rep.KilledAtDone, rep.LeaderAfter, rep.FailoverMs, rep.LeaderBefore, float64(rep.MachinesLostMs)/1000)
	if rep.LimitsRespected {
		fmt.Fprintf(out, "limits: PI ≤ Lim held in every committed state (every peer checked the ledger's invariants after each of %d entries; %d samples during the run; state %s on every survivor)\n",
			rep.EntriesChecked, rep.LimitSamples, shortHash(rep.StateHash))
	} else {
		fmt.Fprintf(out, "limits: NOT RESPECTED\n")
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(out, "  problem: %s\n", p)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "org\ttasks\tsatisfaction\t(simulator)\tuser MJ\towner MJ\tturnaround min\tgeomean min\tpreemptions\tlost runs\tmax PI / limit W\t")
	for _, o := range rep.OrgReports {
		name := o.Name
		switch {
		case o.Killed:
			name += " (killed)"
		case o.Late:
			name += " (late)"
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%d\t%d\t%.0f / %.0f\t\n", name, o.Done, o.Tasks,
			fmtNum(o.Satisfaction, 1), fmtNum(o.SimulatorSatisfaction, 1), o.EnergyUserJ/1e6, o.EnergyOwnerJ/1e6,
			fmtNum(o.TurnaroundS/60, 1), fmtNum(o.TurnaroundGeoMeanS/60, 1), o.Preemptions, o.LostRuns, o.MaxPIW, o.LimitW)
	}
	tw.Flush()
	fmt.Fprintln(out)
	fmt.Fprintf(out, "The killed organisation (%s) keeps its tasks: they are in the replicated ledger, not in its peer. Its machines\n", rep.LeaderBefore)
	fmt.Fprintf(out, "were declared lost, the runs on them queued again, and its work ran on the others' machines, last in line\n")
	fmt.Fprintf(out, "(with no machine up its DP is undefined, which EHOSEP treats as +Inf). Its satisfaction is not comparable\n")
	fmt.Fprintf(out, "with the others': α = PowerQuota·T/OwnerJ counts its machines over the whole makespan, though they died\n")
	fmt.Fprintf(out, "with its peer, and the runs cut by the kill are charged the ledger's declared estimate over wall-clock time.\n")
	fmt.Fprintf(out, "%s\n\n", demoNote)
	fmt.Fprintf(out, "plots: %s\n       %s\n       %s\n", rep.Plots.Satisfaction, rep.Plots.Energy, rep.Plots.Turnaround)
	fmt.Fprintf(out, "scenario: %s (peer sim --scenario %s --runs 1 --seed %d simulates it, without the failure)\n",
		filepath.Join(rep.OutDir, "scenario.yaml"), filepath.Join(rep.OutDir, "scenario.yaml"), rep.Seed)
	if rep.DataDir != "" {
		fmt.Fprintf(out, "data directories kept: %s (one per organisation: config.yaml, raft/, ...)\n", rep.DataDir)
	}
	fmt.Fprintf(out, "peer logs: %s\n", rep.Log)
}

func fmtNum(x demoNum, prec int) string {
	f := float64(x)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.*f", prec, f)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
