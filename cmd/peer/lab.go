package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/lab"
	"github.com/coopgrid/coopgrid/lab/demo"
	"github.com/coopgrid/coopgrid/lab/reproduce"
	"github.com/coopgrid/coopgrid/lab/simcase"
)

// The research commands: flags here, bodies in lab/.

// labExit gives a research command's usage errors (*lab.UsageError) the
// exit code 2.
func labExit(err error) error {
	var ue *lab.UsageError
	if errors.As(err, &ue) {
		return &exitError{code: 2, err: err}
	}
	return err
}

func newSimCmd() *cobra.Command {
	var f simcase.Options
	var jf simcase.JobOptions
	cmd := &cobra.Command{
		Use:   "sim (--scenario FILE | --swf FILE | --synthetic N) [flags]",
		Short: "Simulate a scenario under a policy and print per-organisation metrics",
		Long: `Simulate a scenario (see docs/SCENARIOS.md) with a virtual clock, driving the
policy exactly as the federation's leader does: on every task arrival, every
completion and a periodic tick. Each run draws its task sizes from seed+run;
runs execute in parallel and the result does not depend on how many.

Satisfaction is seed 000 eq. 4.1 as the author's simulator code computes it
(the mean of 100·Ideal/Real over tasks, and β with +1; POLICY.md §5), and the
HOSEP formula of seed 001 beside it. Each figure is the mean over runs with
its 95 % confidence interval (Student t).

With --swf FILE or --synthetic N it simulates rigid parallel jobs instead
(seed 002; docs/POLICY.md §8): one machine of --procs processors under a job
policy (--policy fcfs, easy, conservative; sa_s and sa_i for moldable jobs),
reported with seed 002's metrics; --compare A,B adds the relative
performance tt_A/tt_B per job. --sa-targets N runs seed 002's chapter 5 on
the workload made moldable: every job with its static request, SA_s and
SA_i (table 38), and N target jobs with each in each (tables 28-37).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if jf.Enabled() {
				return labExit(runJobSim(cmd, f, jf))
			}
			if jf.Compare != "" {
				return labExit(lab.Usagef("--compare needs a job workload: --swf FILE or --synthetic N"))
			}
			return labExit(simcase.Run(cmd.Context(), f, cmd.OutOrStdout()))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&jf.SWF, "swf", "", "simulate rigid parallel jobs from a Standard Workload Format trace (docs/POLICY.md, Parallel jobs)")
	fl.IntVar(&jf.Synthetic, "synthetic", 0, "simulate N rigid parallel jobs of the Lublin-Feitelson 2003 model (docs/POLICY.md)")
	fl.Int64Var(&jf.Procs, "procs", 0, "processors of the simulated machine (default: the SWF header's MaxProcs; 800 for --synthetic)")
	fl.Float64Var(&jf.Load, "load", 0, "offered load of the --synthetic workload (default 0.7)")
	fl.Float64Var(&jf.EstimateFactor, "estimate-factor", 0, "the --synthetic workload's requested times are te times a factor uniform in [1, F] (default 5)")
	fl.BoolVar(&jf.KeepCancelled, "keep-cancelled", false, "keep the SWF trace's cancelled jobs (status 5), which seed 002 leaves out")
	fl.StringVar(&jf.Compare, "compare", "", "run two job policies A,B on the same workload and report the relative performance tt_A/tt_B (e.g. conservative,easy)")
	fl.IntVar(&jf.SATargets, "sa-targets", 0, "with --swf/--synthetic: seed 002's SA experiments (chapter 5) on the workload made moldable, with N target jobs")
	fl.Float64Var(&jf.MoldableSerial, "moldable-serial", simcase.DefaultMoldableSerial, "with sa_s, sa_i or --sa-targets: moldable jobs' Amdahl serial fraction is uniform in [0, F] (0: linear speed-up)")
	fl.StringVar(&f.Scenario, "scenario", "", "scenario file (YAML, see docs/SCENARIOS.md)")
	fl.StringVar(&f.Policy, "policy", "ehosep", "policy: "+strings.Join(lab.PolicyNames(), ", ")+"; with --swf/--synthetic: fcfs, easy (default), conservative, sa_s, sa_i")
	fl.StringVar(&f.Late, "late", "", "organisation that submits late (default: the scenario's; \"none\" for nobody)")
	fl.StringVar(&f.Limit, "limit", "", "the late organisation's power limit: PCT% of its power quota, WATTS W, or system")
	fl.StringVar(&f.LimitAll, "limit-all", "", "every organisation's power limit: PCT%, WATTS W, or system")
	fl.StringVar(&f.Checkpoint, "checkpoint", "", "checkpoint block as run time (e.g. 5m) or off (default: the scenario's)")
	fl.StringVar(&f.Tick, "tick", "", "scheduler tick (e.g. 30s) or off (default: the scenario's)")
	fl.StringVar(&f.Engine, "engine", "", "simulator engine: default (this project's model) or ispd (the author's iSPD semantics, docs/REPRODUCTION.md); default: the scenario's sim.engine")
	fl.IntVar(&f.Runs, "runs", 60, "number of runs (the dissertation uses 60)")
	fl.Uint64Var(&f.Seed, "seed", 1, "seed of run 1; run k uses seed+k-1")
	fl.IntVar(&f.Workers, "workers", runtime.GOMAXPROCS(0), "runs simulated in parallel")
	fl.BoolVar(&f.JSON, "json", false, "print one JSON object instead of a table")
	fl.StringVar(&f.Out, "out", "", "directory for per-task CSV, the summary JSON and plots")
	fl.StringVar(&f.Trace, "trace", "", "write every decision and completion of run 1 as JSON lines to this file")
	return cmd
}

// runJobSim is `peer sim` on rigid parallel jobs: --policy names a job
// policy (default easy), --seed draws the synthetic workload.
func runJobSim(cmd *cobra.Command, f simcase.Options, jf simcase.JobOptions) error {
	if f.Scenario != "" {
		return lab.Usagef("--scenario and --swf/--synthetic: give one workload")
	}
	jf.Policy = "easy"
	if jf.SATargets != 0 && cmd.Flags().Changed("policy") {
		return lab.Usagef("--sa-targets runs conservative backfilling with static requests, SA_s and SA_i: drop --policy")
	}
	if cmd.Flags().Changed("policy") {
		jf.Policy = f.Policy
	}
	if cmd.Flags().Changed("moldable-serial") && jf.SATargets == 0 && !strings.Contains(jf.Policy+","+jf.Compare, "sa_") {
		return lab.Usagef("--moldable-serial shapes moldable jobs: use it with --policy sa_s or sa_i, --compare with one of them, or --sa-targets")
	}
	jf.Seed, jf.JSON, jf.Out = f.Seed, f.JSON, f.Out
	return simcase.RunJobs(cmd.Context(), jf, cmd.OutOrStdout())
}

func newReproduceCmd() *cobra.Command {
	var f reproduce.Options
	cmd := &cobra.Command{
		Use:   "reproduce --out DIR [flags]",
		Short: "Run the EHOSEP dissertation's whole simulation campaign and compare it with the published tables",
		Long: `Run every experiment of seed 000 §4 (Forte, 2018) and seed 001 §4 (HOSEP):

  S1M1..S4M1, S1M2..S3M2   one organisation 10 minutes late, its limit at
                           80 %, 100 %, 150 % and whole system, the others at
                           whole system; with 5-minute checkpoints (CC) and
                           without (SC); EHOSEP
  P1                       Model 1, SC, nobody late, everyone at the same
                           limit; EHOSEP, HOSEP and EHOSEP Best Fit
  P2                       Model 1, SC, U2 late with its limit varied; HOSEP
                           and EHOSEP Best Fit (EHOSEP is S2M1 SC)
  H12                      the HOSEP paper's 12-node grid, low/medium/high
                           demand, OSEP and HOSEP, CC and SC

Every case uses the same seeds (run k draws its tasks from seed+k-1), so
two policies are compared on identical workloads. Writes DIR/results.json
(every case's summary), DIR/tables.md (tables 11-18 with the published
numbers beside ours, the satisfaction sweeps and the §4.3 findings checked
one by one) and the figures as PNG. Progress goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labExit(reproduce.Run(cmd.Context(), f, cmd.ErrOrStderr()))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Out, "out", "", "directory for results.json, tables.md and the figures (required)")
	fl.IntVar(&f.Runs, "runs", 60, "runs per case (the dissertation uses 60)")
	fl.Uint64Var(&f.Seed, "seed", 1, "seed of run 1; run k uses seed+k-1, in every case")
	fl.IntVar(&f.Workers, "workers", runtime.GOMAXPROCS(0), "runs simulated in parallel")
	fl.StringVar(&f.Only, "only", "", "run only the cases whose name matches this regular expression (e.g. S1M1 or '^P1-')")
	fl.StringVar(&f.Scenarios, "scenarios", filepath.Join("examples", "scenarios"), "directory holding model1.yaml, model2.yaml and hosep12-*.yaml")
	fl.StringSliceVar(&f.Engines, "engines", nil, "simulator engines to run the campaign under: default and/or ispd (the author's iSPD semantics); default: both")
	return cmd
}

