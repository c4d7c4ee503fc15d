package reproduce

import (
	"context"
	"math"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/coopgrid/coopgrid/lab/plot"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/lab/simcase"
)

// TestISPDReproducesTable11At80 pins published cells that the iSPD engine
// reproduces: table 11 (energy in KJ/s, test 1, EHOSEP against HOSEP) at
// 80 %, per organisation and in total (seed 000 L1356-1370: −52.50,
// −51.20, −45.47, −56.98, total −51.67). Our default engine is 8-12 points
// away there (docs/REPRODUCTION.md).
//
// Tolerance: 3 percentage points. Over 60 runs, the KJ/s means of the two
// cases have 95 % CIs of 1-2 % of their value (EHOSEP U1 0.802 ± 0.010,
// HOSEP U1 1.634 ± 0.026 KJ/s at seed 1), so a relative difference near
// −50 % carries about ±1 point, and the published one, also from 60 runs
// with a different draw, about as much: two such estimates differ by up to
// √2 · 1 ≈ 1.4 points at 95 %. Three points is twice that, and well inside
// the 8-12 points the default engine misses by.
func TestISPDReproducesTable11At80(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 120 runs")
	}
	sums := map[string]*sim.Summary{}
	for _, c := range campaign() {
		if c.Name != "P1-hosep" && c.Name != "P1-ehosep-80%" {
			continue
		}
		b, err := simcase.Build(simcase.Options{
			Scenario: filepath.Join(scenarioDir, c.Scenario), Policy: c.Policy,
			Late: c.Late, Limit: c.LateLimit, LimitAll: c.AllLimit, Checkpoint: c.Checkpoint,
			Runs: 60, Seed: 1, Workers: runtime.GOMAXPROCS(0), Engine: sim.EngineISPD,
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Simulate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sums[c.Name] = s
	}
	ours, err := plot.RelDiff(sums["P1-ehosep-80%"], sums["P1-hosep"], plot.EnergyKJs)
	if err != nil {
		t.Fatal(err)
	}
	ours = append(ours, plot.RelPct(sums["P1-ehosep-80%"].Total.KJs.Mean, sums["P1-hosep"].Total.KJs.Mean))
	published := comparisons[0].rows[0]
	for i, name := range []string{"U1", "U2", "U3", "U4", "total"} {
		if d := math.Abs(ours[i] - published[i]); !(d <= 3) {
			t.Errorf("table 11, 80 %%, %s: iSPD engine %+.2f %%, published %+.2f %%: %.2f points apart, more than 3", name, ours[i], published[i], d)
		}
	}
}
