package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// TestDemo runs `peer demo` in full, as CI's scale: four real peers on
// loopback with Raft and the simulated executor, U1 late at 80 %, the
// leader killed half way. It checks the final result as the command
// reports it (the table on stdout, demo.json in --out, or the JSON on
// stdout): every task done, a fail-over to another peer, the limits
// respected in every committed state, satisfaction and energy for every
// organisation, the three plots written, and the data directories removed
// (or kept with --keep).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a four-peer federation for about ten seconds")
	}
	cases := []struct {
		name string
		json bool
		keep bool
	}{
		{name: "table", json: false, keep: false},
		{name: "json and keep", json: true, keep: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The demo's temporary root goes under TMPDIR: a test directory,
			// so that what the demo leaves behind can be checked.
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			out := filepath.Join(t.TempDir(), "out")
			args := []string{"demo", "--scale", "0.05", "--compression", "2000", "--out", out}
			if tc.json {
				args = append(args, "--json")
			}
			if tc.keep {
				args = append(args, "--keep")
			}
			code, stdout, stderr := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("peer demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			file, err := os.ReadFile(filepath.Join(out, "demo.json"))
			if err != nil {
				t.Fatal(err)
			}
			var rep demoReportJSON
			if err := json.Unmarshal(file, &rep); err != nil {
				t.Fatalf("demo.json: %v\n%s", err, file)
			}
			checkDemoReport(t, &rep)

			progress := stdout
			if tc.json {
				// stdout is exactly the report; the progress went to stderr.
				if strings.TrimSpace(stdout) != strings.TrimSpace(string(file)) {
					t.Fatalf("--json printed\n%s\nbut demo.json holds\n%s", stdout, file)
				}
				progress = stderr
			} else {
				for _, want := range []string{
					"limits: PI ≤ Lim held in every committed state",
					"fail-over: " + rep.LeaderBefore + " led and was killed",
					"plots: " + rep.Plots.Satisfaction,
				} {
					if !strings.Contains(stdout, want) {
						t.Errorf("the table output lacks %q:\n%s", want, stdout)
					}
				}
				for _, o := range rep.Orgs {
					if !strings.Contains(stdout, o.Name) {
						t.Errorf("the table output has no line for %s", o.Name)
					}
				}
			}
			for _, want := range []string{"arrives late: limit 80%", "killing the leader, " + rep.LeaderBefore, rep.LeaderAfter + " leads after", "declared lost"} {
				if !strings.Contains(progress, want) {
					t.Errorf("the progress lacks %q:\n%s", want, progress)
				}
			}

			left, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			if tc.keep {
				if rep.DataDir == "" {
					t.Fatal("--keep: no data_dir in the report")
				}
				for _, o := range rep.Orgs {
					for _, f := range []string{"config.yaml", "raft/raft.db", "identity.key"} {
						if _, err := os.Stat(filepath.Join(rep.DataDir, o.Name, f)); err != nil {
							t.Errorf("--keep: %v", err)
						}
					}
				}
			} else if len(left) != 0 || rep.DataDir != "" {
				t.Errorf("without --keep the data directories stay: %v, data_dir %q", left, rep.DataDir)
			}
		})
	}
}

// demoReportJSON decodes demo.json with pointers, so that a missing or
// null figure is seen as such.
type demoReportJSON struct {
	TasksTotal      int      `json:"tasks_total"`
	TasksDone       int      `json:"tasks_done"`
	TasksFailed     int      `json:"tasks_failed"`
	LeaderBefore    string   `json:"leader_before"`
	LeaderAfter     string   `json:"leader_after"`
	FailoverMs      int64    `json:"failover_ms"`
	MachinesLostMs  int64    `json:"machines_lost_ms"`
	LimitsRespected bool     `json:"limits_respected"`
	LimitSamples    int      `json:"limit_samples"`
	EntriesChecked  uint64   `json:"entries_checked"`
	Problems        []string `json:"problems"`
	MakespanS       *float64 `json:"makespan_s"`
	DataDir         string   `json:"data_dir"`
	Plots           struct {
		Satisfaction, Energy, Turnaround string
	} `json:"plots"`
	Orgs []struct {
		Name         string   `json:"name"`
		Late         bool     `json:"late"`
		Killed       bool     `json:"killed"`
		Tasks        int      `json:"tasks"`
		Done         int      `json:"done"`
		LimitW       float64  `json:"limit_w"`
		PowerQuotaW  float64  `json:"power_quota_w"`
		MaxPIW       float64  `json:"max_pi_w"`
		Satisfaction *float64 `json:"satisfaction"`
		EnergyUserJ  *float64 `json:"energy_user_j"`
		EnergyOwnerJ *float64 `json:"energy_owner_j"`
		TurnaroundS  *float64 `json:"turnaround_s"`
	} `json:"orgs"`
}

