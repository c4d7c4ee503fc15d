package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// MakeMoldable gives every job of a rigid workload alternative requests,
// for seed 002's SA experiments (chapter 5). The seed draws them from
// Cirne & Berman's moldability model (its ref. [14]), whose parameters it
// does not give; this is the project's stand-in, stated so it can be
// replaced: the alternatives are n/4, n/2, n, 2n and 4n processors (those
// within 1..procs, n first, the job's own request), and each job's speed-up
// follows Amdahl's law with a serial fraction f drawn uniformly from
// [0, maxSerial], so that both the run time and the requested time scale
// by (f + (1−f)/n') / (f + (1−f)/n), rounded up to whole seconds. Speed-up
// is sublinear, as the seed assumes of most parallel programs (L1091).
// The same jobs and seed give the same alternatives.
func MakeMoldable(jobs []RigidJob, procs int64, maxSerial float64, seed uint64) ([]RigidJob, error) {
	if !(maxSerial >= 0 && maxSerial <= 1) {
		return nil, fmt.Errorf("moldable jobs: serial fraction bound %v: want [0, 1]", maxSerial)
	}
	if err := CheckRigidJobs(procs, jobs); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0x6d6f6c64)) // "mold"
	out := make([]RigidJob, len(jobs))
	for i, j := range jobs {
		f := r.Float64() * maxSerial
		g := func(n int64) float64 { return f + (1-f)/float64(n) }
		j.Alternatives = []MoldableRequest{{j.Procs, j.RequestedSeconds, j.RunSeconds}}
		for _, n := range []int64{j.Procs / 4, j.Procs / 2, 2 * j.Procs, 4 * j.Procs} {
			if n < 1 || n > procs || n == j.Procs || slices.ContainsFunc(j.Alternatives, func(a MoldableRequest) bool { return a.Procs == n }) {
				continue
			}
			k := g(n) / g(j.Procs)
			j.Alternatives = append(j.Alternatives, MoldableRequest{
				Procs:            n,
				RequestedSeconds: max(int64(math.Ceil(float64(j.RequestedSeconds)*k)), 1),
				RunSeconds:       max(int64(math.Ceil(float64(j.RunSeconds)*k)), 1),
			})
		}
		out[i] = j
	}
	return out, nil
}

// WidenLinear is the workload of seed 002's table 40 (L1381-1395): every
// job asks for all procs processors, and its run and requested times
// shrink by linear speed-up, t·n/procs rounded up to whole seconds. The
// alternatives are dropped (the job is rigid again).
func WidenLinear(jobs []RigidJob, procs int64) ([]RigidJob, error) {
	if err := CheckRigidJobs(procs, jobs); err != nil {
		return nil, err
	}
	scale := func(t, n int64) int64 { return max((t*n+procs-1)/procs, 1) }
	out := make([]RigidJob, len(jobs))
	for i, j := range jobs {
		out[i] = RigidJob{ID: j.ID, SubmitSeconds: j.SubmitSeconds, Procs: procs,
			RequestedSeconds: scale(j.RequestedSeconds, j.Procs), RunSeconds: scale(j.RunSeconds, j.Procs)}
	}
	return out, nil
}
