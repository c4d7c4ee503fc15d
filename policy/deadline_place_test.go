package policy

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// placeState: three free machines of one organisation. By EHOSEP's energy
// order (energy per MFlop: draw / speed) "slow" comes first, then "steady",
// then "fast", which is 10 times faster;
// "steady" is as slow as "slow" but the most stable.
func placeState(tasks ...Task) *State {
	return &State{
		NowMs: 1_000_000,
		Orgs:  []Org{{Name: "a", LimitMilliW: 5_000_000}},
		Machines: []Machine{
			{ID: "a/slow", MFLOPS: 1000, BusyMilliW: 100_000, MTBFMs: 5_000},
			{ID: "a/fast", MFLOPS: 10_000, BusyMilliW: 3_000_000, MTBFMs: 10_000},
			{ID: "a/steady", MFLOPS: 1000, BusyMilliW: 200_000, MTBFMs: 90_000},
		},
		Queued: tasks,
	}
}

// TestDeadlinePlacementHandWorked: each rule of the placement on a case
// worked by hand, in the indexed pass and the shared-machine pass, and
// the reference agrees.
func TestDeadlinePlacementHandWorked(t *testing.T) {
	const hour = 3_600_000
	// 3 600 000 MFlop: 3600 s on a slow machine (3960 s with the margin),
	// 360 s on the fast one (396 s).
	const size = 3_600_000
	for _, tc := range []struct {
		name string
		task Task
		want string
	}{
		{"no class: EHOSEP's least-energy machine", Task{ID: "t", SizeMFlop: size}, "a/slow"},
		{"nice: the least stable", Task{ID: "t", SizeMFlop: size, Class: Nice}, "a/slow"},
		{"soft, loose deadline: the most stable", Task{ID: "t", SizeMFlop: size, Class: SoftDeadline, DeadlineMs: 1_000_000 + 2*hour}, "a/steady"},
		{"soft, deadline only the fast machine meets", Task{ID: "t", SizeMFlop: size, Class: SoftDeadline, DeadlineMs: 1_000_000 + hour}, "a/fast"},
		{"soft, deadline exactly met with the margin", Task{ID: "t", SizeMFlop: size, Class: SoftDeadline, DeadlineMs: 1_000_000 + 3_960_000}, "a/steady"},
		{"soft, one ms short of the margin on slow machines", Task{ID: "t", SizeMFlop: size, Class: SoftDeadline, DeadlineMs: 1_000_000 + 3_959_999}, "a/fast"},
		{"soft, nobody meets it: the fastest", Task{ID: "t", SizeMFlop: size, Class: SoftDeadline, DeadlineMs: 1_000_001}, "a/fast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, shared := range []bool{false, true} {
				s := placeState(tc.task)
				if shared {
					s = asShared(s)
				}
				ds, err := EHOSEP{}.Schedule(s)
				if err != nil {
					t.Fatal(err)
				}
				if len(ds) != 1 || s.Machines[ds[0].Machine].ID != tc.want {
					t.Fatalf("shared %v: got %q, want %s", shared, summary(s, ds), tc.want)
				}
				if ref, err := referenceEHOSEP(s, false); err != nil || !reflect.DeepEqual(ref, ds) {
					t.Fatalf("shared %v: reference %q (%v)", shared, summary(s, ref), err)
				}
			}
		})
	}
	// Local load: a/fast's owner takes 95 % of it, leaving 500 MFLOPS
	// (7920 s with the margin): no machine meets the hour, and of the
	// fastest (the 1000-MFLOPS ones, 3960 s) the most stable is taken.
	for _, shared := range []bool{false, true} {
		s := placeState(Task{ID: "t", SizeMFlop: size, Class: SoftDeadline, DeadlineMs: 1_000_000 + hour})
		s.Machines[1].OwnerLoadPermille = 950
		if shared {
			s = asShared(s)
		}
		ds, err := EHOSEP{}.Schedule(s)
		if err != nil || len(ds) != 1 || s.Machines[ds[0].Machine].ID != "a/steady" {
			t.Fatalf("loaded a/fast, shared %v: %q (%v)", shared, summary(s, ds), err)
		}
	}
	// The power limit still binds: with room for the slow machine's draw
	// only, a soft task the slow machine cannot finish in time still goes
	// there, never over the limit.
	s := placeState(Task{ID: "t", SizeMFlop: size, Class: SoftDeadline, DeadlineMs: 1_000_000 + hour})
	s.Orgs[0].LimitMilliW = 150_000
	ds, err := EHOSEP{}.Schedule(s)
	if err != nil || len(ds) != 1 || s.Machines[ds[0].Machine].ID != "a/slow" {
		t.Fatalf("limited: %q (%v)", summary(s, ds), err)
	}
}

// withClasses gives s's queued tasks random classes and deadlines, its
// machines random stabilities, and a time.
func withClasses(r *rand.Rand, s *State) {
	s.NowMs = int64(r.IntN(1000)) * 1000
	for j := range s.Machines {
		s.Machines[j].MTBFMs = int64(r.IntN(4)) * 60_000
		if r.IntN(3) == 0 {
			s.Machines[j].OwnerLoadPermille = int64(r.IntN(1001))
		}
	}
	for k := range s.Queued {
		switch r.IntN(3) {
		case 1:
			s.Queued[k].Class = Nice
		case 2:
			s.Queued[k].Class = SoftDeadline
			s.Queued[k].DeadlineMs = s.NowMs + int64(r.IntN(2000))*1000
		}
	}
}

// TestDeadlinePlacementAgreesWithReference: on random federations whose
// tasks have classes (one-slot and shared), the passes agree with the
// reference decision for decision, and the classes change some placements
// (so the agreement is not vacuous).
func TestDeadlinePlacementAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 3))
	n := 2000
	if testing.Short() {
		n = 200
	}
	changed := 0
	for iter := range n {
		var s *State
		if iter%2 == 0 {
			s = randomState(r)
		} else {
			s = randomSharedState(r)
		}
		plain, err := EHOSEP{}.Schedule(s)
		if err != nil {
			t.Fatal(err)
		}
		withClasses(r, s)
		for _, bestFit := range []bool{false, true} {
			got, err := EHOSEP{BestFit: bestFit}.Schedule(s)
			if err != nil {
				t.Fatalf("case %d: %v", iter, err)
			}
			ref, err := referenceEHOSEP(s, bestFit)
			if s.OneSlot() {
				// Tasks placed in the pass have classes: a soft task may
				// preempt a nice one placed before it (deadline_pass.go).
				ref, _, err = refClassedEHOSEP(s, bestFit)
			}
			if err != nil || !reflect.DeepEqual(got, ref) {
				t.Fatalf("case %d (bestFit %v): %q != reference %q (%v)", iter, bestFit, summary(s, got), summary(s, ref), err)
			}
			if !bestFit && !reflect.DeepEqual(got, plain) {
				changed++
			}
		}
	}
	if changed < n/10 {
		t.Fatalf("classes changed the decisions of only %d of %d passes", changed, n)
	}
	t.Logf("classes changed the decisions of %d of %d passes", changed, n)
}