func checkDemoReport(t *testing.T, rep *demoReportJSON) {
	t.Helper()
	if rep.TasksTotal == 0 || rep.TasksDone != rep.TasksTotal || rep.TasksFailed != 0 {
		t.Errorf("tasks: %d done, %d failed, of %d", rep.TasksDone, rep.TasksFailed, rep.TasksTotal)
	}
	if rep.LeaderBefore == "" || rep.LeaderAfter == "" || rep.LeaderAfter == rep.LeaderBefore {
		t.Errorf("no fail-over: leader before %q, after %q", rep.LeaderBefore, rep.LeaderAfter)
	}
	if rep.FailoverMs <= 0 || rep.MachinesLostMs <= 0 {
		t.Errorf("fail-over %d ms, machines lost after %d ms", rep.FailoverMs, rep.MachinesLostMs)
	}
	if !rep.LimitsRespected || len(rep.Problems) != 0 || rep.LimitSamples == 0 || rep.EntriesChecked == 0 {
		t.Errorf("limits respected %v after %d entries and %d samples; problems %v", rep.LimitsRespected, rep.EntriesChecked, rep.LimitSamples, rep.Problems)
	}
	if rep.MakespanS == nil || *rep.MakespanS <= 0 {
		t.Errorf("makespan %v", rep.MakespanS)
	}
	if len(rep.Orgs) != 4 {
		t.Fatalf("%d organisations, want 4", len(rep.Orgs))
	}
	killed := 0
	for _, o := range rep.Orgs {
		if o.Killed {
			killed++
			if o.Name != rep.LeaderBefore {
				t.Errorf("%s marked killed, but %s led", o.Name, rep.LeaderBefore)
			}
		}
		if o.Done != o.Tasks || o.Tasks == 0 {
			t.Errorf("%s: %d of %d tasks done", o.Name, o.Done, o.Tasks)
		}
		for what, v := range map[string]*float64{"satisfaction": o.Satisfaction, "user energy": o.EnergyUserJ, "owner energy": o.EnergyOwnerJ, "turnaround": o.TurnaroundS} {
			if v == nil || *v <= 0 || math.IsNaN(*v) {
				t.Errorf("%s: %s %v", o.Name, what, v)
			}
		}
		if o.MaxPIW > o.LimitW || o.MaxPIW <= 0 {
			t.Errorf("%s: max PI %v W against its limit %v W", o.Name, o.MaxPIW, o.LimitW)
		}
		// The late organisation's limit is 80 % of its power quota, and
		// binds: it is well below the federation's power, the others' limit.
		if o.Late && math.Abs(o.LimitW-0.8*o.PowerQuotaW) > 0.001 {
			t.Errorf("%s (late): limit %v W, want 80%% of %v W", o.Name, o.LimitW, o.PowerQuotaW)
		}
	}
	if killed != 1 {
		t.Errorf("%d organisations marked killed", killed)
	}
	for _, p := range []string{rep.Plots.Satisfaction, rep.Plots.Energy, rep.Plots.Turnaround} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("plot: %v", err)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("plot %s is not a PNG", p)
		}
	}
}

// TestDemoWorkloadIsModel1: at --scale 1 with four organisations, the
// demo's generated scenario gives exactly the instance of
// examples/scenarios/model1.yaml with U1 late at 80 % (peer sim --late U1
// --limit 80%), task for task, for any seed.
func TestDemoWorkloadIsModel1(t *testing.T) {
	sc, err := scenario.Load("../../examples/scenarios/model1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range []uint64{1, 2, 99} {
		want, err := sc.Instance(scenario.Options{Late: "U1", LateLimit: "80%"}, seed)
		if err != nil {
			t.Fatal(err)
		}
		w, err := newDemoWorkload(4, 1, seed)
		if err != nil {
			t.Fatal(err)
		}
		got := *w.inst
		got.Name = want.Name
		if !reflect.DeepEqual(&got, want) {
			t.Fatalf("seed %d: the demo's Model 1 differs from examples/scenarios/model1.yaml", seed)
		}
		if w.inst.Orgs[w.late].Name != "U1" {
			t.Fatalf("late organisation %s", w.inst.Orgs[w.late].Name)
		}
	}
}

