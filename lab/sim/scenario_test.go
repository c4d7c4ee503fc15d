package sim

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
)

const scenarioDir = "../../examples/scenarios"

// TestTinyScenarioEHOSEP runs examples/scenarios/tiny.yaml, the hand-worked
// example of docs/SCENARIOS.md, end to end through the scenario parser and
// EHOSEP, with its own tick (30 s) and checkpoint (5 min) settings.
//
// Alpha: Alpha-m1 10 GFLOPS 100 W. Beta: Beta-m1, Beta-m2 5 GFLOPS 40 W
// (idle 10 W). Limits: Alpha 180 W (system), Beta 40 W (50 %).
//
//	t=0    DP −1 both; equal quotas, Beta's power quota is smaller: Beta
//	       first. b2 (smallest) → Beta-m1 (ID breaks the tie), ends 300.
//	       Alpha: the least-energy machine for a1 is Beta-m2 (8 mW per
//	       MFLOPS against Alpha-m1's 10), ends 6e6/5000 = 1200.
//	       Beta is at its 40 W limit: b1 waits (it may not use the 100 W
//	       Alpha-m1).
//	t=120  a2 arrives → Alpha-m1, ends 240.
//	t=300  b2 ends; b1 → Beta-m1, ends 900.
//	t=1200 a1 ends.
func TestTinyScenarioEHOSEP(t *testing.T) {
	sc, err := scenario.Load(filepath.Join(scenarioDir, "tiny.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sc.Instance(scenario.Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(inst.Machines) != 3 || len(inst.Tasks) != 4 || inst.Orgs[1].LimitMilliW != 40000 {
		t.Fatalf("tiny.yaml no longer the case worked here: %+v", inst)
	}
	var events []TraceEvent
	cfg := Config{
		TickSeconds: sc.TickSeconds, CheckpointBlockSeconds: sc.CheckpointSeconds,
		CheckInvariants: true, EnforceLimits: true,
		Trace: func(e TraceEvent) { events = append(events, e) },
	}
	r, err := Run(context.Background(), inst, mustPolicy(t, "ehosep"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	replay(t, inst, cfg, events, r, true)
	want := map[string][2]float64{"a1": {0, 1200}, "b2": {0, 300}, "a2": {120, 240}, "b1": {300, 900}}
	machine := map[string]string{}
	for _, e := range events {
		if e.Kind == EventAllocate {
			machine[e.Task] = e.Machine
		}
	}
	for id, m := range map[string]string{"a1": "Beta-m2", "b2": "Beta-m1", "a2": "Alpha-m1", "b1": "Beta-m1"} {
		if machine[id] != m {
			t.Errorf("%s ran on %s, want %s", id, machine[id], m)
		}
	}
	for _, rec := range r.Tasks {
		near(t, rec.ID+" first start", rec.FirstStartSeconds, want[rec.ID][0])
		near(t, rec.ID+" completion", rec.CompletionSeconds, want[rec.ID][1])
	}
	alpha, beta := r.Orgs[0], r.Orgs[1]
	// a1 40 W·1200 s (Alpha's task on Beta's machine), a2 100 W·120 s,
	// b2 40 W·300 s, b1 40 W·600 s.
	near(t, "Alpha user J", alpha.UserJ, 48000+12000)
	near(t, "Beta user J", beta.UserJ, 12000+24000)
	near(t, "Alpha owner J", alpha.OwnerJ, 12000)
	near(t, "Beta owner J", beta.OwnerJ, 48000+12000+24000)
	// Beta-m1 idle 300 of 1200 s at 10 W; Beta-m2 never idle; Alpha-m1
	// has no idle draw configured.
	near(t, "Beta idle J", beta.IdleJ, 3000)
	near(t, "Alpha idle J", alpha.IdleJ, 0)
	near(t, "Alpha turnaround", alpha.TurnaroundMean, (1200+120)/2.0)
	near(t, "Beta turnaround", beta.TurnaroundMean, (300+900)/2.0)
	near(t, "makespan", r.MakespanSeconds, 1200)
	if r.Total.Preemptions != 0 {
		t.Errorf("%d preemptions, want none", r.Total.Preemptions)
	}
	// EHOSEP satisfaction of Beta: federation mean 20000/3 MFLOPS,
	// α = 80 W·1200 s / 84000 J, β = (96000 − 36000)/(40 W·1200 s) + 1.
	fed := 20000.0 / 3
	ratio := (100*(1.5e6/fed)/300 + 100*(3e6/fed)/900) / 2
	near(t, "Beta satisfaction EHOSEP", beta.SatisfactionEHOSEP, ratio*(80.0*1200/84000)*((96000.0-36000)/(40*1200)+1))
}

// The dissertation's Model 1 file through scenario.Instance and RunMany:
// every run completes under EHOSEP within the limits, with and without
// checkpointing, and the late organisation's limit is honoured.
func TestModel1ScenarioRunMany(t *testing.T) {
	sc, err := scenario.Load(filepath.Join(scenarioDir, "model1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	runs := 4
	if testing.Short() {
		runs = 2
	}
	for _, block := range []float64{0, DefaultCheckpointBlockSeconds} {
		gen := func(run int) (*scenario.Instance, error) {
			return sc.Instance(scenario.Options{Late: "U2", LateLimit: "80%"}, 1+uint64(run))
		}
		cfg := Config{TickSeconds: sc.TickSeconds, CheckpointBlockSeconds: block, EnforceLimits: true, CheckInvariants: true}
		s, err := RunMany(context.Background(), gen, mustPolicy(t, "ehosep"), cfg, runs, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s.First.Total.Tasks != 300 || len(s.Orgs) != 4 {
			t.Fatalf("model1: %d tasks, %d orgs", s.First.Total.Tasks, len(s.Orgs))
		}
		for _, o := range s.Orgs {
			if o.TurnaroundMean.N != runs || math.IsNaN(o.TurnaroundMean.CI95) {
				t.Errorf("%s turnaround %+v: want %d runs and a CI", o.Name, o.TurnaroundMean, runs)
			}
		}
		// U2 submits 10 minutes late: none of its tasks starts before.
		for _, rec := range s.First.Tasks {
			if rec.Org == "U2" && rec.FirstStartSeconds < 600 {
				t.Fatalf("late U2 task %s started at %v", rec.ID, rec.FirstStartSeconds)
			}
		}
	}
}
