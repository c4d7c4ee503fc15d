package ledger

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// placementsFromAllocations is the reference for Placements: the full
// Allocations listing, reduced to what a placement carries.
func placementsFromAllocations(l *Ledger, owner string) []Placement {
	var out []Placement
	for _, a := range l.Allocations(owner) {
		p := Placement{Machine: a.Machine.ID, MachineName: a.Machine.Name, Task: a.Task.ID, State: a.Task.State,
			Attempts: a.Task.Attempts, Checkpointable: a.Task.Spec.Checkpointable}
		for _, s := range a.Task.Segments {
			p.StopOpen = p.StopOpen || s.Outcome == OutcomePreempting || s.Outcome == OutcomeCancelling
		}
		out = append(out, p)
	}
	return out
}

// pendingStopsByMachines is the reference for PendingStops: every machine
// of owner, in ID order, and its stopping runs found among all the tasks
// (the listing before it walked the stopping index).
func pendingStopsByMachines(machines []Machine, tasks []Task, owner string) []PendingStop {
	var out []PendingStop
	for _, m := range machines {
		if m.Org != owner {
			continue
		}
		var here []PendingStop
		for _, t := range tasks {
			for i, s := range t.Segments {
				if s.Machine == m.ID && (s.Outcome == OutcomePreempting || s.Outcome == OutcomeCancelling) {
					here = append(here, PendingStop{Machine: m.ID, Task: t.ID, Outcome: s.Outcome, StartMs: s.StartMs, Attempt: i + 1})
				}
			}
		}
		// By task, then start (stable: segments are in start order).
		slices.SortStableFunc(here, func(a, b PendingStop) int { return cmpStrings(a.Task, b.Task) })
		out = append(out, here...)
	}
	return out
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestPlacementsAndPendingStopsAgreeWithFullListings applies random
// command sequences (random_test.go's generator, with decisions batches
// and with schedule triggers) and checks after every step, for every
// organisation, that Placements equals the full Allocations listing
// reduced and that PendingStops equals a walk over every machine and task.
func TestPlacementsAndPendingStopsAgreeWithFullListings(t *testing.T) {
	steps := 800
	if testing.Short() {
		steps = 200
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	var seen struct{ placements, stopOpen, checkpointable, running, stops int }
	for _, sched := range []bool{false, true} {
		for _, seed := range []uint64{1, 2} {
			f := newFed(t)
			g := &gen{r: rand.New(rand.NewPCG(seed, 7)), l: f.l, now: 1_000_000, pol: pol, sched: sched}
			for i := 0; i < steps; i++ {
				f.raw(g.encode(g.command()))
				machines, tasks := f.l.Machines(), f.l.Tasks(TaskFilter{})
				for _, org := range append(slices.Clone(orgPool), "nobody") {
					got, want := f.l.Placements(org), placementsFromAllocations(f.l, org)
					if !slices.Equal(got, want) {
						t.Fatalf("sched %v seed %d step %d org %s: Placements\n%+v\nwant\n%+v", sched, seed, i, org, got, want)
					}
					gs, ws := f.l.PendingStops(org), pendingStopsByMachines(machines, tasks, org)
					if !slices.Equal(gs, ws) {
						t.Fatalf("sched %v seed %d step %d org %s: PendingStops\n%+v\nwant\n%+v", sched, seed, i, org, gs, ws)
					}
					seen.placements += len(got)
					seen.stops += len(gs)
					for _, p := range got {
						if p.StopOpen {
							seen.stopOpen++
						}
						if p.Checkpointable {
							seen.checkpointable++
						}
						if p.State == TaskRunning {
							seen.running++
						}
					}
				}
			}
		}
	}
	t.Logf("compared %+v", seen)
	// The comparison means something only if the sequences reached every
	// case the placements distinguish.
	if seen.placements == 0 || seen.stopOpen == 0 || seen.checkpointable == 0 || seen.running == 0 || seen.stops == 0 {
		t.Fatalf("the random sequences missed a case: %+v", seen)
	}
}