// TestDemoWorkloadScaled: machine groups and task counts are scaled and
// rounded (half away from zero), at least one of each; organisations after
// the fourth repeat Model 1's shapes; the late organisation's limit is 80 %
// of its power quota and the others' the whole federation's power.
func TestDemoWorkloadScaled(t *testing.T) {
	cases := []struct {
		orgs         int
		scale        float64
		machines     []int
		tasks        []int
		systemMilliW int64
	}{
		// U1 16×0.25=4 + 8×0.25=2 machines, 6.25→6 + 12.5→13 + 6 tasks;
		// U2 3+2; U3 1.5→2 + 2; U4 2.
		{4, 0.25, []int{6, 5, 4, 2}, []int{25, 20, 16, 16}, 4*220000 + 2*191000 + 3*99000 + 2*113500 + 2*134000 + 2*118000 + 2*67000},
		// Every group rounds to at least one machine.
		{3, 0.05, []int{2, 2, 2}, []int{5, 4, 4}, 220000 + 191000 + 99000 + 113500 + 134000 + 118000},
		// U5 is shaped like U1, U6 like U2.
		{6, 0.1, []int{3, 2, 2, 1, 3, 2}, []int{11, 8, 7, 7, 11, 8}, 2*(2*220000+191000+99000+113500) + 134000 + 118000 + 67000},
	}
	for _, c := range cases {
		w, err := newDemoWorkload(c.orgs, c.scale, 1)
		if err != nil {
			t.Fatal(err)
		}
		in := w.inst
		machines := make([]int, len(in.Orgs))
		for _, m := range in.Machines {
			machines[m.Owner]++
		}
		tasks := make([]int, len(in.Orgs))
		for _, tk := range in.Tasks {
			tasks[tk.Org]++
			if tk.SizeMFlop < 36_606_000 || tk.SizeMFlop > 256_242_000 {
				t.Errorf("%d orgs × %g: task %s of %d MFlop, outside types A-C", c.orgs, c.scale, tk.ID, tk.SizeMFlop)
			}
			if late := tk.Org == w.late; late != (tk.SubmitSeconds == demoLateDelay) {
				t.Errorf("%d orgs × %g: task %s submitted at %v s", c.orgs, c.scale, tk.ID, tk.SubmitSeconds)
			}
		}
		if !reflect.DeepEqual(machines, c.machines) || !reflect.DeepEqual(tasks, c.tasks) {
			t.Errorf("%d orgs × %g: machines %v tasks %v, want %v and %v", c.orgs, c.scale, machines, tasks, c.machines, c.tasks)
		}
		if got := in.SystemMilliW(); got != c.systemMilliW {
			t.Errorf("%d orgs × %g: federation power %d mW, want %d", c.orgs, c.scale, got, c.systemMilliW)
		}
		for i, o := range in.Orgs {
			want := in.SystemMilliW()
			if i == w.late {
				want = int64(math.Round(0.8 * float64(in.PowerQuotaMilliW(i))))
			}
			if o.LimitMilliW != want {
				t.Errorf("%d orgs × %g: %s's limit %d mW, want %d", c.orgs, c.scale, o.Name, o.LimitMilliW, want)
			}
		}
	}
}

// TestDemoBadFlags: bad flags are usage errors (exit 2) before anything is
// started or written.
func TestDemoBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--orgs", "2"}, "--orgs 2"},
		{[]string{"--orgs", "17"}, "--orgs 17"},
		{[]string{"--scale", "0"}, "--scale 0"},
		{[]string{"--scale", "1.5"}, "--scale 1.5"},
		{[]string{"--scale", "NaN"}, "--scale NaN"},
		{[]string{"--compression", "0.5"}, "--compression 0.5"},
		{[]string{"--compression", "1e9"}, "--compression 1e+09"},
		{[]string{"--orgs", "four"}, "invalid argument"},
		{[]string{"extra"}, "unknown command"},
	}
	for _, c := range cases {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		out := filepath.Join(t.TempDir(), "out")
		code, _, stderr := runCLI(t, append(append([]string{"demo"}, c.args...), "--out", out)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("peer demo %v: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, stderr, c.want)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("peer demo %v left %v in TMPDIR", c.args, left)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("peer demo %v created --out", c.args)
		}
	}
}

