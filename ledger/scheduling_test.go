package ledger

import (
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// runState is what the test's executor remembers about a run it started.
type runState struct {
	startMs        int64
	startRemaining int64
	lastCkMs       int64
}

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
	mirror := New()
	apply := func(c Command) Result {
		t.Helper()
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("encode %s: %v", c.Kind(), err)
		}
		r := f.raw(b)
		mirror.Apply(f.idx, b)
		if mirror.Hash() != f.l.Hash() {
			t.Fatalf("index %d: the two ledgers disagree", f.idx)
		}
		if !r.Applied() {
			t.Fatalf("index %d: %s rejected: %v", f.idx, c.Kind(), r.Err)
		}
		return r
	}
	var now int64
	const whole = 10_000_000 // 10 kW: no limit binds
	specs := func(n int, mflops, mw int64) []MachineSpec {
		out := make([]MachineSpec, n)
		for i := range out {
			out[i] = MachineSpec{Name: "n" + string(rune('0'+i)), MFLOPS: mflops, BusyMilliW: mw}
		}
		return out
	}
	for _, c := range []Command{
		register("u1", whole, specs(4, 2000, 200_000)...),
		register("u2", whole, specs(4, 1000, 100_000)...),
		// u3's limit is below the others': algorithm 5 then preempts for it
		// as long as it is in deficit.
		register("u3", 450_000, specs(2, 1500, 150_000)...),
	} {
		c.AtMs = now
		apply(c)
	}
	sizes := func(n int, base int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = base + int64(i%5)*10_000
		}
		return out
	}
	apply(submit("u1", now, sizes(12, 20_000)...))
	apply(submit("u2", now, sizes(12, 20_000)...))

	runs := map[string]*runState{}
	var prev *policy.State
	var prevMap *ViewMap
	preempted, staleRejected, staleAccepted := 0, 0, 0
	orgs := []string{"u1", "u2", "u3"}
	for round := 0; round < 2000; round++ {
		now += 1000
		if now == 20_000 {
			// u3 arrives once the grid is full: it can only be served by
			// preemption.
			apply(submit("u3", now, sizes(6, 30_000)...))
		}
		// Executors.
		for _, org := range orgs {
			for _, p := range f.l.PendingStops(org) {
				m := mustMachine(t, f.l, p.Machine)
				apply(stopped(org, p.Task, p.Machine, now, declaredMilliJ(m.BusyMilliW, p.StartMs, now), nil))
			}
			for _, a := range f.l.Allocations(org) {
				tk, m := a.Task, a.Machine
				switch tk.State {
				case TaskAssigned:
					apply(started(org, tk.ID, m.ID, now))
					runs[tk.ID] = &runState{startMs: now, startRemaining: tk.RemainingMFlop, lastCkMs: now}
				case TaskRunning:
					rs := runs[tk.ID]
					done := (now - rs.startMs) * m.MFLOPS / 1000
					if done >= rs.startRemaining {
						apply(ended(org, tk.ID, m.ID, now, declaredMilliJ(m.BusyMilliW, rs.startMs, now), false))
					} else if now-rs.lastCkMs >= 5000 {
						apply(ckpt(org, tk.ID, m.ID, now, tk.SizeMFlop-rs.startRemaining+done))
						rs.lastCkMs = now
					}
				}
			}
		}
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
