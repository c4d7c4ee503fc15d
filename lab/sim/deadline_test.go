package sim

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// deadlineShares runs seeds 1..n of a scenario with a strategy.
func deadlineShares(t *testing.T, sc DeadlineScenario, st DeadlineStrategy, n int) ([]float64, []DeadlineResult) {
	t.Helper()
	var shares []float64
	var all []DeadlineResult
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r, err := RunDeadline(sc, st, seed)
		if err != nil {
			t.Fatal(err)
		}
		shares = append(shares, r.SoftMetShare())
		all = append(all, r)
	}
	return shares, all
}

// TestSeed004Table51Full runs the whole family of table 5.1 with 20 seeds
// and prints it (docs/REPRODUCTION.md, "Seed 004"); set SEED004_FULL=1.
func TestSeed004Table51Full(t *testing.T) {
	if os.Getenv("SEED004_FULL") == "" {
		t.Skip("set SEED004_FULL=1 to run the whole family (20 seeds per cell)")
	}
	runs := 20
	var b strings.Builder
	fmt.Fprintln(&b, "| failures | factor | app/min | soft % | martins met % (±CI95) | integrade met % (±CI95) | martins refused | migrations |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|")
	for _, failures := range []bool{false, true} {
		for _, factor := range []int{3, 6} {
			for _, rate := range []float64{0.12, 0.24, 0.36} {
				for _, soft := range []int{25, 50, 75, 100} {
					sc := Table51(factor, rate, soft, failures)
					m, mr := deadlineShares(t, sc, Martins, runs)
					g, _ := deadlineShares(t, sc, InteGrade, runs)
					ms, gs := NewStat(m), NewStat(g)
					ref, mig := 0, 0
					for _, r := range mr {
						ref += r.Refused
						mig += r.Migrations
					}
					fmt.Fprintf(&b, "| %v | %d | %.2f | %d | %.1f ± %.1f | %.1f ± %.1f | %.1f | %.1f |\n", failures, factor, rate, soft,
						100*ms.Mean, 100*ms.CI95, 100*gs.Mean, 100*gs.CI95, float64(ref)/float64(runs), float64(mig)/float64(runs))
				}
			}
		}
	}
	t.Log("\n" + b.String())
}

func TestRunDeadlineIsDeterministicAndAccountsEveryTask(t *testing.T) {
	for _, failures := range []bool{false, true} {
		sc := Table51(3, 0.24, 50, failures)
		for _, st := range []DeadlineStrategy{Martins, InteGrade} {
			a, err := RunDeadline(sc, st, 7)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := RunDeadline(sc, st, 7)
			if a != b {
				t.Fatalf("%v failures=%v: two runs of seed 7 differ: %+v and %+v", st, failures, a, b)
			}
			if a.Soft+a.Nice != sc.Apps || a.SoftMet+a.Refused > a.Soft || a.NiceDone != a.Nice {
				t.Errorf("%v failures=%v: %+v: tasks unaccounted for or a nice task never finished", st, failures, a)
			}
			if failures != (a.MachineFailures > 0) {
				t.Errorf("%v failures=%v: %d machine failures", st, failures, a.MachineFailures)
			}
			if st == InteGrade && (a.Refused != 0 || a.Migrations != 0 || a.Preempted != 0) {
				t.Errorf("the InteGrade baseline refused, migrated or preempted: %+v", a)
			}
		}
	}
}

func TestRunDeadlineAllNiceHasNoSoftShare(t *testing.T) {
	r, err := RunDeadline(Table51(3, 0.12, 0, false), Martins, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Soft != 0 || !isNaN(r.SoftMetShare()) {
		t.Errorf("no soft task: %+v, share %v", r, r.SoftMetShare())
	}
}

func isNaN(f float64) bool { return f != f }

func TestRunDeadlineRejectsBadScenario(t *testing.T) {
	sc := Table51(3, 0.12, 50, false)
	sc.ArrivalsPerMin = 0
	if _, err := RunDeadline(sc, Martins, 1); err == nil || !strings.Contains(err.Error(), "not positive") {
		t.Errorf("zero arrival rate: err = %v", err)
	}
}
