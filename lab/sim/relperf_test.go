package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
)

func tasks(tt map[string]float64, order ...string) []TaskRecord {
	var out []TaskRecord
	for _, id := range order {
		out = append(out, TaskRecord{ID: id, TurnaroundSeconds: tt[id]})
	}
	return out
}

// handWorked is two runs of three and two tasks. Worked by hand:
// run 0: t1 100/100 = 1 (tie), t2 200/100 = 2 (B), t3 300/600 = 0.5 (A);
// run 1: t1 101/100 = 1.01 (B at tolerance 0, a tie at 2 %), t2 50/100 = 0.5 (A).
// B lists its tasks in another order: pairs are matched by ID.
func handWorked() (a, b [][]TaskRecord) {
	a = [][]TaskRecord{
		tasks(map[string]float64{"t1": 100, "t2": 200, "t3": 300}, "t1", "t2", "t3"),
		tasks(map[string]float64{"t1": 101, "t2": 50}, "t1", "t2"),
	}
	b = [][]TaskRecord{
		tasks(map[string]float64{"t1": 100, "t2": 100, "t3": 600}, "t3", "t1", "t2"),
		tasks(map[string]float64{"t1": 100, "t2": 100}, "t2", "t1"),
	}
	return a, b
}

func TestRelativePerformanceHandWorked(t *testing.T) {
	a, b := handWorked()
	for _, tc := range []struct {
		tol                   float64
		aBetter, tie, bBetter float64
	}{
		{0, 0.4, 0.2, 0.4},
		{0.02, 0.4, 0.4, 0.2},
		{1.5, 0, 1, 0}, // every ratio within [1/2.5, 2.5]
	} {
		rp, err := RelativePerformance(a, b, tc.tol)
		if err != nil {
			t.Fatal(err)
		}
		wantRatios := []float64{0.5, 0.5, 1, 1.01, 2}
		if len(rp.Ratios) != len(wantRatios) {
			t.Fatalf("tol %v: ratios %v, want %v", tc.tol, rp.Ratios, wantRatios)
		}
		for i, w := range wantRatios {
			if math.Abs(rp.Ratios[i]-w) > 1e-12 {
				t.Errorf("tol %v: ratio %d = %v, want %v", tc.tol, i, rp.Ratios[i], w)
			}
		}
		wantCDF := []CDFPoint{{0.5, 0.4}, {1, 0.6}, {1.01, 0.8}, {2, 1}}
		if len(rp.CDF) != len(wantCDF) {
			t.Fatalf("tol %v: CDF %v, want %v", tc.tol, rp.CDF, wantCDF)
		}
		for i, w := range wantCDF {
			if math.Abs(rp.CDF[i].Ratio-w.Ratio) > 1e-12 || math.Abs(rp.CDF[i].Fraction-w.Fraction) > 1e-12 {
				t.Errorf("tol %v: CDF point %d = %v, want %v", tc.tol, i, rp.CDF[i], w)
			}
		}
		if math.Abs(rp.ABetter-tc.aBetter) > 1e-12 || math.Abs(rp.Tie-tc.tie) > 1e-12 || math.Abs(rp.BBetter-tc.bBetter) > 1e-12 {
			t.Errorf("tol %v: shares A %v tie %v B %v, want %v %v %v", tc.tol, rp.ABetter, rp.Tie, rp.BBetter, tc.aBetter, tc.tie, tc.bBetter)
		}
		for q, w := range map[float64]float64{0: 0.5, 0.4: 0.5, 0.5: 1, 0.8: 1.01, 1: 2} {
			if got := rp.Quantile(q); math.Abs(got-w) > 1e-12 {
				t.Errorf("tol %v: quantile %v = %v, want %v", tc.tol, q, got, w)
			}
		}
	}
}

