package sim

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// TestOwnerPolicyScenario runs examples/scenarios/owners.yaml, the issue's
// black hole: A's four efficient machines allow only A's solver, C's only
// B. With the owner policies no B task is ever placed on A's machines, no
// A task on C's or B's, A's machines run A's solver, every task completes,
// and every placement is one the owner allows. Without them (the same
// instance, policies dropped) EHOSEP sends B's tasks to A's machines
// first: the policies are what keeps them off.
func TestOwnerPolicyScenario(t *testing.T) {
	sc, err := scenario.Load(filepath.Join(scenarioDir, "owners.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sc.Instance(scenario.Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// placements counts, per (task organisation, machine organisation),
	// the tasks placed, checking each against its machine's owner.
	placements := func(in *scenario.Instance, name string) map[[2]string]int {
		t.Helper()
		machine := map[string]policy.Machine{}
		for _, m := range in.Machines {
			machine[m.ID] = m
		}
		task := map[string]scenario.TaskSpec{}
		for _, tk := range in.Tasks {
			task[tk.ID] = tk
		}
		var events []TraceEvent
		cfg := Config{TickSeconds: sc.TickSeconds, CheckpointBlockSeconds: sc.CheckpointSeconds,
			CheckInvariants: true, EnforceLimits: true, Trace: func(e TraceEvent) { events = append(events, e) }}
		res, err := Run(context.Background(), in, mustPolicy(t, name), cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Total.Tasks != len(in.Tasks) {
			t.Fatalf("%s: %d of %d tasks completed", name, res.Total.Tasks, len(in.Tasks))
		}
		out := map[[2]string]int{}
		for _, e := range events {
			if e.Kind == EventComplete {
				continue
			}
			m, tk := machine[e.Machine], task[e.Task]
			if why := policy.Mismatch(m, policy.Task{Org: tk.Org, Executable: tk.Executable}, in.Orgs); why != "" {
				t.Fatalf("%s: t=%g: %s placed on %s: %s", name, e.Time, e.Task, m.ID, why)
			}
			out[[2]string{e.Org, in.Orgs[m.Owner].Name}]++
		}
		return out
	}
	for _, name := range []string{"ehosep", "ehosep-bestfit"} {
		got := placements(inst, name)
		if got[[2]string{"B", "A"}] != 0 || got[[2]string{"A", "B"}] != 0 || got[[2]string{"A", "C"}] != 0 {
			t.Fatalf("%s: placements %v: a task went where its machine's owner refuses it", name, got)
		}
		if got[[2]string{"A", "A"}] < 8 || got[[2]string{"B", "C"}] == 0 {
			t.Fatalf("%s: placements %v: want A's solver tasks on A's machines and B's shell tasks on C's too", name, got)
		}
		t.Logf("%s with owner policies: placements (task org, machine owner) %v", name, got)
	}

	open := *inst
	open.Machines = append([]policy.Machine(nil), inst.Machines...)
	for i := range open.Machines {
		open.Machines[i].Policy = nil
	}
	got := placements(&open, "ehosep")
	if got[[2]string{"B", "A"}] == 0 {
		t.Fatalf("without owner policies no B task went to A's machines (%v): the scenario shows nothing", got)
	}
	t.Logf("without owner policies: placements %v", got)
}
