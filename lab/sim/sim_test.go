package sim

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// handFIFO is worked by hand below. Machines: m0 (A, 100 MFLOPS, 10 W),
// m1 (A, 50 MFLOPS, 20 W), m2 (B, 200 MFLOPS, 40 W). Under fifo:
//
//	t=0  a1 (1000 MFlop) → m0, ends 10;  a2 (600) → m1, ends 12;
//	     a3 (4000) → m2, ends 20
//	t=2  b1 (500) arrives, every machine busy
//	t=10 m0 frees, b1 → m0, ends 15
func handFIFO() *scenario.Instance {
	return &scenario.Instance{
		Name: "hand-fifo",
		Orgs: []policy.Org{{Name: "A", LimitMilliW: 30000}, {Name: "B", LimitMilliW: 40000}},
		Machines: []policy.Machine{
			{ID: "m0", Owner: 0, MFLOPS: 100, BusyMilliW: 10000},
			{ID: "m1", Owner: 0, MFLOPS: 50, BusyMilliW: 20000},
			{ID: "m2", Owner: 1, MFLOPS: 200, BusyMilliW: 40000},
		},
		IdleMilliW: []int64{1000, 2000, 5000},
		Tasks: []scenario.TaskSpec{
			{ID: "a1", Org: 0, SizeMFlop: 1000},
			{ID: "a2", Org: 0, SizeMFlop: 600},
			{ID: "a3", Org: 0, SizeMFlop: 4000},
			{ID: "b1", Org: 1, SizeMFlop: 500, SubmitSeconds: 2},
		},
	}
}

