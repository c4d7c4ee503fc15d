package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/lab/simcase"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

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
	var stdout bytes.Buffer
	opts := simcase.Options{Scenario: path, Policy: "ehosep", Runs: 1, Seed: 5, Workers: 1, JSON: true}
	if err := simcase.Run(context.Background(), opts, &stdout); err != nil {
		t.Fatalf("peer sim: %v", err)
	}
	var got struct {
		Orgs map[string]struct {
			Satisfaction struct{ Mean float64 } `json:"satisfaction"`
		} `json:"orgs"`
		Limits map[string]float64 `json:"limits_w"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
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
