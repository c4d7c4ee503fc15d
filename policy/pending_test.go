package policy

import (
	"strings"
	"testing"
)

// TestPendingReasons: each reason of docs/POLICY.md on a state after
// EHOSEP's pass.
func TestPendingReasons(t *testing.T) {
	eight := Resources{CPUs: 8}
	type want struct{ code, detail string }
	cases := []struct {
		name  string
		state func() *State
		task  string
		want  want
	}{
		{"no free resources", func() *State {
			s := &State{Orgs: []Org{{"A", 1 << 40}}, Machines: []Machine{{ID: "m", MFLOPS: 8000, BusyMilliW: 8000, Capacity: eight}}}
			for _, id := range []string{"q0", "q1", "q2"} {
				s.Queued = append(s.Queued, Task{ID: id, SizeMFlop: 1, Request: Resources{CPUs: 4}})
			}
			return s
		}, "q2", want{PendingNoResources, "no free resources"}},
		{"a label nobody has", func() *State {
			return &State{Orgs: []Org{{"A", 1 << 40}}, Machines: []Machine{{ID: "m", MFLOPS: 8000, BusyMilliW: 8000, Capacity: eight, Attrs: map[string]string{"os": "linux"}}},
				Queued: []Task{{ID: "q", SizeMFlop: 1, Requirements: []Requirement{{"os", "=", "linux"}, {"label.matlab", "is_set", ""}}}}}
		}, "q", want{PendingNoMatch, "no machine meets requirement label.matlab is_set"}},
		{"owner refuses the executable", func() *State {
			return &State{Orgs: []Org{{"A", 1 << 40}}, Machines: []Machine{{ID: "m", MFLOPS: 1, BusyMilliW: 1, Policy: &OwnerPolicy{Allow: []string{"/bin/sh"}}}},
				Queued: []Task{{ID: "q", SizeMFlop: 1, Executable: "/usr/bin/python3"}}}
		}, "q", want{PendingNoMatch, "no machine's owner allows executable /usr/bin/python3"}},
		{"owner refuses the organisation", func() *State {
			return &State{Orgs: []Org{{"A", 1 << 40}, {"B", 1 << 40}}, Machines: []Machine{{ID: "m", MFLOPS: 1, BusyMilliW: 1, Policy: &OwnerPolicy{AllowAny: true, Orgs: []string{"C"}}}},
				Queued: []Task{{ID: "q", Org: 1, SizeMFlop: 1}}}
		}, "q", want{PendingNoMatch, "no machine's owner accepts organisation B"}},
		{"only an avoided machine has room", func() *State {
			// a/m1 failed q before and is free; a/m2, which q may use,
			// runs another task of A.
			return &State{Orgs: []Org{{"A", 1 << 40}}, Machines: []Machine{{ID: "a/m1", MFLOPS: 1, BusyMilliW: 1}, {ID: "a/m2", MFLOPS: 1, BusyMilliW: 1}},
				Queued:  []Task{{ID: "q", SizeMFlop: 1, Avoid: []string{"a/m1"}}},
				Running: []Running{{Task: Task{ID: "r", SizeMFlop: 1}, Machine: 1}}}
		}, "q", want{PendingAvoided, "earlier runs failed on a/m1, which has room for it: it waits for one of the other 1 machine(s)"}},
		{"one machine failed it before", func() *State {
			return &State{Orgs: []Org{{"A", 1 << 40}}, Machines: []Machine{{ID: "a/m1", MFLOPS: 1, BusyMilliW: 1}, {ID: "a/m2", MFLOPS: 1, BusyMilliW: 1}},
				Queued: []Task{{ID: "q", SizeMFlop: 1, Avoid: []string{"a/m1"}}}}
		}, "q", want{PendingNextPass, "next scheduling pass"}},
		{"too many cpus", func() *State {
			return &State{Orgs: []Org{{"A", 1 << 40}}, Machines: []Machine{{ID: "m", MFLOPS: 1, BusyMilliW: 1, Capacity: eight}},
				Queued: []Task{{ID: "q", SizeMFlop: 1, Request: Resources{CPUs: 16}}}}
		}, "q", want{PendingNoMatch, "no machine has 16 cpus"}},
		{"power limit", func() *State {
			return &State{Orgs: []Org{{"A", 500}}, Machines: []Machine{{ID: "m", MFLOPS: 1, BusyMilliW: 1000}},
				Queued: []Task{{ID: "q", SizeMFlop: 1}}}
		}, "q", want{PendingPowerLimit, "over the power limit of A"}},
		{"fair share", func() *State {
			// A owns nothing (DP = +Inf ≥ 0) and B's task holds B's machine.
			return &State{Orgs: []Org{{"A", 1 << 40}, {"B", 1 << 40}}, Machines: []Machine{{ID: "m", Owner: 1, MFLOPS: 1, BusyMilliW: 1}},
				Queued:  []Task{{ID: "q", Org: 0, SizeMFlop: 1}},
				Running: []Running{{Task: Task{ID: "r", Org: 1, SizeMFlop: 1}, Machine: 0}}}
		}, "q", want{PendingFairShare, "waiting for its fair share"}},
		{"next pass", func() *State {
			return &State{Orgs: []Org{{"A", 1 << 40}}, Machines: []Machine{{ID: "m", MFLOPS: 1, BusyMilliW: 1}},
				Queued: []Task{{ID: "q", SizeMFlop: 1}}}
		}, "q", want{PendingNextPass, "next scheduling pass"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.state()
			// The reasons are those of the state after the pass.
			ds, err := (EHOSEP{}).Schedule(s)
			if err != nil {
				t.Fatal(err)
			}
			after := s
			if c.want.code != PendingNextPass {
				if after, err = ApplyDecisions(s, ds); err != nil {
					t.Fatal(err)
				}
			}
			r, ok := Pending(after)[c.task]
			if !ok || r.Code != c.want.code || !strings.Contains(r.Detail, c.want.detail) {
				t.Fatalf("reason %+v (found %v), want %s containing %q", r, ok, c.want.code, c.want.detail)
			}
		})
	}
}

