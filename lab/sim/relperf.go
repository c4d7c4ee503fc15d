package sim

import (
	"fmt"
	"math"
	"slices"
)

// RelPerf is seed 002's relative performance (Moreira 2003, §4.1,
// 002_7ead415125793782.txt L665-L682): two policies A and B run the same
// workload; every task's turnaround under A is divided by its turnaround
// under B, and the cumulative distribution of the ratios tt_A/tt_B shows
// where each policy wins and by how much. A ratio below 1 means A served
// the task sooner.
type RelPerf struct {
	// Tolerance is the relative band counted as a tie: a task ties when
	// neither turnaround is more than (1+Tolerance) times the other. Seed
	// 002 counts only ratio = 1 as a tie (L680); a tolerance of 0 is that.
	Tolerance float64
	// Ratios are tt_A/tt_B of every task, ascending.
	Ratios []float64
	// CDF has one point per distinct ratio: the fraction of tasks whose
	// ratio is at most Ratio (the last point's Fraction is 1).
	CDF []CDFPoint
	// ABetter, Tie and BBetter are the shares of tasks (0-1, summing to 1)
	// that A served sooner, that tie, and that B served sooner.
	ABetter, Tie, BBetter float64
}

// CDFPoint is one step of an empirical cumulative distribution.
type CDFPoint struct {
	Ratio, Fraction float64
}

// Quantile is the q-quantile (0 ≤ q ≤ 1) of the ratios: the smallest ratio
// with at least a share q of the tasks at or below it. NaN if there are no
// ratios.
func (r *RelPerf) Quantile(q float64) float64 {
	if len(r.Ratios) == 0 || !(q >= 0 && q <= 1) {
		return math.NaN()
	}
	k := int(math.Ceil(q*float64(len(r.Ratios)))) - 1
	return r.Ratios[max(k, 0)]
}

// RelativePerformance compares the turnarounds of the same tasks under two
// policies. a[k] and b[k] are the task records of run k under A and under B,
// on the same workload (common random numbers), so every run pairs the same
// task IDs; the ratios of all runs are pooled. tolerance ≥ 0 is the tie band
// (see RelPerf.Tolerance). Swapping a and b inverts every ratio and swaps
// ABetter and BBetter; the tie share stays.
func RelativePerformance(a, b [][]TaskRecord, tolerance float64) (*RelPerf, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("relative performance: %d runs of A, %d of B", len(a), len(b))
	}
	if !(tolerance >= 0) || math.IsInf(tolerance, 0) {
		return nil, fmt.Errorf("relative performance: tolerance %v: want a finite value ≥ 0", tolerance)
	}
	rp := &RelPerf{Tolerance: tolerance}
	var aBetter, bBetter int
	for k := range a {
		byID := make(map[string]float64, len(b[k]))
		for _, t := range b[k] {
			if _, dup := byID[t.ID]; dup {
				return nil, fmt.Errorf("relative performance: run %d of B: task %q twice", k, t.ID)
			}
			if !(t.TurnaroundSeconds > 0) || math.IsInf(t.TurnaroundSeconds, 0) {
				return nil, fmt.Errorf("relative performance: run %d of B: task %q: turnaround %v s: want > 0", k, t.ID, t.TurnaroundSeconds)
			}
			byID[t.ID] = t.TurnaroundSeconds
		}
		if len(a[k]) != len(b[k]) {
			return nil, fmt.Errorf("relative performance: run %d: %d tasks under A, %d under B: not the same workload", k, len(a[k]), len(b[k]))
		}
		for _, t := range a[k] {
			ttB, ok := byID[t.ID]
			if !ok {
				return nil, fmt.Errorf("relative performance: run %d: task %q of A is not in B (or is twice in A): not the same workload", k, t.ID)
			}
			delete(byID, t.ID)
			ttA := t.TurnaroundSeconds
			if !(ttA > 0) || math.IsInf(ttA, 0) {
				return nil, fmt.Errorf("relative performance: run %d of A: task %q: turnaround %v s: want > 0", k, t.ID, ttA)
			}
			// Classify on the turnarounds, not on the rounded ratio, so
			// that swapping A and B swaps the counts exactly.
			switch {
			case ttA*(1+tolerance) < ttB:
				aBetter++
			case ttB*(1+tolerance) < ttA:
				bBetter++
			}
			rp.Ratios = append(rp.Ratios, ttA/ttB)
		}
	}
	n := len(rp.Ratios)
	if n == 0 {
		return nil, fmt.Errorf("relative performance: no tasks")
	}
	slices.Sort(rp.Ratios)
	for i, v := range rp.Ratios {
		f := float64(i+1) / float64(n)
		if i > 0 && rp.Ratios[i-1] == v {
			rp.CDF[len(rp.CDF)-1].Fraction = f
			continue
		}
		rp.CDF = append(rp.CDF, CDFPoint{Ratio: v, Fraction: f})
	}
	rp.ABetter = float64(aBetter) / float64(n)
	rp.BBetter = float64(bBetter) / float64(n)
	rp.Tie = float64(n-aBetter-bBetter) / float64(n)
	return rp, nil
}
