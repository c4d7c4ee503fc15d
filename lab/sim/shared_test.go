package sim

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// TestScenariosDecideAlikeOnTheSharedPass is the compatibility property of
// issue 14 on the scenario files: every file of examples/scenarios, run by
// the simulator under ehosep and ehosep-bestfit, gives the same result and
// the same trace, event for event, bit for bit, when its machines declare
// a memory no task asks for. That declaration changes nothing a task may
// use or counts for (each still takes a whole one-slot machine) but makes
// the state not one-slot, so every pass goes through the shared-machine
// pass instead of the indexed one.
func TestScenariosDecideAlikeOnTheSharedPass(t *testing.T) {
	oneSlot := 0
	defer func() {
		if oneSlot < 6 && !t.Failed() && !testing.Short() {
			t.Errorf("only %d one-slot scenario files compared", oneSlot)
		}
	}()
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files (%v)", err)
	}
	for _, f := range files {
		sc, err := scenario.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := sc.Instance(scenario.Options{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(inst.Tasks) > 600 && testing.Short() {
			continue
		}
		if !inst.OneSlot() {
			continue // already on the shared pass (shared.yaml): TestSharedScenario
		}
		shared := *inst
		shared.Machines = append([]policy.Machine(nil), inst.Machines...)
		for i := range shared.Machines {
			shared.Machines[i].Capacity = policy.Resources{CPUs: 1, MemoryBytes: 1 << 40}
		}
		orgs := make([]policy.Org, len(inst.Orgs))
		if (&policy.State{Orgs: orgs, Machines: shared.Machines}).OneSlot() {
			t.Fatalf("%s: the forced form is still one-slot", filepath.Base(f))
		}
		oneSlot++
		for _, name := range []string{"ehosep", "ehosep-bestfit"} {
			run := func(in *scenario.Instance) (*Result, []TraceEvent) {
				var events []TraceEvent
				cfg := Config{TickSeconds: sc.TickSeconds, CheckpointBlockSeconds: sc.CheckpointSeconds,
					CheckInvariants: true, EnforceLimits: true, Trace: func(e TraceEvent) { events = append(events, e) }}
				r, err := Run(context.Background(), in, mustPolicy(t, name), cfg)
				if err != nil {
					t.Fatalf("%s %s: %v", filepath.Base(f), name, err)
				}
				return r, events
			}
			want, wantEv := run(inst)
			got, gotEv := run(&shared)
			if !reflect.DeepEqual(gotEv, wantEv) {
				t.Fatalf("%s %s: the shared pass's trace differs (%d events against %d)", filepath.Base(f), name, len(gotEv), len(wantEv))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %s: the shared pass's result differs", filepath.Base(f), name)
			}
		}
	}
}

// TestSharedScenario runs examples/scenarios/shared.yaml, whose machines
// have cores, memory, GPUs and labels and whose tasks ask for some of them,
// under both EHOSEP variants and several seeds, and replays each trace: at
// no instant does any machine run tasks asking together for more than its
// capacity, some machine runs two tasks at once, every task runs only on
// machines meeting its requirements, each task is booked its share of its
// machines' draw (share × busy × time), and the metrics are defined.
func TestSharedScenario(t *testing.T) {
	sc, err := scenario.Load(filepath.Join(scenarioDir, "shared.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ehosep", "ehosep-bestfit"} {
		for seed := uint64(1); seed <= 3; seed++ {
			inst, err := sc.Instance(scenario.Options{}, seed)
			if err != nil {
				t.Fatal(err)
			}
			if inst.OneSlot() {
				t.Fatal("shared.yaml resolves to a one-slot instance")
			}
			var events []TraceEvent
			cfg := Config{TickSeconds: sc.TickSeconds, CheckpointBlockSeconds: sc.CheckpointSeconds,
				CheckInvariants: true, EnforceLimits: true, Trace: func(e TraceEvent) { events = append(events, e) }}
			res, err := Run(context.Background(), inst, mustPolicy(t, name), cfg)
			if err != nil {
				t.Fatalf("%s seed %d: %v", name, seed, err)
			}
			checkSharedTrace(t, fmt.Sprintf("%s seed %d", name, seed), inst, res, events)
		}
	}
}

// checkSharedTrace replays events on inst's machines.
func checkSharedTrace(t *testing.T, what string, inst *scenario.Instance, res *Result, events []TraceEvent) {
	t.Helper()
	machine := map[string]int{}
	for i, m := range inst.Machines {
		machine[m.ID] = i
	}
	task := map[string]scenario.TaskSpec{}
	for _, tk := range inst.Tasks {
		task[tk.ID] = tk
	}
	type seg struct {
		m     int
		start float64
	}
	on := map[string]seg{} // running task -> its machine and start
	used := make([]policy.Resources, len(inst.Machines))
	count := make([]int, len(inst.Machines))
	wantJ := map[string]float64{}
	maxTogether, preempts := 0, 0
	stop := func(id string, now float64) {
		sg, ok := on[id]
		if !ok {
			t.Fatalf("%s: t=%g: task %s stops but does not run", what, now, id)
		}
		mc := inst.Machines[sg.m]
		share := policy.ShareOf(mc.Capacity, task[id].Request)
		wantJ[id] += float64(share.Of(mc.BusyMilliW)) * (now - sg.start) / 1000
		used[sg.m] = used[sg.m].Plus(negate(task[id].Request.Request()))
		count[sg.m]--
		delete(on, id)
	}
	for _, e := range events {
		m := machine[e.Machine]
		mc := inst.Machines[m]
		switch e.Kind {
		case EventComplete:
			stop(e.Task, e.Time)
			continue
		case EventPreempt:
			preempts++
			stop(e.Victim, e.Time)
		}
		tk := task[e.Task]
		if why := policy.Mismatch(mc, policy.Task{Org: tk.Org, Request: tk.Request, Requirements: tk.Requirements}, inst.Orgs); why != "" {
			t.Fatalf("%s: t=%g: task %s placed on %s: %s", what, e.Time, e.Task, mc.ID, why)
		}
		on[e.Task] = seg{m, e.Time}
		used[m] = used[m].Plus(tk.Request.Request())
		count[m]++
		capa := mc.Capacity.Capacity()
		if !policy.Fits(used[m], capa, capa) {
			t.Fatalf("%s: t=%g: %s over-committed: its tasks ask %+v of %+v", what, e.Time, mc.ID, used[m], capa)
		}
		maxTogether = max(maxTogether, count[m])
	}
	if len(on) != 0 {
		t.Fatalf("%s: %d tasks still running at the end of the trace", what, len(on))
	}
	if maxTogether < 2 {
		t.Fatalf("%s: no machine ever ran two tasks at once", what)
	}
	if res.Total.Tasks != len(inst.Tasks) || math.IsNaN(res.Total.TurnaroundMean) || !(res.Total.EnergyJ > 0) {
		t.Fatalf("%s: totals %+v", what, res.Total)
	}
	var sumJ float64
	for _, r := range res.Tasks {
		if got, want := r.EnergyJ, wantJ[r.ID]; math.Abs(got-want) > 1e-9*want {
			t.Fatalf("%s: task %s booked %v J, its share of draw over its segments is %v J", what, r.ID, got, want)
		}
		sumJ += r.EnergyJ
	}
	if math.Abs(sumJ-res.Total.EnergyJ) > 1e-9*sumJ {
		t.Fatalf("%s: tasks booked %v J, total %v J", what, sumJ, res.Total.EnergyJ)
	}
	for _, o := range res.Orgs {
		if math.IsNaN(o.SatisfactionHOSEP) || math.IsNaN(o.SatisfactionHOSEPExec) || math.IsNaN(o.TurnaroundMean) || math.IsNaN(o.BoundedSlowdownMean) {
			t.Fatalf("%s: org %s has an undefined metric: %+v", what, o.Name, o)
		}
	}
	t.Logf("%s: %d events, up to %d tasks on one machine, %d preemptions", what, len(events), maxTogether, preempts)
}

// TestSharedScenarioRefusesISPD: the iSPD engine places one task per
// machine, so it refuses an instance with multi-core machines or requests
// rather than run it with the wrong model.
func TestSharedScenarioRefusesISPD(t *testing.T) {
	sc, err := scenario.Load(filepath.Join(scenarioDir, "shared.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sc.Instance(scenario.Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Engine = EngineISPD
	_, err = Run(context.Background(), inst, mustPolicy(t, "ehosep"), cfg)
	if err == nil || !strings.Contains(err.Error(), "iSPD engine places one task per machine") {
		t.Fatalf("err = %v, want the iSPD engine's refusal", err)
	}
}

// sharedHand is one organisation with a 4-core, 8 GiB machine labelled x
// and a one-slot machine, and seven tasks queued at t=0.
func sharedHand() *scenario.Instance {
	gib := int64(1) << 30
	return &scenario.Instance{
		Name: "shared-hand",
		Orgs: []policy.Org{{Name: "A", LimitMilliW: 1_000_000}},
		Machines: []policy.Machine{
			{ID: "m0", MFLOPS: 4000, BusyMilliW: 400_000, Capacity: policy.Resources{CPUs: 4, MemoryBytes: 8 * gib}, Attrs: map[string]string{"label.x": ""}},
			{ID: "m1", MFLOPS: 1000, BusyMilliW: 100_000},
		},
		Tasks: []scenario.TaskSpec{
			{ID: "two1", SizeMFlop: 200_000, Request: policy.Resources{CPUs: 2}},
			{ID: "two2", SizeMFlop: 400_000, Request: policy.Resources{CPUs: 2}},
			{ID: "one", SizeMFlop: 100_000},
			{ID: "mem6", SizeMFlop: 100_000, Request: policy.Resources{MemoryBytes: 6 * gib}},
			{ID: "mem6b", SizeMFlop: 100_000, Request: policy.Resources{MemoryBytes: 6 * gib}},
			{ID: "four", SizeMFlop: 100_000, Request: policy.Resources{CPUs: 4}},
			{ID: "needsY", SizeMFlop: 100_000, Requirements: []policy.Requirement{{Attribute: "label.y", Operator: "is_set"}}},
		},
	}
}

// TestSharedDecisions: the simulator itself refuses a decision that would
// over-commit a machine or place a task where it cannot run, whatever the
// policy says, and accepts two tasks at once where they fit, running each
// at its share of the machine and booking it its share of the draw.
func TestSharedDecisions(t *testing.T) {
	alloc := func(task string, m int) policy.Decision {
		return policy.Decision{Kind: policy.Allocate, Task: task, Machine: m}
	}
	for _, tc := range []struct {
		name string
		ds   []policy.Decision
		want string
	}{
		{"cpus over-committed", []policy.Decision{alloc("two1", 0), alloc("two2", 0), alloc("one", 0)}, `machine "m0" is not free: no room for the task (runs "two1", "two2")`},
		{"memory over-committed", []policy.Decision{alloc("mem6", 0), alloc("mem6b", 0)}, `machine "m0" is not free: no room for the task (runs "mem6")`},
		{"requirement unmet", []policy.Decision{alloc("needsY", 0)}, `requirement label.y is_set unmet`},
		{"request larger than the machine", []policy.Decision{alloc("two1", 1)}, `task cannot run on machine "m1": cpus larger than m1's`},
		{"no room once the victim stops", []policy.Decision{alloc("two1", 0), alloc("two2", 0),
			{Kind: policy.Preempt, Task: "four", Machine: 0, Victim: "two1"}}, `machine "m0" has no room for the task once victim "two1" stops (runs "two1", "two2")`},
		{"wrong victim on a shared machine", []policy.Decision{alloc("two1", 0), alloc("two2", 0),
			{Kind: policy.Preempt, Task: "one", Machine: 0, Victim: "mem6"}}, `victim "mem6" named, machine "m0" runs "two1", "two2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			_, err := Run(context.Background(), sharedHand(), scripted{first: tc.ds, calls: &calls}, Config{CheckInvariants: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}

	// Two 2-core tasks at once on m0: each has share 2/4 and runs at
	// 2000 MFLOPS (two1 100 s, two2 200 s) drawing 200 W; the rest after.
	var events []TraceEvent
	calls := 0
	inst := sharedHand()
	inst.Tasks = inst.Tasks[:3]
	r, err := Run(context.Background(), inst, scripted{first: []policy.Decision{alloc("two1", 0), alloc("two2", 0), alloc("one", 1)}, calls: &calls},
		Config{CheckInvariants: true, Trace: func(e TraceEvent) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	rec := map[string]TaskRecord{}
	for _, tr := range r.Tasks {
		rec[tr.ID] = tr
	}
	if rec["two1"].FirstStartSeconds != 0 || rec["two2"].FirstStartSeconds != 0 || rec["two1"].CompletionSeconds != 100 || rec["two2"].CompletionSeconds != 200 {
		t.Fatalf("two1 %+v, two2 %+v: want both started at 0, done at 100 and 200 s", rec["two1"], rec["two2"])
	}
	if rec["two1"].EnergyJ != 200*100 || rec["two2"].EnergyJ != 200*200 || rec["one"].EnergyJ != 100*100 {
		t.Fatalf("energies %v, %v, %v J; want 20000, 40000, 10000 (share × busy × time)", rec["two1"].EnergyJ, rec["two2"].EnergyJ, rec["one"].EnergyJ)
	}
	if r.Orgs[0].OwnerJ != 70000 || r.Total.EnergyJ != 70000 {
		t.Fatalf("owner %v J, total %v J, want 70000", r.Orgs[0].OwnerJ, r.Total.EnergyJ)
	}
}
