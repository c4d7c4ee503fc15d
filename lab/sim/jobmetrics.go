package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// JobMetrics are seed 002's metrics (§3.4, 002_7ead415125793782.txt
// L551-656) over the jobs of one simulated workload. Times in seconds.
type JobMetrics struct {
	Jobs   int `json:"jobs"`
	Killed int `json:"killed"`
	// MeanTurnaround is the mean of tt = end − submit (L557-561).
	MeanTurnaround float64 `json:"mean_turnaround_s"`
	MeanWait       float64 `json:"mean_wait_s"`
	// MeanSlowdown is the mean of tt/te (L584).
	MeanSlowdown float64 `json:"mean_slowdown"`
	// MeanBoundedSlowdown10 and 100 are the means of tt/max(te, τ) with
	// τ = 10 s and 100 s (L607, L718-719): the seed's formula, without the
	// max(1, ·) floor some authors add, so a job shorter than τ that never
	// waits counts below 1.
	MeanBoundedSlowdown10  float64 `json:"mean_bounded_slowdown_10"`
	MeanBoundedSlowdown100 float64 `json:"mean_bounded_slowdown_100"`
	// MeanPerProcessorBoundedSlowdown is the mean of tt/(n·max(te, τ)) with
	// τ = 10 s (L617).
	MeanPerProcessorBoundedSlowdown float64 `json:"mean_pp_bounded_slowdown_10"`
	// GeometricMeanTurnaround is (Π tt)^(1/m) (L625).
	GeometricMeanTurnaround float64 `json:"geometric_mean_turnaround_s"`
	// ThroughputPerHour is jobs completed per hour between the first
	// submission and the last end (L643).
	ThroughputPerHour float64 `json:"throughput_per_hour"`
	// Utilisation is Σ n·te over P times that span (L649).
	Utilisation float64 `json:"utilisation"`
	// MakespanSeconds is that span.
	MakespanSeconds int64 `json:"makespan_s"`
}

// JobMetricsOf summarises the records of one run on procs processors.
// Every job must have run (te ≥ 1 s).
func JobMetricsOf(procs int64, recs []JobRecord) (JobMetrics, error) {
	m := JobMetrics{Jobs: len(recs)}
	if len(recs) == 0 {
		return m, fmt.Errorf("job metrics: no jobs")
	}
	first, last := recs[0].SubmitSeconds, recs[0].EndSeconds
	var sumTT, sumW, sumS, sumB10, sumB100, sumPP, sumLog, area float64
	for _, r := range recs {
		te := r.Executed()
		if r.StartSeconds < r.SubmitSeconds || te < 1 {
			return m, fmt.Errorf("job metrics: job %q: submitted %d, started %d, ended %d: not a completed run", r.ID, r.SubmitSeconds, r.StartSeconds, r.EndSeconds)
		}
		tt := float64(r.Turnaround())
		fte := float64(te)
		sumTT += tt
		sumW += float64(r.StartSeconds - r.SubmitSeconds)
		sumS += tt / fte
		sumB10 += tt / math.Max(fte, 10)
		sumB100 += tt / math.Max(fte, 100)
		sumPP += tt / (float64(r.Procs) * math.Max(fte, 10))
		sumLog += math.Log(tt)
		area += float64(r.Procs) * fte
		first, last = min(first, r.SubmitSeconds), max(last, r.EndSeconds)
		if r.Killed {
			m.Killed++
		}
	}
	n := float64(len(recs))
	m.MeanTurnaround, m.MeanWait, m.MeanSlowdown = sumTT/n, sumW/n, sumS/n
	m.MeanBoundedSlowdown10, m.MeanBoundedSlowdown100 = sumB10/n, sumB100/n
	m.MeanPerProcessorBoundedSlowdown = sumPP / n
	m.GeometricMeanTurnaround = math.Exp(sumLog / n)
	m.MakespanSeconds = last - first
	if span := float64(last - first); span > 0 {
		m.ThroughputPerHour = n / span * 3600
		m.Utilisation = area / (float64(procs) * span)
	}
	return m, nil
}

// JobRelativePerformance is seed 002's relative performance (§4.1) of two
// runs of the same workload: tt_a/tt_b per job, ties only at ratio 1
// (L680), through RelativePerformance.
func JobRelativePerformance(a, b []JobRecord) (*RelPerf, error) {
	conv := func(recs []JobRecord) []TaskRecord {
		out := make([]TaskRecord, len(recs))
		for i, r := range recs {
			out[i] = TaskRecord{ID: r.ID, SubmitSeconds: float64(r.SubmitSeconds), FirstStartSeconds: float64(r.StartSeconds),
				CompletionSeconds: float64(r.EndSeconds), TurnaroundSeconds: float64(r.Turnaround()), RunSeconds: float64(r.Executed())}
		}
		return out
	}
	return RelativePerformance([][]TaskRecord{conv(a)}, [][]TaskRecord{conv(b)}, 0)
}

// RelPerfGroup is relative performance over one third of the jobs ranked
// by a characteristic (seed 002 §4.5, L797-807: small, medium, large).
type RelPerfGroup struct {
	Characteristic string  `json:"characteristic"`
	Third          string  `json:"third"`
	Jobs           int     `json:"jobs"`
	ABetter        float64 `json:"a_better"`
	Tie            float64 `json:"tie"`
	BBetter        float64 `json:"b_better"`
}

// JobCharacteristics are §4.5's five, in its order: n, tr, tr×n, te, te×n.
func JobCharacteristics() []string { return []string{"n", "tr", "tr*n", "te", "te*n"} }

func characteristic(name string, r JobRecord) int64 {
	switch name {
	case "n":
		return r.Procs
	case "tr":
		return r.RequestedSeconds
	case "tr*n":
		return r.RequestedSeconds * r.Procs
	case "te":
		return r.Executed()
	}
	return r.Executed() * r.Procs
}

// JobRelativeByCharacteristic splits the jobs into thirds by each of §4.5's
// characteristics, as A ran them (the same under B for rigid jobs), ranked
// by value then ID, and gives the relative performance of each third.
func JobRelativeByCharacteristic(a, b []JobRecord) ([]RelPerfGroup, error) {
	byID := make(map[string]JobRecord, len(b))
	for _, r := range b {
		byID[r.ID] = r
	}
	var out []RelPerfGroup
	for _, c := range JobCharacteristics() {
		ranked := slices.Clone(a)
		slices.SortFunc(ranked, func(x, y JobRecord) int {
			return cmp.Or(cmp.Compare(characteristic(c, x), characteristic(c, y)), cmp.Compare(x.ID, y.ID))
		})
		for k, third := range []string{"small", "medium", "large"} {
			sa := ranked[k*len(ranked)/3 : (k+1)*len(ranked)/3]
			if len(sa) == 0 {
				continue
			}
			sb := make([]JobRecord, len(sa))
			for i, r := range sa {
				rb, ok := byID[r.ID]
				if !ok {
					return nil, fmt.Errorf("relative performance by %s: job %q of A is not in B", c, r.ID)
				}
				sb[i] = rb
			}
			rp, err := JobRelativePerformance(sa, sb)
			if err != nil {
				return nil, fmt.Errorf("relative performance by %s: %w", c, err)
			}
			out = append(out, RelPerfGroup{Characteristic: c, Third: third, Jobs: len(sa), ABetter: rp.ABetter, Tie: rp.Tie, BBetter: rp.BBetter})
		}
	}
	return out, nil
}