func TestHandWorkedFIFO(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tick       float64
		wantPasses int
	}{
		// Passes at 0, 2 (b1 arrives) and 10 (m0 frees with b1 waiting);
		// at 12, 15 and 20 nothing waits, so no pass.
		{"no tick", 0, 3},
		// The 4 s tick adds passes at 4 and 8 while b1 waits; fifo decides
		// nothing at them, so every figure stays the same.
		{"tick 4 s", 4, 5},
		{"tick 30 s", 30, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events []TraceEvent
			cfg := Config{TickSeconds: tc.tick, CheckInvariants: true, Trace: func(e TraceEvent) { events = append(events, e) }}
			r, err := Run(context.Background(), handFIFO(), fifo{}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Passes != tc.wantPasses {
				t.Errorf("passes = %d, want %d", r.Passes, tc.wantPasses)
			}
			if r.Decisions != 4 {
				t.Errorf("decisions = %d, want 4", r.Decisions)
			}
			wantDone := map[string][3]float64{ // first start, completion, run seconds
				"a1": {0, 10, 10}, "a2": {0, 12, 12}, "a3": {0, 20, 20}, "b1": {10, 15, 5},
			}
			for _, rec := range r.Tasks {
				w := wantDone[rec.ID]
				near(t, rec.ID+" first start", rec.FirstStartSeconds, w[0])
				near(t, rec.ID+" completion", rec.CompletionSeconds, w[1])
				near(t, rec.ID+" run", rec.RunSeconds, w[2])
			}
			near(t, "makespan", r.MakespanSeconds, 20)

			// Energy: a1 10 W·10 s = 100 J, a2 20 W·12 s = 240 J (both A on
			// A), a3 40 W·20 s = 800 J (A's task on B's machine), b1
			// 10 W·5 s = 50 J (B's task on A's machine).
			A, B := r.Orgs[0], r.Orgs[1]
			near(t, "A user J", A.UserJ, 100+240+800)
			near(t, "B user J", B.UserJ, 50)
			near(t, "A owner J", A.OwnerJ, 100+240+50)
			near(t, "B owner J", B.OwnerJ, 800)
			near(t, "total J", r.Total.EnergyJ, 1190)
			near(t, "A KJ/s", A.UserKJs, 1140.0/1000/20)
			near(t, "total KJ/s", r.Total.KJs, 1190.0/1000/20)
			// Idle over [0, 20]: m0 busy 15 s → 5 s·1 W; m1 busy 12 s → 8 s·2 W;
			// m2 busy the whole 20 s.
			near(t, "A idle J", A.IdleJ, 5+16)
			near(t, "B idle J", B.IdleJ, 0)

			// Turnaround: a1 10, a2 12, a3 20; b1 15 − 2 = 13.
			near(t, "A turnaround", A.TurnaroundMean, (10.0+12+20)/3)
			near(t, "A geo turnaround", A.TurnaroundGeoMean, math.Cbrt(10*12*20))
			near(t, "B turnaround", B.TurnaroundMean, 13)
			near(t, "total turnaround", r.Total.TurnaroundMean, (10.0+12+20+13)/4)
			// Bounded slowdown tt/max(te, 10): A's tasks ran all their
			// turnaround (1 each); b1 ran 5 s < τ, so 13/10.
			near(t, "A bounded slowdown", A.BoundedSlowdownMean, 1)
			near(t, "B bounded slowdown", B.BoundedSlowdownMean, 1.3)
			near(t, "total bounded slowdown", r.Total.BoundedSlowdownMean, (1+1+1+1.3)/4)

			// HOSEP satisfaction: ideal time on the org's mean own machine,
			// A: (100+50)/2 = 75 MFLOPS, B: 200 MFLOPS.
			near(t, "A satisfaction HOSEP", A.SatisfactionHOSEP,
				(100*(1000.0/75)/10+100*(600.0/75)/12+100*(4000.0/75)/20)/3)
			near(t, "B satisfaction HOSEP", B.SatisfactionHOSEP, 100*(500.0/200)/13)

			// EHOSEP satisfaction (eq. 4.1 as coded by the author):
			// federation mean 350/3 MFLOPS; T = 20 s.
			fed := 350.0 / 3
			ratioA := (100*(1000/fed)/10 + 100*(600/fed)/12 + 100*(4000/fed)/20) / 3
			ratioB := 100 * (500 / fed) / 13
			alphaA := 30.0 * 20 / 390 // PowerQuota 30 W · T / J on A's machines
			alphaB := 40.0 * 20 / 800
			betaA := (1190.0-1140)/(30*20) + 1 // limits 30 W and 40 W
			betaB := (1190.0-50)/(40*20) + 1
			near(t, "A time ratio", A.TimeRatio, ratioA)
			near(t, "A alpha", A.Alpha, alphaA)
			near(t, "B alpha", B.Alpha, alphaB)
			near(t, "A beta", A.Beta, betaA)
			near(t, "B beta", B.Beta, betaB)
			near(t, "A satisfaction EHOSEP", A.SatisfactionEHOSEP, ratioA*alphaA*betaA)
			near(t, "B satisfaction EHOSEP", B.SatisfactionEHOSEP, ratioB*alphaB*betaB)
			near(t, "A satisfaction EHOSEP (by hand)", A.SatisfactionEHOSEP, 100*(600.0/390)*(1+50.0/600))

			if A.Preemptions+B.Preemptions+r.Total.Preemptions != 0 || r.Total.WastedMFlop != 0 {
				t.Errorf("fifo never preempts: got %d/%d/%d preemptions, %v wasted", A.Preemptions, B.Preemptions, r.Total.Preemptions, r.Total.WastedMFlop)
			}

			want := []TraceEvent{
				{Time: 0, Kind: EventAllocate, Org: "A", Task: "a1", Machine: "m0"},
				{Time: 0, Kind: EventAllocate, Org: "A", Task: "a2", Machine: "m1"},
				{Time: 0, Kind: EventAllocate, Org: "A", Task: "a3", Machine: "m2"},
				{Time: 10, Kind: EventComplete, Org: "A", Task: "a1", Machine: "m0"},
				{Time: 10, Kind: EventAllocate, Org: "B", Task: "b1", Machine: "m0"},
				{Time: 12, Kind: EventComplete, Org: "A", Task: "a2", Machine: "m1"},
				{Time: 15, Kind: EventComplete, Org: "B", Task: "b1", Machine: "m0"},
				{Time: 20, Kind: EventComplete, Org: "A", Task: "a3", Machine: "m2"},
			}
			if len(events) != len(want) {
				t.Fatalf("trace has %d events, want %d: %+v", len(events), len(want), events)
			}
			for i := range want {
				if events[i] != want[i] {
					t.Errorf("trace[%d] = %+v, want %+v", i, events[i], want[i])
				}
			}
		})
	}
}

