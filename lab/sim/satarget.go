package sim

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/coopgrid/coopgrid/policy"
)

// Seed 002's target experiments (chapter 5, 002_7ead415125793782.txt
// L1138-1151, table 28): one job of a moldable workload, the target,
// submits with its static request, with SA_s or with SA_i, while every
// other job uses the static request, SA_s or SA_i: nine simulations per
// target. The seed draws a new 10,000-job workload for every target
// (L1129); SimulateTargets runs many targets on one workload instead,
// which is exact and cheap: until the target arrives the nine runs are the
// three whole-workload runs, so each whole-workload run is forked at the
// target's arrival and the fork runs only until the target starts (its
// end is then known). The target with the workload's own mode is the
// whole-workload run itself.

// SAModes are the three ways of choosing a request, in the seed's order.
func SAModes() []SAMode { return []SAMode{SAStatic, SASubmit, SAStart} }

// String names the mode as `peer sim` does (sa_s is the seed's SA_s).
func (m SAMode) String() string {
	switch m {
	case SAStatic:
		return "static"
	case SASubmit:
		return "sa_s"
	case SAStart:
		return "sa_i"
	}
	return fmt.Sprintf("SAMode(%d)", int(m))
}

// SATargets is the outcome of SimulateTargets.
type SATargets struct {
	// Workload[w] are every job's records when all use mode w (table 38).
	Workload [3][]JobRecord
	// Target[w][t][k] is target k's record when it uses mode t and every
	// other job mode w (tables 29-37).
	Target [3][3][]JobRecord
}

// SimulateTargets runs the nine scenarios of table 28 for each target (an
// index into jobs) under conservative backfilling, with SA_i embedded
// where a job uses it (policy.ConservativeSAi, which treats a job without
// alternatives as Conservative does). Deterministic.
func SimulateTargets(ctx context.Context, procs int64, jobs []RigidJob, targets []int) (*SATargets, error) {
	if err := CheckRigidJobs(procs, jobs); err != nil {
		return nil, err
	}
	probe := newJobSim(procs, jobs, SAStatic)
	pos := make([]int, len(targets)) // order index of each target
	for k, t := range targets {
		if t < 0 || t >= len(jobs) {
			return nil, fmt.Errorf("SA targets: target %d of %d jobs", t, len(jobs))
		}
		pos[k] = probe.index[jobs[t].ID]
	}
	// byArrival lists the targets in the order they arrive.
	byArrival := make([]int, len(targets))
	for k := range byArrival {
		byArrival[k] = k
	}
	slices.SortFunc(byArrival, func(a, b int) int { return cmp.Compare(pos[a], pos[b]) })
	out := &SATargets{}
	for _, w := range SAModes() {
		for _, t := range SAModes() {
			out.Target[w][t] = make([]JobRecord, len(targets))
		}
		s := newJobSim(procs, jobs, w)
		next := 0
		for step := 1; !s.done(); step++ {
			if step%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			for ; next < len(byArrival) && s.next <= pos[byArrival[next]] &&
				s.nextInstant() >= jobs[s.order[pos[byArrival[next]]]].SubmitSeconds; next++ {
				k := byArrival[next]
				for _, t := range SAModes() {
					if t == w {
						continue
					}
					r, err := s.forkTarget(ctx, pos[k], t)
					if err != nil {
						return nil, fmt.Errorf("SA targets: %s with %s in a %s workload: %w", jobs[targets[k]].ID, t, w, err)
					}
					out.Target[w][t][k] = r
				}
			}
			if err := s.step(policy.ConservativeSAi); err != nil {
				return nil, err
			}
		}
		out.Workload[w] = s.recs
		for k, p := range pos {
			out.Target[w][w][k] = s.recs[p]
		}
	}
	return out, nil
}

// forkTarget runs a copy of s, whose job at order index k has not arrived,
// with that job choosing as mode says, until it starts.
func (s *jobSim) forkTarget(ctx context.Context, k int, mode SAMode) (JobRecord, error) {
	c := *s
	c.recs = slices.Clone(s.recs)
	c.ends = slices.Clone(s.ends)
	c.running = maps.Clone(s.running)
	c.queue = slices.Clone(s.queue)
	c.target, c.targetMode = k, mode
	for step := 1; c.recs[k].StartSeconds < 0; step++ {
		if step%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return JobRecord{}, err
			}
		}
		if err := c.step(policy.ConservativeSAi); err != nil {
			return JobRecord{}, err
		}
	}
	return c.recs[k], nil
}

// PickTargets draws count distinct jobs, uniformly from the middle 80 % of
// the submission order (so no target sees the empty machine of the start
// or the draining one of the end), and returns their indices into jobs in
// submission order; the same arguments give the same targets.
func PickTargets(jobs []RigidJob, count int, seed uint64) ([]int, error) {
	n := len(jobs)
	lo, hi := n/10, n-n/10
	if count < 1 || count > hi-lo {
		return nil, fmt.Errorf("SA targets: %d targets among the %d middle jobs of %d: want 1..%d", count, hi-lo, n, hi-lo)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(jobs[a].SubmitSeconds, jobs[b].SubmitSeconds) })
	r := rand.New(rand.NewPCG(seed, 0x746172676574)) // "target"
	picked := r.Perm(hi - lo)[:count]
	slices.Sort(picked)
	out := make([]int, count)
	for i, k := range picked {
		out[i] = order[lo+k]
	}
	return out, nil
}

// TargetMetrics are the rows of the seed's tables 31, 34 and 37 over a
// set of targets: seed 002's metrics (JobMetricsOf) and the standard
// deviation of tt.
type TargetMetrics struct {
	Targets                 int     `json:"targets"`
	MeanTurnaround          float64 `json:"mean_turnaround_s"`
	GeometricMeanTurnaround float64 `json:"geometric_mean_turnaround_s"`
	MeanSlowdown            float64 `json:"mean_slowdown"`
	MeanBoundedSlowdown10   float64 `json:"mean_bounded_slowdown_10"`
	MeanBoundedSlowdown100  float64 `json:"mean_bounded_slowdown_100"`
	// StdDevTurnaround is the population standard deviation of tt.
	StdDevTurnaround float64 `json:"stddev_turnaround_s"`
	// Wider is the share of targets that ran on more processors than their
	// static request (L1377-1380: SA_i tends to choose the largest n).
	Wider float64 `json:"wider"`
}

// TargetMetricsOf summarises target records.
func TargetMetricsOf(procs int64, recs []JobRecord, jobs []RigidJob, targets []int) (TargetMetrics, error) {
	m, err := JobMetricsOf(procs, recs)
	if err != nil {
		return TargetMetrics{}, err
	}
	var ss float64
	wider := 0
	for k, r := range recs {
		d := float64(r.Turnaround()) - m.MeanTurnaround
		ss += d * d
		if r.Procs > jobs[targets[k]].Procs {
			wider++
		}
	}
	n := float64(len(recs))
	return TargetMetrics{Targets: len(recs), MeanTurnaround: m.MeanTurnaround, GeometricMeanTurnaround: m.GeometricMeanTurnaround,
		MeanSlowdown: m.MeanSlowdown, MeanBoundedSlowdown10: m.MeanBoundedSlowdown10, MeanBoundedSlowdown100: m.MeanBoundedSlowdown100,
		StdDevTurnaround: math.Sqrt(ss / n), Wider: float64(wider) / n}, nil
}
