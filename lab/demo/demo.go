// Package demo is the body of `peer demo`: a federation of real peers in
// one process, shaped like the EHOSEP dissertation's Model 1 scaled down,
// with the leader killed half way, and its result measured as `peer sim`
// measures the simulator's.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	logging "github.com/ipfs/go-log/v2"

	"github.com/coopgrid/coopgrid/lab"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// Options are the settings of `peer demo`, one per flag.
type Options struct {
	// Orgs is the number of organisations, one peer each.
	Orgs int
	// Scale is the fraction of Model 1's machines and tasks.
	Scale float64
	// Compression is simulated seconds per wall-clock second.
	Compression float64
	// Seed draws the task sizes (as peer sim --seed).
	Seed uint64
	// Keep keeps the peers' data directories.
	Keep bool
	// JSON prints one JSON object at the end (progress goes to stderr).
	JSON bool
	// Out is the directory for the plots, the scenario and demo.json
	// ("": the demo's temporary directory).
	Out string
}

// Defaults: Model 1's four organisations at a quarter of their machines
// and tasks (17 machines, 77 tasks), whose ~4 simulated hours take about
// 50 s at 300×.
const (
	DefaultOrgs        = 4
	DefaultScale       = 0.25
	DefaultCompression = 300
	MaxCompression     = 100_000
)

func (f Options) validate() error {
	if f.Orgs < MinOrgs || f.Orgs > MaxOrgs {
		return lab.Usagef("--orgs %d: want %d to %d (with fewer than 3 peers, killing the leader leaves no Raft majority)", f.Orgs, MinOrgs, MaxOrgs)
	}
	if math.IsNaN(f.Scale) || f.Scale < MinScale || f.Scale > MaxScale {
		return lab.Usagef("--scale %v: want a fraction of Model 1 between %g and %g", f.Scale, float64(MinScale), float64(MaxScale))
	}
	if math.IsNaN(f.Compression) || f.Compression < 1 || f.Compression > MaxCompression {
		return lab.Usagef("--compression %v: want 1 (real time) to %d simulated seconds per second", f.Compression, MaxCompression)
	}
	return nil
}