// handPreempt is worked by hand under the real EHOSEP. Machines: mA (A,
// 100 MFLOPS, 10 W), mB (B, 90 MFLOPS, 12 W); every limit is the whole
// system, 22 W.
//
//	t=0   A's a1 and a2 (60000 MFlop each) arrive. A is served first (equal
//	      DP −1 and quota... A has the smaller power quota); a1 takes the
//	      least-energy machine mA (ends 600), then a2 takes mB (ends 0 +
//	      60000/90 = 666.67). DP_A = 0.9.
//	t=400 B's b1 (30000) arrives; no machine is free. DP_B = −1 < 0 and
//	      DP_A > 0, so A is the victim organisation; of its machines mB
//	      wastes least (400·90 = 36000 < 400·100 without checkpointing;
//	      (400 mod 300)·90 = 9000 < 10000 with), and PRE_Preemp(A, mB) =
//	      (190 − 100 − 90)/100 = 0 ≥ 0: a2 is stopped and b1 runs on mB,
//	      ending 400 + 30000/90 = 733.33.
//	t=600 a1 ends; a2 restarts on mA with what it kept.
//	      Without checkpointing it kept 0: ends 600 + 60000/100 = 1200.
//	      With 300 s blocks it kept floor(400/300)·300·90 = 27000 MFlop:
//	      33000 left, ends 600 + 330 = 930.
func handPreempt() *scenario.Instance {
	return &scenario.Instance{
		Name: "hand-preempt",
		Orgs: []policy.Org{{Name: "A", LimitMilliW: 22000}, {Name: "B", LimitMilliW: 22000}},
		Machines: []policy.Machine{
			{ID: "mA", Owner: 0, MFLOPS: 100, BusyMilliW: 10000},
			{ID: "mB", Owner: 1, MFLOPS: 90, BusyMilliW: 12000},
		},
		Tasks: []scenario.TaskSpec{
			{ID: "a1", Org: 0, SizeMFlop: 60000},
			{ID: "a2", Org: 0, SizeMFlop: 60000},
			{ID: "b1", Org: 1, SizeMFlop: 30000, SubmitSeconds: 400},
		},
	}
}

