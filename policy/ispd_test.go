package policy

import (
	"testing"
)

// The options that follow the author's iSPD code (State.Held, HOSEP's
// StrictExcess and NextOrg), each on a small hand-worked state.

// heldState: two free machines of org A, m-fast better for every policy
// (faster and cheaper per task), and one waiting task of A.
func heldState() *State {
	return &State{
		Orgs: []Org{{"A", w(1000)}},
		Machines: []Machine{
			{ID: "m-fast", Owner: 0, MFLOPS: 200, BusyMilliW: w(100)},
			{ID: "m-slow", Owner: 0, MFLOPS: 100, BusyMilliW: w(100)},
		},
		Queued: []Task{{ID: "t1", Org: 0, SizeMFlop: 1000, Seq: 1}},
	}
}

func TestHeldMachineIsNeverFree(t *testing.T) {
	for _, p := range []Policy{EHOSEP{}, HOSEP{}, HOSEP{StrictExcess: true, NextOrg: true}, OSEP{}} {
		s := heldState()
		ds, err := p.Schedule(s)
		if err != nil || len(ds) != 1 || ds[0].Machine != 0 {
			t.Fatalf("%s without held machines: %+v, %v; want t1 on m-fast", p.Name(), ds, err)
		}
		s.Held = []bool{true, false}
		ds, err = p.Schedule(s)
		if err != nil || len(ds) != 1 || ds[0].Machine != 1 {
			t.Errorf("%s with m-fast held: %+v, %v; want t1 on m-slow", p.Name(), ds, err)
		}
		s.Held = []bool{true, true}
		if ds, err = p.Schedule(s); err != nil || len(ds) != 0 {
			t.Errorf("%s with both held: %+v, %v; want no decision", p.Name(), ds, err)
		}
	}
}

// TestHeldMachineIsNeverAVictim: B runs on A's only machine; A waits. The
// machine is the only victim, so holding it leaves A unserved, while B's
// task on it still counts in B's allocation (B stays in excess).
func TestHeldMachineIsNeverAVictim(t *testing.T) {
	s := &State{
		Orgs: []Org{{"A", w(1000)}, {"B", w(1000)}},
		Machines: []Machine{
			{ID: "a1", Owner: 0, MFLOPS: 100, BusyMilliW: w(100)},
			{ID: "b1", Owner: 1, MFLOPS: 100, BusyMilliW: w(100)},
		},
		Queued:  []Task{{ID: "ta", Org: 0, SizeMFlop: 1000, Seq: 3}},
		Running: []Running{{Task: Task{ID: "tb1", Org: 1, SizeMFlop: 1000, Seq: 1}, Machine: 0, RunSeconds: 1}, {Task: Task{ID: "tb2", Org: 1, SizeMFlop: 1000, Seq: 2}, Machine: 1, RunSeconds: 50}},
	}
	for _, p := range []Policy{EHOSEP{}, HOSEP{}, OSEP{}} {
		ds, err := p.Schedule(s)
		if err != nil || len(ds) == 0 || ds[0].Kind != Preempt {
			t.Fatalf("%s: %+v, %v; want a preemption for A", p.Name(), ds, err)
		}
		held := *s
		held.Held = []bool{true, true}
		if ds, err := p.Schedule(&held); err != nil || len(ds) != 0 {
			t.Errorf("%s with both machines held: %+v, %v; want none", p.Name(), ds, err)
		}
		// Only a1 held: the victim must be b1 (for HOSEP and EHOSEP, b1 is
		// also an allowed choice without holding; a1 has the least waste and
		// is the one chosen unheld).
		held.Held = []bool{true, false}
		ds, err = p.Schedule(&held)
		if err != nil || len(ds) == 0 || ds[0].Machine != 1 {
			t.Errorf("%s with a1 held: %+v, %v; want the preemption on b1", p.Name(), ds, err)
		}
	}
	bad := *s
	bad.Held = []bool{true}
	if _, err := (EHOSEP{}).Schedule(&bad); err == nil {
		t.Error("one held flag for two machines accepted")
	}
}

