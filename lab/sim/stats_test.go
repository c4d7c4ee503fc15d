package sim

import (
	"encoding/json"
	"math"
	"testing"
)

func TestStudentTQuantile(t *testing.T) {
	// Two-sided 95 % critical values, from standard tables (R's
	// qt(0.975, df)).
	for _, tc := range []struct {
		df, want float64
	}{
		{1, 12.706204736},
		{2, 4.302652730},
		{4, 2.776445105},
		{10, 2.228138852},
		{30, 2.042272456},
		{59, 2.000995378},
		{1000, 1.962339081},
	} {
		got := StudentTQuantile(0.975, tc.df)
		if math.Abs(got-tc.want) > 1e-8 {
			t.Errorf("t(0.975, %v) = %.10f, want %.10f", tc.df, got, tc.want)
		}
		if lo := StudentTQuantile(0.025, tc.df); lo != -got {
			t.Errorf("t(0.025, %v) = %v, want −t(0.975) = %v", tc.df, lo, -got)
		}
	}
	near(t, "t(0.95, 5)", StudentTQuantile(0.95, 5), 2.015048373)
	near(t, "median", StudentTQuantile(0.5, 3), 0)
	for _, bad := range [][2]float64{{0, 3}, {1, 3}, {0.5, 0}, {math.NaN(), 3}, {0.9, math.Inf(1)}} {
		if v := StudentTQuantile(bad[0], bad[1]); !math.IsNaN(v) {
			t.Errorf("StudentTQuantile(%v, %v) = %v, want NaN", bad[0], bad[1], v)
		}
	}
}

func TestNewStat(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []float64
		mean   float64
		ci     float64
		n      int
	}{
		// mean 3, sample sd √2.5, t(0.975, 4) = 2.776445105:
		// 2.776445105 · 1.58113883 / √5 = 1.963243...
		{"one to five", []float64{1, 2, 3, 4, 5}, 3, 2.776445105 * math.Sqrt(2.5) / math.Sqrt(5), 5},
		// mean 11, sd √2, t(0.975, 1) = 12.7062: 12.706204736 · 1.41421356 / 1.41421356
		{"two values", []float64{10, 12}, 11, 12.706204736, 2},
		{"undefined runs left out", []float64{10, math.NaN(), 12, math.Inf(1)}, 11, 12.706204736, 2},
		{"one value", []float64{7}, 7, math.NaN(), 1},
		{"constant", []float64{4, 4, 4}, 4, 0, 3},
		{"none", []float64{math.NaN()}, math.NaN(), math.NaN(), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStat(tc.values)
			if s.N != tc.n {
				t.Errorf("N = %d, want %d", s.N, tc.n)
			}
			near(t, "mean", s.Mean, tc.mean)
			if math.IsNaN(tc.ci) {
				near(t, "ci95", s.CI95, tc.ci)
			} else if math.Abs(s.CI95-tc.ci) > 1e-8 {
				t.Errorf("ci95 = %.10f, want %.10f", s.CI95, tc.ci)
			}
		})
	}
}

func TestStatJSON(t *testing.T) {
	b, err := json.Marshal(map[string]Stat{"a": {Mean: 1.5, CI95: 0.25, N: 3}, "b": {Mean: math.NaN(), CI95: math.Inf(1), N: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":{"mean":1.5,"ci95":0.25,"n":3},"b":{"mean":null,"ci95":null,"n":0}}`; string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
}

func TestSummarizeRejectsMismatchedRuns(t *testing.T) {
	a := &Result{Orgs: []OrgMetrics{{Name: "A"}, {Name: "B"}}}
	b := &Result{Orgs: []OrgMetrics{{Name: "A"}, {Name: "C"}}}
	if _, err := Summarize([]*Result{a, b}); err == nil {
		t.Error("different organisations: no error")
	}
	if _, err := Summarize(nil); err == nil {
		t.Error("no runs: no error")
	}
	s, err := Summarize([]*Result{a, a})
	if err != nil || s.Runs != 2 || len(s.Orgs) != 2 || s.Orgs[1].Name != "B" {
		t.Errorf("Summarize = %+v, %v", s, err)
	}
}