func TestHandWorkedPreemption(t *testing.T) {
	for _, tc := range []struct {
		name       string
		block      float64
		kept       float64
		a2Done     float64
		a2Run      float64 // total seconds on machines
		wasted     float64
		a2SecondJ  float64
		wantTraceT []float64
	}{
		{"without checkpointing", 0, 0, 1200, 400 + 600, 36000, 10 * 600, nil},
		{"with 5-minute checkpoints", 300, 27000, 930, 400 + 330, 36000 - 27000, 10 * 330, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events []TraceEvent
			cfg := Config{
				TickSeconds: DefaultTickSeconds, CheckpointBlockSeconds: tc.block,
				CheckInvariants: true, EnforceLimits: true,
				Trace: func(e TraceEvent) { events = append(events, e) },
			}
			r, err := Run(context.Background(), handPreempt(), mustPolicy(t, "ehosep"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := map[string]TaskRecord{}
			for _, x := range r.Tasks {
				rec[x.ID] = x
			}
			near(t, "a1 completion", rec["a1"].CompletionSeconds, 600)
			near(t, "b1 first start", rec["b1"].FirstStartSeconds, 400)
			near(t, "b1 completion", rec["b1"].CompletionSeconds, 400+30000.0/90)
			near(t, "a2 first start", rec["a2"].FirstStartSeconds, 0)
			near(t, "a2 completion", rec["a2"].CompletionSeconds, tc.a2Done)
			near(t, "a2 run seconds", rec["a2"].RunSeconds, tc.a2Run)
			near(t, "a2 wasted", rec["a2"].WastedMFlop, tc.wasted)
			if rec["a2"].Preemptions != 1 || rec["a1"].Preemptions != 0 || rec["b1"].Preemptions != 0 {
				t.Errorf("preemptions a1/a2/b1 = %d/%d/%d, want 0/1/0", rec["a1"].Preemptions, rec["a2"].Preemptions, rec["b1"].Preemptions)
			}
			A, B := r.Orgs[0], r.Orgs[1]
			if A.Preemptions != 1 || B.Preemptions != 0 || A.PreemptionsGained != 0 || B.PreemptionsGained != 1 || r.Total.Preemptions != 1 {
				t.Errorf("preemptions A %d/%d, B %d/%d, total %d; want A stopped once for B",
					A.Preemptions, A.PreemptionsGained, B.Preemptions, B.PreemptionsGained, r.Total.Preemptions)
			}
			near(t, "A wasted", A.WastedMFlop, tc.wasted)
			near(t, "makespan", r.MakespanSeconds, tc.a2Done)

			// a1 on mA 600 s·10 W; a2's first segment on mB 400 s·12 W
			// (A's task, B's machine); b1 on mB 333.3 s·12 W; a2's second
			// segment on mA.
			b1J := 12 * 30000.0 / 90
			near(t, "a2 energy", rec["a2"].EnergyJ, 400*12+tc.a2SecondJ)
			near(t, "A user J", A.UserJ, 6000+4800+tc.a2SecondJ)
			near(t, "B user J", B.UserJ, b1J)
			near(t, "A owner J", A.OwnerJ, 6000+tc.a2SecondJ)
			near(t, "B owner J", B.OwnerJ, 4800+b1J)

			var pre *TraceEvent
			for i := range events {
				if events[i].Kind == EventPreempt {
					if pre != nil {
						t.Fatalf("two preemptions in the trace: %+v", events)
					}
					pre = &events[i]
				}
			}
			want := TraceEvent{Time: 400, Kind: EventPreempt, Org: "B", Task: "b1", Machine: "mB", Victim: "a2", VictimOrg: "A", KeptMFlop: tc.kept}
			if pre == nil || *pre != want {
				t.Errorf("preemption event = %+v, want %+v", pre, want)
			}
		})
	}
}

func TestInvalidDecisionsAreErrors(t *testing.T) {
	// At t=0 of handFIFO a1-a3 are queued; b1 is not yet submitted.
	for _, tc := range []struct {
		name string
		ds   []policy.Decision
		want string
	}{
		{"machine out of range", []policy.Decision{{Kind: policy.Allocate, Task: "a1", Org: 0, Machine: 3}}, "out of range"},
		{"unknown task", []policy.Decision{{Kind: policy.Allocate, Task: "zz", Org: 0, Machine: 0}}, "unknown task"},
		{"task not yet submitted", []policy.Decision{{Kind: policy.Allocate, Task: "b1", Org: 1, Machine: 0}}, "not queued"},
		{"task placed twice", []policy.Decision{
			{Kind: policy.Allocate, Task: "a1", Org: 0, Machine: 0},
			{Kind: policy.Allocate, Task: "a1", Org: 0, Machine: 1},
		}, "not queued"},
		{"wrong org", []policy.Decision{{Kind: policy.Allocate, Task: "a1", Org: 1, Machine: 0}}, "belongs to org 0"},
		{"busy machine", []policy.Decision{
			{Kind: policy.Allocate, Task: "a1", Org: 0, Machine: 0},
			{Kind: policy.Allocate, Task: "a2", Org: 0, Machine: 0},
		}, "not free"},
		{"preempt free machine", []policy.Decision{{Kind: policy.Preempt, Task: "a1", Org: 0, Machine: 0, Victim: "a2", VictimOrg: 0}}, "free machine"},
		{"wrong victim", []policy.Decision{
			{Kind: policy.Allocate, Task: "a1", Org: 0, Machine: 0},
			{Kind: policy.Preempt, Task: "a2", Org: 0, Machine: 0, Victim: "a3", VictimOrg: 0},
		}, "victim"},
		{"wrong kept work", []policy.Decision{
			{Kind: policy.Allocate, Task: "a1", Org: 0, Machine: 0},
			{Kind: policy.Preempt, Task: "a2", Org: 0, Machine: 0, Victim: "a1", VictimOrg: 0, VictimKeptMFlop: 5},
		}, "keeps"},
		{"unknown kind", []policy.Decision{{Kind: 9, Task: "a1", Org: 0, Machine: 0}}, "unknown decision kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			_, err := Run(context.Background(), handFIFO(), scripted{first: tc.ds, calls: &calls}, Config{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A preemption within the same pass as the victim's start is valid: it ran
// 0 s and keeps nothing.
func TestPreemptInSamePass(t *testing.T) {
	calls := 0
	p := scripted{calls: &calls, first: []policy.Decision{
		{Kind: policy.Allocate, Task: "a1", Org: 0, Machine: 0},
		{Kind: policy.Preempt, Task: "a2", Org: 0, Machine: 0, Victim: "a1", VictimOrg: 0},
	}}
	inst := handFIFO()
	inst.Tasks = inst.Tasks[:2]
	// After the scripted pass a2 runs on m0 and the stopped a1 waits; the
	// policy never places it, so once a2 completes (600/100 = 6 s) nothing
	// runs or will arrive: stuck at t=6.
	_, err := Run(context.Background(), inst, p, Config{CheckInvariants: true})
	if err == nil || !strings.Contains(err.Error(), "stuck at t=6") {
		t.Fatalf("err = %v, want stuck at t=6 (a2 ends at 600/100)", err)
	}
}

func TestStuckIsAnError(t *testing.T) {
	inst := handPreempt()
	inst.Orgs[0].LimitMilliW = 9000 // below both machines' draw
	_, err := Run(context.Background(), inst, mustPolicy(t, "ehosep"), DefaultConfig())
	if err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("err = %v, want a stuck error", err)
	}
}

func TestMaxSeconds(t *testing.T) {
	_, err := Run(context.Background(), handFIFO(), fifo{}, Config{MaxSeconds: 19})
	if err == nil || !strings.Contains(err.Error(), "not finished by t=19") {
		t.Fatalf("err = %v, want not finished", err)
	}
	if _, err := Run(context.Background(), handFIFO(), fifo{}, Config{MaxSeconds: 20}); err != nil {
		t.Fatal(err)
	}
}

func TestBadInputIsAnError(t *testing.T) {
	mod := func(f func(*scenario.Instance)) *scenario.Instance {
		inst := handFIFO()
		f(inst)
		return inst
	}
	for _, tc := range []struct {
		name string
		inst *scenario.Instance
		cfg  Config
		want string
	}{
		{"nil instance", nil, Config{}, "nil instance"},
		{"no orgs", &scenario.Instance{}, Config{}, "no organisations"},
		{"duplicate org", mod(func(i *scenario.Instance) { i.Orgs[1].Name = "A" }), Config{}, "duplicate name"},
		{"negative limit", mod(func(i *scenario.Instance) { i.Orgs[0].LimitMilliW = -1 }), Config{}, "limit -1 mW"},
		{"owner out of range", mod(func(i *scenario.Instance) { i.Machines[0].Owner = 5 }), Config{}, "owner index 5"},
		{"zero MFLOPS", mod(func(i *scenario.Instance) { i.Machines[0].MFLOPS = 0 }), Config{}, "must be > 0"},
		{"duplicate machine", mod(func(i *scenario.Instance) { i.Machines[1].ID = "m0" }), Config{}, "duplicate id \"m0\""},
		{"org without machine", mod(func(i *scenario.Instance) { i.Machines[2].Owner = 0 }), Config{}, "owns no machine"},
		{"idle length", mod(func(i *scenario.Instance) { i.IdleMilliW = i.IdleMilliW[:1] }), Config{}, "1 idle draws for 3 machines"},
		{"negative idle", mod(func(i *scenario.Instance) { i.IdleMilliW[1] = -2 }), Config{}, "idle draw -2"},
		{"duplicate task", mod(func(i *scenario.Instance) { i.Tasks[1].ID = "a1" }), Config{}, "duplicate id \"a1\""},
		{"empty task id", mod(func(i *scenario.Instance) { i.Tasks[1].ID = "" }), Config{}, "empty id"},
		{"task org", mod(func(i *scenario.Instance) { i.Tasks[0].Org = -1 }), Config{}, "org index -1"},
		{"zero size", mod(func(i *scenario.Instance) { i.Tasks[0].SizeMFlop = 0 }), Config{}, "size 0 MFlop"},
		{"NaN submit", mod(func(i *scenario.Instance) { i.Tasks[0].SubmitSeconds = math.NaN() }), Config{}, "submit time NaN"},
		{"negative tick", handFIFO(), Config{TickSeconds: -1}, "tick -1"},
		{"NaN block", handFIFO(), Config{CheckpointBlockSeconds: math.NaN()}, "checkpoint block NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.inst, fifo{}, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Tasks given out of submission order are run in submission order; the
// instance is not modified.
func TestUnsortedTasks(t *testing.T) {
	inst := handFIFO()
	inst.Tasks[0], inst.Tasks[3] = inst.Tasks[3], inst.Tasks[0] // b1 first
	r, err := Run(context.Background(), inst, fifo{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if inst.Tasks[0].ID != "b1" {
		t.Fatal("Run reordered the caller's instance")
	}
	// a3 was listed before a2 now (positions 0↔3 swapped: b1,a2,a3,a1):
	// submission order at t=0 is a2, a3, a1; so a2→m0, a3→m1, a1→m2.
	got := map[string]float64{}
	for _, x := range r.Tasks {
		got[x.ID] = x.CompletionSeconds
	}
	near(t, "a2 completion", got["a2"], 6)     // 600/100
	near(t, "a3 completion", got["a3"], 80)    // 4000/50
	near(t, "a1 completion", got["a1"], 5)     // 1000/200
	near(t, "b1 completion", got["b1"], 5+2.5) // m2 frees first, at 5: 500/200
	if r.Tasks[0].ID != "a2" || r.Tasks[3].ID != "b1" {
		t.Errorf("records not in submission order: %s … %s", r.Tasks[0].ID, r.Tasks[3].ID)
	}
}

func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, handFIFO(), fifo{}, Config{})
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("err = %v, want context canceled", err)
	}
}