// nextOrgState: all machines busy; A (DP −1) and D (DP −0.375) wait; B has
// the highest DP (0.1) and its slowest running machine b1 has 100 MFLOPS.
// PRE_Preemp(B, b1) = (550 − 500 − 100)/500 = −0.1;
// PRE_Aloc(A, b1) = (0 − 100 + 100)/100 = 0 > −0.1: A cannot preempt;
// PRE_Aloc(D, b1) = (250 − 400 + 100)/400 = −0.125 ≤ −0.1: D can.
func nextOrgState() *State {
	s := &State{Orgs: []Org{{"A", 0}, {"B", 0}, {"C", 0}, {"D", 0}}}
	mach := func(id string, owner int, mflops int64) int {
		s.Machines = append(s.Machines, Machine{ID: id, Owner: owner, MFLOPS: mflops, BusyMilliW: w(100)})
		return len(s.Machines) - 1
	}
	seq := uint64(0)
	run := func(m, org int) {
		seq++
		s.Running = append(s.Running, Running{Task: Task{ID: "r" + itoa(int(seq)), Org: org, SizeMFlop: 1 << 30, Seq: seq}, Machine: m, RunSeconds: 10})
	}
	run(mach("a1", 0, 100), 2)
	for _, id := range []string{"b1", "b2", "b3", "b4"} {
		run(mach(id, 1, 100), 1)
	}
	run(mach("b5", 1, 100), 2)
	run(mach("c1", 2, 4000), 2)
	run(mach("d1", 3, 150), 1)
	run(mach("d2", 3, 250), 3)
	s.Queued = []Task{{ID: "qa", Org: 0, SizeMFlop: 10, Seq: 100}, {ID: "qd", Org: 3, SizeMFlop: 10, Seq: 101}}
	return s
}

func TestHOSEPNextOrg(t *testing.T) {
	s := nextOrgState()
	if ds, err := (HOSEP{}).Schedule(s); err != nil || len(ds) != 0 {
		t.Fatalf("published HOSEP: %+v, %v; want nothing (A, the lowest DP, cannot be served)", ds, err)
	}
	ds, err := (HOSEP{NextOrg: true}).Schedule(s)
	if err != nil || len(ds) == 0 {
		t.Fatalf("HOSEP NextOrg: %+v, %v", ds, err)
	}
	if d := ds[0]; d.Kind != Preempt || d.Task != "qd" || s.Machines[d.Machine].ID != "b1" || d.VictimOrg != 1 {
		t.Errorf("HOSEP NextOrg first decision %+v; want D's qd preempting B on b1", d)
	}
}

// TestHOSEPStrictExcess: PRE_Preemp(B, y) = 0 exactly and PRE_Aloc(A, y) =
// 0.5, so only the clause PRE_Preemp ≥ 0 allows the preemption; the
// author's > 0 does not.
func TestHOSEPStrictExcess(t *testing.T) {
	s := &State{Orgs: []Org{{"A", 0}, {"B", 0}, {"C", 0}}}
	add := func(id string, owner int, mflops int64) {
		s.Machines = append(s.Machines, Machine{ID: id, Owner: owner, MFLOPS: mflops, BusyMilliW: w(100)})
	}
	add("a1", 0, 50)
	add("a2", 0, 50)
	add("b1", 1, 100)
	add("c1", 2, 100)
	s.Running = []Running{
		{Task: Task{ID: "ra", Org: 0, SizeMFlop: 1 << 30, Seq: 1}, Machine: 0, RunSeconds: 10},
		{Task: Task{ID: "rc", Org: 2, SizeMFlop: 1 << 30, Seq: 2}, Machine: 1, RunSeconds: 10},
		{Task: Task{ID: "rb1", Org: 1, SizeMFlop: 1 << 30, Seq: 3}, Machine: 2, RunSeconds: 10},
		{Task: Task{ID: "rb2", Org: 1, SizeMFlop: 1 << 30, Seq: 4}, Machine: 3, RunSeconds: 10},
	}
	s.Queued = []Task{{ID: "qa", Org: 0, SizeMFlop: 10, Seq: 5}}
	ds, err := (HOSEP{}).Schedule(s)
	if err != nil || len(ds) != 1 || ds[0].Kind != Preempt || ds[0].Task != "qa" {
		t.Fatalf("published HOSEP (≥ 0): %+v, %v; want qa preempting B", ds, err)
	}
	if ds, err := (HOSEP{StrictExcess: true}).Schedule(s); err != nil || len(ds) != 0 {
		t.Errorf("HOSEP StrictExcess (> 0): %+v, %v; want no preemption", ds, err)
	}
}
