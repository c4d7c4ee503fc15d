package ledger

import (
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// TestEHOSEPDrivesTheLedger runs a small federation to completion the way
// the peers will: the leader takes a PolicyView, runs EHOSEP, commits the
// decisions as one entry; machine owners start what is assigned to them,
// checkpoint, report completions and the stops of preempted runs. Every
// fourth pass the leader first commits the decisions it made on the
// previous pass's view, which is stale by then: Apply must reject what no
// longer holds and keep every invariant. A second ledger applies the same
// log and must agree on the hash at every index.
func TestEHOSEPDrivesTheLedger(t *testing.T) {
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	f := newFed(t)
	apply := mirroredApply(t, f)
	var now int64
	driveFederation(apply, nil)

	runs := map[string]*runState{}
	var prev *policy.State
	var prevMap *ViewMap
	preempted, staleRejected, staleAccepted := 0, 0, 0
	for round := 0; round < 2000; round++ {
		now += 1000
		if now == 20_000 {
			// u3 arrives once the grid is full: it can only be served by
			// preemption.
			apply(submit("u3", now, driveSizes(6, 30_000)...))
		}
		executors(t, f, apply, runs, now, driveOrgs)
		// Leader (u1's peer).
		s, vm := f.l.PolicyView(now, 300)
		if round%4 == 3 && prev != nil {
			ds, err := pol.Schedule(prev)
			if err != nil {
				t.Fatalf("policy on the old view: %v", err)
			}
			if len(ds) > 0 {
				c, err := prevMap.DecisionsCommand("u1", peerOf("u1"), now, ds)
				if err != nil {
					t.Fatal(err)
				}
				r := apply(c)
				for _, d := range r.Decisions {
					if d.Err != nil {
						staleRejected++
					} else {
						staleAccepted++
					}
				}
				s, vm = f.l.PolicyView(now, 300)
			}
		}
		ds, err := pol.Schedule(s)
		if err != nil {
			t.Fatalf("policy on the view: %v", err)
		}
		if len(ds) > 0 {
			c, err := vm.DecisionsCommand("u1", peerOf("u1"), now, ds)
			if err != nil {
				t.Fatal(err)
			}
			r := apply(c)
			for i, d := range r.Decisions {
				// A fresh view is the current state: every decision holds.
				if d.Err != nil {
					t.Fatalf("round %d: fresh decision %d (%+v) rejected: %v", round, i, d.Decision, d.Err)
				}
				if d.Decision.Kind == DecidePreempt {
					preempted++
				}
			}
		}
		prev, prevMap = s, vm
		if len(f.l.Tasks(TaskFilter{States: []TaskState{TaskQueued, TaskAssigned, TaskRunning}})) == 0 && now > 20_000 {
			break
		}
	}
	all := f.l.Tasks(TaskFilter{})
	for _, tk := range all {
		if tk.State != TaskDone {
			t.Fatalf("task %s ended %s", tk.ID, tk.State)
		}
	}
	if len(all) != 30 {
		t.Fatalf("%d tasks", len(all))
	}
	if preempted == 0 || staleRejected == 0 {
		t.Fatalf("preemptions %d, stale decisions rejected %d: the scenario did not exercise them", preempted, staleRejected)
	}
	var user, owner int64
	for _, o := range f.l.Orgs() {
		user += o.Energy.UserMilliJ
		owner += o.Energy.OwnerMilliJ()
		if o.PIMilliW != 0 || o.AllocatedMFLOPS != 0 {
			t.Fatalf("org %s still holds machines", o.Name)
		}
	}
	if user != owner || user == 0 {
		t.Fatalf("energy booked to users %d mJ, to owners %d mJ", user, owner)
	}
	if u3 := mustOrg(t, f.l, "u3"); u3.Energy.UserMilliJ == 0 {
		t.Fatal("the late organisation never ran")
	}
	t.Logf("finished at %d ms after %d entries: %d preemptions, stale decisions %d rejected / %d still valid", now, f.idx, preempted, staleRejected, staleAccepted)
}
