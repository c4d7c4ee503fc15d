package sim

import (
	"context"
	"path/filepath"
	"reflect"
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
		shared := *inst
		shared.Machines = append([]policy.Machine(nil), inst.Machines...)
		for i := range shared.Machines {
			shared.Machines[i].Capacity = policy.Resources{CPUs: 1, MemoryBytes: 1 << 40}
		}
		orgs := make([]policy.Org, len(inst.Orgs))
		if (&policy.State{Orgs: orgs, Machines: shared.Machines}).OneSlot() || !(&policy.State{Orgs: orgs, Machines: inst.Machines}).OneSlot() {
			t.Fatalf("%s: the forced form is still one-slot, or the file is not", filepath.Base(f))
		}
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