// Run runs the whole demo and writes its output. The progress goes to
// stdout, or to stderr with --json so that stdout holds only the JSON. Bad
// options are *lab.UsageError; a demo that ran but whose checks failed
// returns an error wrapping ErrChecks.
func Run(ctx context.Context, f Options, stdout, stderr io.Writer) (err error) {
	if err := f.validate(); err != nil {
		return err
	}
	w, err := newDemoWorkload(f.Orgs, f.Scale, f.Seed)
	if err != nil {
		return err
	}
	// The simulator's prediction for the same tasks (no failure): shown
	// beside the live figures, and it sizes the demo's time bound.
	pol, err := policy.New("ehosep")
	if err != nil {
		return err
	}
	pred, err := sim.Run(ctx, w.inst, pol, sim.Config{TickSeconds: demoTickSeconds, CheckpointBlockSeconds: demoCheckpointSeconds, EnforceLimits: true})
	if err != nil {
		return fmt.Errorf("demo: simulating the workload: %w", err)
	}

	// Directories: the peers' data under a temporary root (removed unless
	// --keep); plots, scenario, report and log in --out, else in the root.
	root, err := os.MkdirTemp("", "coopgrid-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	peersDir := filepath.Join(root, "peers")
	outDir := root
	if f.Out != "" {
		if outDir, err = filepath.Abs(f.Out); err == nil {
			err = os.MkdirAll(outDir, 0o755)
		}
		if err != nil {
			os.RemoveAll(root)
			return lab.Usagef("--out %s: %v", f.Out, err)
		}
	}
	defer func() {
		switch {
		case f.Keep:
		case outDir == root:
			os.RemoveAll(peersDir)
		default:
			os.RemoveAll(root)
		}
	}()
	scenarioPath := filepath.Join(outDir, "scenario.yaml")
	if err := os.WriteFile(scenarioPath, []byte(w.yaml), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	logPath := filepath.Join(outDir, "demo.log")
	// Appending, because go-log writes into the same file.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// libp2p and go-libp2p-raft log through go-log, to stderr by default,
	// and the killed peer's connections make them print errors over the
	// live table: they go to the demo's log as well. This is the process's
	// logging set-up, which the demo owns while it runs.
	logging.SetupLogging(logging.Config{Format: logging.PlaintextOutput, Level: logging.LevelError, File: logPath})

	progress := stdout
	if f.JSON {
		progress = stderr
	}
	view := newDemoView(progress, !f.JSON)
	tm := newDemoTiming(f.Compression)
	printDemoIntro(progress, w, f, tm, peersDir, logPath)

	began := time.Now()
	fed, err := startDemoFederation(ctx, w, peersDir, tm, log)
	defer func() {
		if cerr := fed.close(); cerr != nil {
			log.Warn("demo: closing the peers", "err", cerr)
		}
	}()
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "federation up in %.1f s: %d peers, %s leads (it started the federation)\n\n",
		time.Since(began).Seconds(), len(fed.peers), orNone(fed.leader()))

	d := &demoDriver{w: w, fed: fed, tm: tm, view: view, log: log,
		maxWall: time.Duration(5*pred.MakespanSeconds/f.Compression*float64(time.Second)) + 90*time.Second}
	if err := d.run(ctx); err != nil {
		return err
	}
	rep, err := d.report(ctx, f, pred, outDir, logPath)
	if err != nil {
		return err
	}
	if f.Keep {
		rep.DataDir = peersDir
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("demo: report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(outDir, "demo.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if f.JSON {
		if _, err := fmt.Fprintf(stdout, "%s\n", js); err != nil {
			return err
		}
	} else {
		printDemoReport(stdout, rep)
	}
	return rep.verdict()
}

func printDemoIntro(out io.Writer, w *demoWorkload, f Options, tm demoTiming, peersDir, logPath string) {
	inst := w.inst
	late := inst.Orgs[w.late]
	fmt.Fprintf(out, "coopgrid demo: the EHOSEP dissertation's Model 1 (seed 000 §4.2), %d organisations, scaled by %g\n", len(inst.Orgs), f.Scale)
	fmt.Fprintf(out, "  %d peers in this process: libp2p hosts on 127.0.0.1 (random ports), Raft with bolt stores in %s,\n", len(inst.Orgs), peersDir)
	fmt.Fprintf(out, "  the simulated executor at %g× (1 s of wall clock is %s simulated); scheduling tick %s, heartbeat timeout %s\n",
		f.Compression, fmtSim(f.Compression), tm.scheduleInterval, tm.heartbeatTimeout)
	var names []string
	for i, o := range inst.Orgs {
		n := 0
		for _, m := range inst.Machines {
			if m.Owner == i {
				n++
			}
		}
		names = append(names, fmt.Sprintf("%s %d", o.Name, n))
	}
	fmt.Fprintf(out, "  %d machines (%s), %d tasks of types A/B/C (table 6, seed %d)\n", len(inst.Machines), strings.Join(names, ", "), len(inst.Tasks), f.Seed)
	fmt.Fprintf(out, "  %s arrives %s late with its limit at %d%% of its power (%.0f W); %s starts the federation and leads; it is killed half way\n",
		late.Name, fmtSim(demoLateDelay), demoLateLimitPercent, float64(late.LimitMilliW)/1000, inst.Orgs[len(inst.Orgs)-1].Name)
	fmt.Fprintf(out, "  peer logs: %s\n", logPath)
}

// report gathers the final figures once every survivor holds the same
// state.
func (d *demoDriver) report(ctx context.Context, f Options, pred *sim.Result, outDir, logPath string) (*demoReport, error) {
	hash, idx, cerr := d.converge(ctx)
	problems := d.finalChecks()
	if cerr != nil {
		problems = append(problems, cerr.Error())
	}
	obs := d.observer()
	if obs == nil {
		return nil, errors.New("demo: no peer left running")
	}
	var (
		tasks []ledger.Task
		orgs  []ledger.OrgInfo
	)
	obs.n.ViewLedger(func(l *ledger.Ledger) {
		tasks = l.Tasks(ledger.TaskFilter{})
		orgs = l.Orgs()
	})
	res, err := demoMetrics(d.w, tasks, orgs, d.t0.UnixMilli(), f.Compression)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{d.w.inst.Orgs[d.w.late].Name: d.w.inst.Orgs[d.w.late].Name + " (late)"}
	if d.killed != nil {
		labels[d.killed.org] = d.killed.org + " (killed)"
	}
	plots, err := writeDemoPlots(outDir, res, pred, labels)
	if err != nil {
		return nil, fmt.Errorf("demo: plots: %w", err)
	}
	inst := d.w.inst
	rep := &demoReport{
		Scenario: inst.Name, Policy: "ehosep", Orgs: len(inst.Orgs), Scale: f.Scale, Seed: f.Seed,
		Compression: f.Compression, Machines: len(inst.Machines), TasksTotal: d.total,
		LeaderBefore: d.leaderBefore, LeaderAfter: d.leaderAfter,
		FailoverMs: d.failover.Milliseconds(), MachinesLostMs: d.lostAfter.Milliseconds(), KilledAtDone: d.killedAtDone,
		LimitSamples: d.samples, EntriesChecked: idx, StateHash: hash, Problems: problems,
		MakespanS: demoNum(res.MakespanSeconds), SimulatorMakespanS: pred.MakespanSeconds,
		WallS: time.Since(d.t0).Seconds(), Plots: plots, OutDir: outDir, Log: logPath, Note: demoNote,
	}
	if rep.Problems == nil {
		rep.Problems = []string{}
	}
	rep.LimitsRespected = len(problems) == 0
	lost := map[string]int{}
	for _, t := range tasks {
		switch t.State {
		case ledger.TaskDone:
			rep.TasksDone++
		case ledger.TaskFailed:
			rep.TasksFailed++
		}
		for _, s := range t.Segments {
			if s.Outcome == ledger.OutcomeLost {
				lost[t.Org]++
			}
		}
	}
	limits := map[string]int64{}
	for _, o := range orgs {
		limits[o.Name] = o.LimitMilliW
	}
	for i, o := range inst.Orgs {
		m := res.Orgs[i]
		machines := 0
		for _, mm := range inst.Machines {
			if mm.Owner == i {
				machines++
			}
		}
		n := 0
		for _, t := range inst.Tasks {
			if t.Org == i {
				n++
			}
		}
		rep.OrgReports = append(rep.OrgReports, demoOrgReport{
			Name: o.Name, Late: i == d.w.late, Killed: d.killed != nil && d.killed.org == o.Name,
			Machines: machines, PowerQuotaW: float64(inst.PowerQuotaMilliW(i)) / 1000,
			LimitW: float64(limits[o.Name]) / 1000, MaxPIW: float64(d.maxPI[o.Name]) / 1000,
			Tasks: n, Done: m.Tasks,
			Satisfaction: demoNum(m.SatisfactionEHOSEP), TimeRatio: demoNum(m.TimeRatio),
			Alpha: demoNum(m.Alpha), Beta: demoNum(m.Beta),
			SimulatorSatisfaction: demoNum(pred.Orgs[i].SatisfactionEHOSEP),
			EnergyUserJ:           m.UserJ, EnergyOwnerJ: m.OwnerJ,
			TurnaroundS: demoNum(m.TurnaroundMean), TurnaroundGeoMeanS: demoNum(m.TurnaroundGeoMean),
			Preemptions: m.Preemptions, LostRuns: lost[o.Name],
		})
	}
	return rep, nil
}

// verdict is nil when the demo showed what it promises: every task done,
// a fail-over to another peer, every limit respected.
func (r *demoReport) verdict() error {
	var why []string
	if r.TasksDone != r.TasksTotal {
		why = append(why, fmt.Sprintf("%d of %d tasks done", r.TasksDone, r.TasksTotal))
	}
	if r.LeaderBefore == "" || r.LeaderAfter == "" || r.LeaderAfter == r.LeaderBefore {
		why = append(why, fmt.Sprintf("no fail-over (leader before %q, after %q)", r.LeaderBefore, r.LeaderAfter))
	}
	if !r.LimitsRespected {
		why = append(why, "limits or invariants broken: "+strings.Join(r.Problems, "; "))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrChecks, strings.Join(why, "; "))
}