func newDemoCmd() *cobra.Command {
	f := demo.Options{Orgs: demo.DefaultOrgs, Scale: demo.DefaultScale, Compression: demo.DefaultCompression, Seed: 1}
	cmd := &cobra.Command{
		Use:   "demo [--orgs N] [--scale S] [--compression X] [--keep] [--json] [--out DIR]",
		Short: "Run a Model 1 federation of real peers in this process: scheduling, a leader killed, fail-over, metrics",
		Long: `Start, in this one process, a federation shaped like the EHOSEP dissertation's
Model 1 (seed 000 §4.2) scaled down: one real peer per organisation, each with
a libp2p host on a random loopback port, its Raft member and bolt store in a
temporary directory, and the simulated executor compressing time. Each
organisation submits Model 1's task mix (sizes drawn like types A, B and C)
through its own peer; U1 arrives 10 simulated minutes late with its power
limit at 80 % of its machines' power, so EHOSEP's limits show.

Half way through, the leader's peer is killed (its network and Raft stop at
once). The survivors elect a new leader, the new leader declares the dead
peer's machines lost after the heartbeat timeout, their runs are queued again,
and the dead organisation's tasks, which live in the replicated ledger, run on
the others' machines.

The live table shows the leader and, per organisation, DP, PI against its
limit and queued/running/done tasks (plain lines when stdout is not a
terminal). The end shows satisfaction (eq. 4.1, computed as peer sim does),
energy as user and owner, turnaround and preemptions per organisation, and
writes satisfaction.png, energy.png and turnaround.png. Every peer checks the
ledger's invariants, PI ≤ Lim among them, after every entry it applies; the
demo fails (exit 1) if any check fails or a task does not finish.`,
		Example: `  peer demo
  peer demo --scale 0.1 --compression 1000 --json
  peer demo --orgs 6 --keep --out /tmp/demo`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labExit(demo.Run(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr()))
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	fl := cmd.Flags()
	fl.IntVar(&f.Orgs, "orgs", f.Orgs, fmt.Sprintf("organisations, one peer each (%d-%d; the fifth on repeat Model 1's U1 to U4)", demo.MinOrgs, demo.MaxOrgs))
	fl.Float64Var(&f.Scale, "scale", f.Scale, fmt.Sprintf("fraction of Model 1's machines and tasks (%g-%g)", float64(demo.MinScale), float64(demo.MaxScale)))
	fl.Float64Var(&f.Compression, "compression", f.Compression, "simulated seconds per wall-clock second")
	fl.Uint64Var(&f.Seed, "seed", f.Seed, "seed of the task sizes (as peer sim --seed)")
	fl.BoolVar(&f.Keep, "keep", false, "keep the peers' data directories (printed at the end)")
	fl.BoolVar(&f.JSON, "json", false, "print one JSON object at the end (progress goes to stderr)")
	fl.StringVar(&f.Out, "out", "", "directory for the plots, the scenario and demo.json (default: the demo's temporary directory)")
	return cmd
}