// Swapping A and B inverts every ratio (so the sorted list reverses) and
// swaps the shares of A and B exactly, on the hand-worked case and on
// random ones with exact ties and ties at the tolerance's edge.
func TestRelativePerformanceSymmetric(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 19))
	type pair struct{ a, b [][]TaskRecord }
	a0, b0 := handWorked()
	cases := []pair{{a0, b0}}
	for c := 0; c < 20; c++ {
		var a, b [][]TaskRecord
		for k := 0; k < 3; k++ {
			var ra, rb []TaskRecord
			for i := 0; i < 50; i++ {
				id := string(rune('a'+i%26)) + strings.Repeat("x", i/26)
				tt := 10 + rng.Float64()*1000
				other := tt
				switch rng.IntN(4) {
				case 0: // exact tie
				case 1:
					other = tt * 1.05 // on the edge of a 5 % band
				default:
					other = 10 + rng.Float64()*1000
				}
				ra = append(ra, TaskRecord{ID: id, TurnaroundSeconds: tt})
				rb = append(rb, TaskRecord{ID: id, TurnaroundSeconds: other})
			}
			a, b = append(a, ra), append(b, rb)
		}
		cases = append(cases, pair{a, b})
	}
	for ci, c := range cases {
		for _, tol := range []float64{0, 0.05, 0.2} {
			ab, err := RelativePerformance(c.a, c.b, tol)
			if err != nil {
				t.Fatal(err)
			}
			ba, err := RelativePerformance(c.b, c.a, tol)
			if err != nil {
				t.Fatal(err)
			}
			if ab.ABetter != ba.BBetter || ab.BBetter != ba.ABetter || ab.Tie != ba.Tie {
				t.Errorf("case %d tol %v: A/B shares %v/%v/%v, B/A %v/%v/%v: not swapped", ci, tol, ab.ABetter, ab.Tie, ab.BBetter, ba.ABetter, ba.Tie, ba.BBetter)
			}
			n := len(ab.Ratios)
			for i := range ab.Ratios {
				if inv := 1 / ba.Ratios[n-1-i]; math.Abs(ab.Ratios[i]-inv) > 1e-12*inv {
					t.Errorf("case %d: ratio %d = %v, 1/swapped = %v", ci, i, ab.Ratios[i], inv)
					break
				}
			}
			if ci > 0 && tol == 0 && ab.Tie < 0.1 {
				t.Errorf("case %d: tie share %v: the random cases should have about 25 %% exact ties", ci, ab.Tie)
			}
		}
	}
}

func TestRelativePerformanceBadInput(t *testing.T) {
	rec := func(id string, tt float64) TaskRecord { return TaskRecord{ID: id, TurnaroundSeconds: tt} }
	one := [][]TaskRecord{{rec("t1", 10)}}
	for _, tc := range []struct {
		name string
		a, b [][]TaskRecord
		tol  float64
		want string
	}{
		{"runs", one, nil, 0, "1 runs of A, 0 of B"},
		{"tolerance", one, one, -0.1, "tolerance"},
		{"NaN tolerance", one, one, math.NaN(), "tolerance"},
		{"missing", one, [][]TaskRecord{{rec("t2", 10)}}, 0, `task "t1" of A is not in B`},
		{"count", one, [][]TaskRecord{{rec("t1", 10), rec("t2", 10)}}, 0, "1 tasks under A, 2 under B"},
		{"duplicate in B", [][]TaskRecord{{rec("t1", 1), rec("t2", 1)}}, [][]TaskRecord{{rec("t1", 10), rec("t1", 10)}}, 0, `task "t1" twice`},
		{"duplicate in A", [][]TaskRecord{{rec("t1", 1), rec("t1", 1)}}, [][]TaskRecord{{rec("t1", 10), rec("t2", 10)}}, 0, `"t1" of A is not in B (or is twice in A)`},
		{"zero", [][]TaskRecord{{rec("t1", 0)}}, one, 0, "turnaround 0 s"},
		{"negative in B", one, [][]TaskRecord{{rec("t1", -1)}}, 0, "turnaround -1 s"},
		{"no tasks", [][]TaskRecord{{}}, [][]TaskRecord{{}}, 0, "no tasks"},
	} {
		_, err := RelativePerformance(tc.a, tc.b, tc.tol)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// RunMany hands every run's full result to Config.OnRun: the task records
// of run k are those whose mean turnaround the summary's run k reports.
func TestRunManyOnRun(t *testing.T) {
	const runs = 4
	p := mustPolicy(t, "ehosep")
	gen := func(run int) (*scenario.Instance, error) { return model1(200+uint64(run), "U2", 1), nil }
	kept := make([][]TaskRecord, runs)
	cfg := DefaultConfig()
	cfg.OnRun = func(k int, r *Result) { kept[k] = r.Tasks }
	s, err := RunMany(context.Background(), gen, p, cfg, runs, 2)
	if err != nil {
		t.Fatal(err)
	}
	for k, tasks := range kept {
		if len(tasks) != 300 {
			t.Fatalf("run %d: %d task records, want 300", k, len(tasks))
		}
		var sum float64
		for _, tr := range tasks {
			sum += tr.TurnaroundSeconds
		}
		if got, want := sum/float64(len(tasks)), s.PerRun[k].Total.TurnaroundMean; math.Abs(got-want) > 1e-9*want {
			t.Errorf("run %d: records' mean turnaround %v, summary's %v", k, got, want)
		}
	}
	if kept[0][0].TurnaroundSeconds == kept[1][0].TurnaroundSeconds && kept[0][5].TurnaroundSeconds == kept[1][5].TurnaroundSeconds {
		t.Error("runs 0 and 1 have the same records: OnRun did not get each run's own")
	}
}