// TestNoNextPassAfterAPass: on random shared federations, after EHOSEP's
// pass no queued task is told "next pass" — the pass leaves none that a
// machine has room for within its limit — and every queued task has a
// reason.
func TestNoNextPassAfterAPass(t *testing.T) {
	r := newRand(5, 6)
	for iter := range 500 {
		s := randomSharedState(r)
		ds, err := (EHOSEP{}).Schedule(s)
		if err != nil {
			t.Fatal(err)
		}
		after, err := ApplyDecisions(s, ds)
		if err != nil {
			t.Fatal(err)
		}
		reasons := Pending(after)
		for _, q := range after.Queued {
			rs, ok := reasons[q.ID]
			if !ok || rs.Code == "" {
				t.Fatalf("case %d: task %s has no reason", iter, q.ID)
			}
			if rs.Code == PendingNextPass {
				t.Fatalf("case %d: task %s told %q after a quiescent pass", iter, q.ID, rs.Detail)
			}
		}
	}
}

// TestAvoidanceLifted: a task that avoids every machine it matches may use
// them all again (Eligible): the pass places it on the least-energy one,
// and the decision applies. One avoided machine among others that match is
// kept off, even when it is the better one.
func TestAvoidanceLifted(t *testing.T) {
	ms := []Machine{{ID: "a/m1", MFLOPS: 10, BusyMilliW: 1}, {ID: "a/m2", MFLOPS: 1, BusyMilliW: 1},
		{ID: "a/m3", MFLOPS: 100, BusyMilliW: 1, Policy: &OwnerPolicy{}}} // m3 refuses q
	for _, c := range []struct {
		avoid []string
		want  string
	}{
		{nil, "a/m1"},
		{[]string{"a/m1"}, "a/m2"},
		{[]string{"a/m2", "a/m1"}, "a/m1"},
		{[]string{"a/m3", "a/m1"}, "a/m2"},
	} {
		s := &State{Orgs: []Org{{"A", 1 << 40}}, Machines: ms,
			Queued: []Task{{ID: "q", SizeMFlop: 1, Executable: "/bin/sh", Avoid: c.avoid}}}
		ds, err := (EHOSEP{}).Schedule(s)
		if err != nil || len(ds) != 1 || ms[ds[0].Machine].ID != c.want {
			t.Fatalf("avoiding %v: %+v (%v), want q on %s", c.avoid, ds, err, c.want)
		}
		if _, err := ApplyDecisions(s, ds); err != nil {
			t.Fatal(err)
		}
		if ref, _ := referenceEHOSEP(s, false); len(ref) != 1 || ref[0] != ds[0] {
			t.Fatalf("avoiding %v: reference %+v", c.avoid, ref)
		}
	}
	// A decision onto an avoided machine while another matches is refused.
	s := &State{Orgs: []Org{{"A", 1 << 40}}, Machines: ms, Queued: []Task{{ID: "q", SizeMFlop: 1, Avoid: []string{"a/m1"}}}}
	if _, err := ApplyDecisions(s, []Decision{{Kind: Allocate, Task: "q", Machine: 0}}); err == nil {
		t.Fatal("a decision onto an avoided machine applied while a/m2 matches")
	}
}
