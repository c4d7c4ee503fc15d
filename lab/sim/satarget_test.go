package sim

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// saByHand is a 4-processor machine where SA_i re-chooses what SA_s chose.
// A and B hold 2 processors each from 0 with tr 10; B ends early at 2. M
// arrives at 1 and may run on 4 processors for 3 s or on 2 for 6 s.
//
// At 1 the machine is predicted full until 10, so both requests wait for
// 10: (4, 3 s) ends at 13, (2, 6 s) at 16, and SA (both variants at
// submission) picks (4, 3 s). At 2, B's end is a backfilling opportunity:
// 2 processors are free until A's 10. SA_s's M needs 4 and keeps its
// reservation at 10 (tt 12). SA_i's M could start now with (2, 6 s),
// which ends at 8, before 13: SA_i takes it (tt 7).
func saByHand() []RigidJob {
	return []RigidJob{
		{ID: "A", SubmitSeconds: 0, Procs: 2, RequestedSeconds: 10, RunSeconds: 10},
		{ID: "B", SubmitSeconds: 0, Procs: 2, RequestedSeconds: 10, RunSeconds: 2},
		{ID: "M", SubmitSeconds: 1, Procs: 4, RequestedSeconds: 3, RunSeconds: 3,
			Alternatives: []MoldableRequest{{4, 3, 3}, {2, 6, 6}}},
	}
}

func TestSAiReChoosesByHand(t *testing.T) {
	jobs := saByHand()
	want := map[SAMode]JobRecord{
		SAStatic: {ID: "M", Procs: 4, RequestedSeconds: 3, SubmitSeconds: 1, StartSeconds: 10, EndSeconds: 13},
		SASubmit: {ID: "M", Procs: 4, RequestedSeconds: 3, SubmitSeconds: 1, StartSeconds: 10, EndSeconds: 13},
		SAStart:  {ID: "M", Procs: 2, RequestedSeconds: 6, SubmitSeconds: 1, StartSeconds: 2, EndSeconds: 8, Choice: 1},
	}
	pols := map[SAMode]policy.JobPolicy{SAStatic: policy.Conservative, SASubmit: policy.Conservative, SAStart: policy.ConservativeSAi}
	for mode, w := range want {
		recs, err := SimulateMoldable(context.Background(), 4, jobs, pols[mode], mode)
		if err != nil {
			t.Fatal(err)
		}
		if recs[2] != w {
			t.Errorf("%s: M ran %+v, want %+v", mode, recs[2], w)
		}
	}
	// The same as a target: in a static workload (A and B are rigid
	// anyway), M with SA_i gains 5 s on M with SA_s.
	res, err := SimulateTargets(context.Background(), 4, jobs, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range SAModes() {
		for tm, wr := range want {
			if got := res.Target[w][tm][0]; got != wr {
				t.Errorf("target M with %s in a %s workload: %+v, want %+v", tm, w, got, wr)
			}
		}
	}
}

// On a random moldable workload every forked target run is exactly the
// run from scratch with the target's mode changed, the diagonal is the
// whole-workload run of SimulateMoldable, and every target ran one of its
// own requests.
func TestSimulateTargetsMatchesFullRuns(t *testing.T) {
	m := LublinModel{Procs: 64, Jobs: 300, Load: 0.85, EstimateFactor: 5, KilledShare: 0.05, Seed: 3}
	rigid, err := m.Generate()
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := MakeMoldable(rigid, 64, 0.1, 3)
	if err != nil {
		t.Fatal(err)
	}
	targets, err := PickTargets(jobs, 6, 7)
	if err != nil {
		t.Fatal(err)
	}
	res, err := SimulateTargets(context.Background(), 64, jobs, targets)
	if err != nil {
		t.Fatal(err)
	}
	pols := map[SAMode]policy.JobPolicy{SAStatic: policy.Conservative, SASubmit: policy.Conservative, SAStart: policy.ConservativeSAi}
	differs := 0
	for _, w := range SAModes() {
		full, err := SimulateMoldable(context.Background(), 64, jobs, pols[w], w)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(full, res.Workload[w]) {
			t.Fatalf("%s workload differs from SimulateMoldable", w)
		}
		for _, tm := range SAModes() {
			for k, ti := range targets {
				s := newJobSim(64, jobs, w)
				s.target, s.targetMode = s.index[jobs[ti].ID], tm
				for !s.done() {
					if err := s.step(policy.ConservativeSAi); err != nil {
						t.Fatal(err)
					}
				}
				got := res.Target[w][tm][k]
				if want := s.recs[s.target]; got != want {
					t.Fatalf("target %s with %s in a %s workload: forked %+v, from scratch %+v", jobs[ti].ID, tm, w, got, want)
				}
				if alt := jobs[ti].Alternatives[got.Choice]; alt.Procs != got.Procs || alt.RequestedSeconds != got.RequestedSeconds {
					t.Fatalf("target %s ran %+v, not its request %d %+v", jobs[ti].ID, got, got.Choice, alt)
				}
				if got != res.Target[w][SAStatic][k] {
					differs++
				}
			}
		}
	}
	if differs == 0 {
		t.Fatal("no target did differently with SA than with its static request")
	}
}

func TestPickTargets(t *testing.T) {
	jobs := make([]RigidJob, 100)
	for i := range jobs {
		// Listed in reverse submission order: job 99 arrives first.
		jobs[i] = RigidJob{ID: fmt.Sprint(i), SubmitSeconds: int64(100 - i), Procs: 1, RequestedSeconds: 1, RunSeconds: 1}
	}
	a, err := PickTargets(jobs, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := PickTargets(jobs, 10, 1)
	if !reflect.DeepEqual(a, b) || len(a) != 10 {
		t.Fatalf("%v, %v", a, b)
	}
	for i, x := range a {
		if x < 10 || x >= 90 || i > 0 && x >= a[i-1] {
			t.Fatalf("targets %v: want distinct, in submission order (decreasing index here), in [10, 90)", a)
		}
	}
	if _, err := PickTargets(jobs, 81, 1); err == nil {
		t.Fatal("81 targets among 80 middle jobs accepted")
	}
}

func TestWidenLinear(t *testing.T) {
	jobs := []RigidJob{{ID: "a", SubmitSeconds: 5, Procs: 4, RequestedSeconds: 100, RunSeconds: 30,
		Alternatives: []MoldableRequest{{4, 100, 30}, {8, 50, 15}}}, {ID: "b", Procs: 1, RequestedSeconds: 3, RunSeconds: 1}}
	got, err := WidenLinear(jobs, 8)
	if err != nil {
		t.Fatal(err)
	}
	want := []RigidJob{{ID: "a", SubmitSeconds: 5, Procs: 8, RequestedSeconds: 50, RunSeconds: 15}, {ID: "b", Procs: 8, RequestedSeconds: 1, RunSeconds: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if _, err := WidenLinear(jobs, 2); err == nil {
		t.Fatal("a job wider than the machine was accepted")
	}
}
