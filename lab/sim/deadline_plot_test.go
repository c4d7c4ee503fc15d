package sim_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/coopgrid/coopgrid/lab/plot"
	"github.com/coopgrid/coopgrid/lab/sim"
)

// TestSeed004Figures draws figures 5.6-5.11 of seed 004 (share of soft
// deadlines met against the share of soft tasks, mechanism and InteGrade,
// 20 runs each with 95 % CIs) into $SEED004_OUT, e.g. docs/reproduction.
func TestSeed004Figures(t *testing.T) {
	out := os.Getenv("SEED004_OUT")
	if out == "" {
		t.Skip("set SEED004_OUT=DIR to draw figures 5.6-5.11")
	}
	figs := []struct {
		n        string
		factor   int
		rate     float64
		failures bool
	}{
		{"5.6", 3, 0.12, false}, {"5.7", 3, 0.36, false}, {"5.8", 6, 0.36, false},
		{"5.9", 3, 0.12, true}, {"5.10", 3, 0.36, true}, {"5.11", 6, 0.36, true},
	}
	softs := []int{25, 50, 75, 100}
	cats := []string{"25 %", "50 %", "75 %", "100 %"}
	for _, f := range figs {
		var series []plot.Bars
		for _, st := range []sim.DeadlineStrategy{sim.Martins, sim.InteGrade} {
			b := plot.Bars{Name: st.String()}
			for _, soft := range softs {
				s, _, err := sim.RunDeadlineMany(sim.Table51(f.factor, f.rate, soft, f.failures), st, 20)
				if err != nil {
					t.Fatal(err)
				}
				b.Values = append(b.Values, 100*s.Mean)
				b.CI = append(b.CI, 100*s.CI95)
			}
			series = append(series, b)
		}
		fail := "no failures"
		if f.failures {
			fail = "failures (grid MTBF 30 min)"
		}
		title := fmt.Sprintf("Seed 004 fig. %s: %.2f app/min, factor %d, %s", f.n, f.rate, f.factor, fail)
		path := filepath.Join(out, "seed004-fig"+f.n+".png")
		if err := plot.GroupedBars(path, title, "soft deadlines met (%)", cats, plot.Panel{Title: "share of soft-deadline tasks", Series: series}); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() == 0 {
			t.Fatalf("%s not written: %v", path, err)
		}
	}
}