// TestDemoMetricsMatchSimulator: demoMetrics computes what lab/sim
// computes. The simulator's own run of a Model 1 instance is written as
// ledger records (times in milliseconds at compression 1, energy accounts
// from its figures), and demoMetrics must give back its satisfaction (eq.
// 4.1 and its factors), turnaround and preemptions.
func TestDemoMetricsMatchSimulator(t *testing.T) {
	for _, c := range []struct {
		orgs  int
		scale float64
	}{{4, 0.1}, {5, 0.05}} {
		w, err := newDemoWorkload(c.orgs, c.scale, 3)
		if err != nil {
			t.Fatal(err)
		}
		pol, err := policy.New("ehosep")
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Run(context.Background(), w.inst, pol, sim.Config{TickSeconds: 30, CheckpointBlockSeconds: 300})
		if err != nil {
			t.Fatal(err)
		}
		ms := func(s float64) int64 { return int64(math.Round(s * 1000)) }
		var tasks []ledger.Task
		for _, rec := range r.Tasks {
			tk := ledger.Task{ID: rec.ID, Org: rec.Org, SizeMFlop: rec.SizeMFlop, State: ledger.TaskDone,
				SubmittedMs: ms(rec.SubmitSeconds), EndedMs: ms(rec.CompletionSeconds)}
			for range rec.Preemptions {
				tk.Segments = append(tk.Segments, ledger.Segment{Outcome: ledger.OutcomePreempted})
			}
			// One closed segment carrying the whole run time.
			tk.Segments = append(tk.Segments, ledger.Segment{Outcome: ledger.OutcomeDone,
				StartMs: ms(rec.CompletionSeconds - rec.RunSeconds), EndMs: ms(rec.CompletionSeconds)})
			tasks = append(tasks, tk)
		}
		var orgs []ledger.OrgInfo
		for i, o := range r.Orgs {
			orgs = append(orgs, ledger.OrgInfo{Org: ledger.Org{Name: o.Name, LimitMilliW: w.inst.Orgs[i].LimitMilliW,
				Energy: ledger.Energy{UserMilliJ: ms(o.UserJ), OwnerSelfMilliJ: ms(o.OwnerJ)}}})
		}
		got, err := demoMetrics(w, tasks, orgs, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
		if !near(got.MakespanSeconds, r.MakespanSeconds) {
			t.Errorf("makespan %v, simulator %v", got.MakespanSeconds, r.MakespanSeconds)
		}
		for i, want := range r.Orgs {
			g := got.Orgs[i]
			for _, f := range []struct {
				name string
				g, w float64
			}{
				{"satisfaction", g.SatisfactionEHOSEP, want.SatisfactionEHOSEP},
				{"time ratio", g.TimeRatio, want.TimeRatio},
				{"alpha", g.Alpha, want.Alpha},
				{"beta", g.Beta, want.Beta},
				{"turnaround", g.TurnaroundMean, want.TurnaroundMean},
				{"geomean turnaround", g.TurnaroundGeoMean, want.TurnaroundGeoMean},
				{"bounded slowdown", g.BoundedSlowdownMean, want.BoundedSlowdownMean},
				{"user energy", g.UserJ, want.UserJ},
			} {
				if math.IsNaN(f.w) || !near(f.g, f.w) {
					t.Errorf("%d orgs × %g: %s: %s %v, simulator %v", c.orgs, c.scale, want.Name, f.name, f.g, f.w)
				}
			}
			if g.Preemptions != want.Preemptions || g.Tasks != want.Tasks {
				t.Errorf("%s: %d preemptions over %d tasks, simulator %d over %d", want.Name, g.Preemptions, g.Tasks, want.Preemptions, want.Tasks)
			}
		}
	}
}

// TestDemoScenarioFileSimulates: the scenario.yaml the demo writes is the
// demo's case by itself: `peer sim` on it (U1 late at 80 % included, no
// flags) gives the satisfaction of the demo's "(simulator)" column.
func TestDemoScenarioFileSimulates(t *testing.T) {
	w, err := newDemoWorkload(4, 0.1, 5)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "scenario.yaml")
	if err := os.WriteFile(path, []byte(w.yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "sim", "--scenario", path, "--runs", "1", "--seed", "5", "--json")
	if code != 0 {
		t.Fatalf("peer sim: exit %d: %s", code, stderr)
	}
	var got struct {
		Orgs map[string]struct {
			Satisfaction struct{ Mean float64 } `json:"satisfaction"`
		} `json:"orgs"`
		Limits map[string]float64 `json:"limits_w"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	want, err := sim.Run(context.Background(), w.inst, pol, sim.Config{TickSeconds: demoTickSeconds, CheckpointBlockSeconds: demoCheckpointSeconds})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range want.Orgs {
		if g := got.Orgs[o.Name].Satisfaction.Mean; g != o.SatisfactionEHOSEP {
			t.Errorf("%s: peer sim on the file says %v, the demo's prediction %v", o.Name, g, o.SatisfactionEHOSEP)
		}
		if g := got.Limits[o.Name]; g != float64(w.inst.Orgs[i].LimitMilliW)/1000 {
			t.Errorf("%s: limit %v W in peer sim, %d mW in the demo", o.Name, g, w.inst.Orgs[i].LimitMilliW)
		}
	}
}
