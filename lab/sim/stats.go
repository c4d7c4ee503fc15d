package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// Stat is a metric over the runs of one case: the mean and the half-width of
// its two-sided 95 % confidence interval, t(0.975, N−1) · sd / √N with the
// sample standard deviation (seed 000 L1188, L1206). Runs where the metric is
// undefined (NaN or infinite) are left out; N counts the runs that remain.
// Mean is NaN when N = 0, CI95 when N < 2.
type Stat struct {
	Mean float64
	CI95 float64
	N    int
}

// MarshalJSON writes {"mean":…,"ci95":…,"n":…}, with null for an undefined
// value (encoding/json refuses NaN).
func (s Stat) MarshalJSON() ([]byte, error) {
	num := func(v float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return v
	}
	return json.Marshal(struct {
		Mean any `json:"mean"`
		CI95 any `json:"ci95"`
		N    int `json:"n"`
	}{num(s.Mean), num(s.CI95), s.N})
}

// NewStat summarises values in the given order (the order fixes the float
// rounding, so callers pass them in run order).
func NewStat(values []float64) Stat {
	var sum float64
	n := 0
	for _, v := range values {
		if isFinite(v) {
			sum += v
			n++
		}
	}
	st := Stat{Mean: math.NaN(), CI95: math.NaN(), N: n}
	if n == 0 {
		return st
	}
	st.Mean = sum / float64(n)
	if n < 2 {
		return st
	}
	var ss float64
	for _, v := range values {
		if isFinite(v) {
			d := v - st.Mean
			ss += d * d
		}
	}
	sd := math.Sqrt(ss / float64(n-1))
	st.CI95 = StudentTQuantile(0.975, float64(n-1)) * sd / math.Sqrt(float64(n))
	return st
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Summary aggregates the runs of one case.
type Summary struct {
	Scenario string
	Policy   string
	Runs     int
	Orgs     []OrgSummary
	Total    TotalSummary
	// PerRun holds each run's metrics in run order, without task records.
	PerRun []*Result
	// First is run 0 in full, task records included (for CSV output).
	First *Result
}

// OrgSummary is OrgMetrics over runs.
type OrgSummary struct {
	Name                                                   string
	SatisfactionHOSEP, SatisfactionEHOSEP                  Stat
	TimeRatio, Alpha, Beta                                 Stat
	SatisfactionUse, BetaUse, SatisfactionHOSEPExec        Stat
	UserJ, OwnerJ, IdleJ, UserKJs, OwnerKJs                Stat
	TurnaroundMean, TurnaroundGeoMean, BoundedSlowdownMean Stat
	BoundedSlowdown100Mean                                 Stat
	Preemptions, PreemptionsGained, WastedMFlop            Stat
}

// TotalSummary is TotalMetrics over runs.
type TotalSummary struct {
	EnergyJ, KJs, IdleJ, MakespanSeconds                   Stat
	TurnaroundMean, TurnaroundGeoMean, BoundedSlowdownMean Stat
	BoundedSlowdown100Mean                                 Stat
	Preemptions, WastedMFlop                               Stat
}

// Summarize aggregates results given in run order. Every result must have
// the same organisations in the same order.
func Summarize(results []*Result) (*Summary, error) {
	if len(results) == 0 {
		return nil, fmt.Errorf("summarize: no runs")
	}
	first := results[0]
	for k, r := range results {
		if r == nil {
			return nil, fmt.Errorf("summarize: run %d: nil result", k)
		}
		if len(r.Orgs) != len(first.Orgs) {
			return nil, fmt.Errorf("summarize: run %d has %d organisations, run 0 has %d", k, len(r.Orgs), len(first.Orgs))
		}
		for i := range r.Orgs {
			if r.Orgs[i].Name != first.Orgs[i].Name {
				return nil, fmt.Errorf("summarize: run %d: organisation %d is %q, in run 0 %q", k, i, r.Orgs[i].Name, first.Orgs[i].Name)
			}
		}
	}
	vals := make([]float64, len(results))
	over := func(f func(r *Result) float64) Stat {
		for k, r := range results {
			vals[k] = f(r)
		}
		return NewStat(vals)
	}
	sum := &Summary{
		Scenario: first.Scenario,
		Policy:   first.Policy,
		Runs:     len(results),
		Orgs:     make([]OrgSummary, len(first.Orgs)),
		PerRun:   make([]*Result, len(results)),
		First:    first,
	}
	for k, r := range results {
		c := *r
		c.Tasks = nil
		sum.PerRun[k] = &c
	}
	for i := range first.Orgs {
		org := func(f func(o *OrgMetrics) float64) Stat {
			return over(func(r *Result) float64 { return f(&r.Orgs[i]) })
		}
		sum.Orgs[i] = OrgSummary{
			Name:                   first.Orgs[i].Name,
			SatisfactionHOSEP:      org(func(o *OrgMetrics) float64 { return o.SatisfactionHOSEP }),
			SatisfactionEHOSEP:     org(func(o *OrgMetrics) float64 { return o.SatisfactionEHOSEP }),
			TimeRatio:              org(func(o *OrgMetrics) float64 { return o.TimeRatio }),
			Alpha:                  org(func(o *OrgMetrics) float64 { return o.Alpha }),
			Beta:                   org(func(o *OrgMetrics) float64 { return o.Beta }),
			SatisfactionUse:        org(func(o *OrgMetrics) float64 { return o.SatisfactionUse }),
			BetaUse:                org(func(o *OrgMetrics) float64 { return o.BetaUse }),
			SatisfactionHOSEPExec:  org(func(o *OrgMetrics) float64 { return o.SatisfactionHOSEPExec }),
			UserJ:                  org(func(o *OrgMetrics) float64 { return o.UserJ }),
			OwnerJ:                 org(func(o *OrgMetrics) float64 { return o.OwnerJ }),
			IdleJ:                  org(func(o *OrgMetrics) float64 { return o.IdleJ }),
			UserKJs:                org(func(o *OrgMetrics) float64 { return o.UserKJs }),
			OwnerKJs:               org(func(o *OrgMetrics) float64 { return o.OwnerKJs }),
			TurnaroundMean:         org(func(o *OrgMetrics) float64 { return o.TurnaroundMean }),
			TurnaroundGeoMean:      org(func(o *OrgMetrics) float64 { return o.TurnaroundGeoMean }),
			BoundedSlowdownMean:    org(func(o *OrgMetrics) float64 { return o.BoundedSlowdownMean }),
			BoundedSlowdown100Mean: org(func(o *OrgMetrics) float64 { return o.BoundedSlowdown100Mean }),
			Preemptions:            org(func(o *OrgMetrics) float64 { return float64(o.Preemptions) }),
			PreemptionsGained:      org(func(o *OrgMetrics) float64 { return float64(o.PreemptionsGained) }),
			WastedMFlop:            org(func(o *OrgMetrics) float64 { return o.WastedMFlop }),
		}
	}
	sum.Total = TotalSummary{
		EnergyJ:                over(func(r *Result) float64 { return r.Total.EnergyJ }),
		KJs:                    over(func(r *Result) float64 { return r.Total.KJs }),
		IdleJ:                  over(func(r *Result) float64 { return r.Total.IdleJ }),
		MakespanSeconds:        over(func(r *Result) float64 { return r.Total.MakespanSeconds }),
		TurnaroundMean:         over(func(r *Result) float64 { return r.Total.TurnaroundMean }),
		TurnaroundGeoMean:      over(func(r *Result) float64 { return r.Total.TurnaroundGeoMean }),
		BoundedSlowdownMean:    over(func(r *Result) float64 { return r.Total.BoundedSlowdownMean }),
		BoundedSlowdown100Mean: over(func(r *Result) float64 { return r.Total.BoundedSlowdown100Mean }),
		Preemptions:            over(func(r *Result) float64 { return float64(r.Total.Preemptions) }),
		WastedMFlop:            over(func(r *Result) float64 { return r.Total.WastedMFlop }),
	}
	return sum, nil
}

// Generator returns the instance of one run (0-based). RunMany calls it from
// several goroutines at once, so it must be safe for concurrent use (a
// function of run alone, e.g. drawing task sizes from seed+run, is).
type Generator func(run int) (*scenario.Instance, error)

// RunMany simulates runs independent runs of one case, workers at a time
// (workers ≤ 0 means runtime.GOMAXPROCS(0)), and summarises them in run
// order, so the Summary is the same for any number of workers. The policy is
// shared by the workers: policies are pure values, safe for concurrent use.
// cfg.Trace, if set, sees run 0 only. The first error (in run order among
// those that failed) is returned and the other runs are abandoned.
func RunMany(ctx context.Context, gen Generator, p policy.Policy, cfg Config, runs, workers int) (*Summary, error) {
	if gen == nil || p == nil {
		return nil, fmt.Errorf("run many: nil generator or policy")
	}
	if runs <= 0 {
		return nil, fmt.Errorf("run many: %d runs: must be > 0", runs)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, runs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	results := make([]*Result, runs)
	errs := make([]error, runs)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				results[k], errs[k] = runOne(ctx, gen, p, cfg, k)
				if errs[k] != nil {
					cancel()
				}
			}
		}()
	}
feed:
	for k := 0; k < runs; k++ {
		select {
		case jobs <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	// Report a run's own failure before the cancellations it caused.
	var firstErr error
	for _, err := range errs {
		if err != nil && !isCanceled(err, ctx) {
			return nil, err
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	for k, r := range results {
		if r == nil {
			// Only possible when the caller's ctx was cancelled.
			return nil, fmt.Errorf("run many: run %d not done: %w", k, context.Cause(ctx))
		}
	}
	return Summarize(results)
}

func runOne(ctx context.Context, gen Generator, p policy.Policy, cfg Config, k int) (*Result, error) {
	inst, err := gen(k)
	if err != nil {
		return nil, fmt.Errorf("run %d: instance: %w", k, err)
	}
	if k != 0 {
		cfg.Trace = nil
	}
	r, err := Run(ctx, inst, p, cfg)
	if err != nil {
		return nil, fmt.Errorf("run %d: %w", k, err)
	}
	if cfg.OnRun != nil {
		cfg.OnRun(k, r)
	}
	return r, nil
}

// isCanceled says err only reports the cancellation of ctx.
func isCanceled(err error, ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(err, context.Canceled)
}
