package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"gonum.org/v1/gonum/stat/distuv"
)

// LublinModel is the synthetic rigid-job workload of U. Lublin and D. G.
// Feitelson, "The workload on parallel supercomputers: modeling the
// characteristics of rigid jobs", J. Parallel Distrib. Comput. 63(11),
// 1105-1122, 2003 (seed 002's ref. [37], the 2001 report of the same
// model); the parameters are the paper's "whole sample" (batch and
// interactive together) ones as its authors' generator (lublin99.c) sets
// them, fitted to the CTC, KTH, SDSC, LANL, LLNL and other logs:
//
//   - size: serial with probability 0.244; otherwise log2(n) is drawn from
//     a two-stage uniform, [0.8, Umed] with probability 0.86 and [Umed,
//     Uhi] otherwise, Uhi = log2(P), Umed = Uhi − 2.5; with probability
//     0.576/(1−0.244) of the parallel jobs it is rounded to a power of two;
//   - run time: ln(te) is a hyper-gamma, Gamma(4.2, 0.94) with probability
//     p = −0.0054·n + 0.78 (clamped to [0, 1]) and Gamma(312, 0.03)
//     otherwise (shape, scale), redrawn above 12 (te ≤ e^12 s ≈ 45 h): wider
//     jobs run longer;
//   - arrivals: ln of the rush-hour inter-arrival is Gamma(10.2303·1.0225,
//     0.4871), spread over a daily cycle of 48 half-hour buckets weighted by
//     the Gamma(8.1737, 3.9631) density (the "arrive" stage of lublin99.c).
//
// Two things are this project's, not the model's. The model has no user
// estimates; seed 002 needs them (tr, L401) and notes they are poor
// (L848-849), so tr is te times a factor drawn uniformly from [1,
// EstimateFactor], rounded up to a whole minute, and a share KilledShare of
// the jobs is given a tr below te (drawn uniformly from [te/2, te)), so that
// they are killed (L497). And the arrival times are scaled so that the
// offered load Σ n·te / (P · span of arrivals) equals Load.
type LublinModel struct {
	// Procs is P; Jobs how many jobs to draw.
	Procs int64 `json:"procs"`
	Jobs  int   `json:"jobs"`
	// Load is the offered load in (0, 2]; 0 keeps the model's own rate.
	Load float64 `json:"load"`
	// EstimateFactor ≥ 1 bounds tr/te; KilledShare in [0, 1).
	EstimateFactor float64 `json:"estimate_factor"`
	KilledShare    float64 `json:"killed_share"`
	Seed           uint64  `json:"seed"`
}

// DefaultLublinModel is the synthetic workload `peer sim --synthetic`
// draws: seed 002's SYNT machine of 800 processors (table 4, L731).
func DefaultLublinModel() LublinModel {
	return LublinModel{Procs: 800, Jobs: 10000, Load: 0.7, EstimateFactor: 5, KilledShare: 0.05, Seed: 1}
}

// The model's parameters (the paper's whole-sample fit).
const (
	lublinSerialProb   = 0.244
	lublinPow2Prob     = 0.576
	lublinULow         = 0.8
	lublinUMedBelow    = 2.5 // Umed = Uhi − 2.5
	lublinUProb        = 0.86
	lublinA1, lublinB1 = 4.2, 0.94
	lublinA2, lublinB2 = 312, 0.03
	lublinPA, lublinPB = -0.0054, 0.78
	lublinAArr         = 10.2303 * 1.0225 // AARR · ARAR
	lublinBArr         = 0.4871
	lublinANum         = 8.1737
	lublinBNum         = 3.9631
	lublinMaxLogRun    = 12
	lublinMaxLogArr    = 13
	lublinBuckets      = 48
	lublinBucketSec    = 24 * 3600 / lublinBuckets
	lublinDayStart     = 11 // the fitted day runs from bucket 11 cyclically
)

// Generate draws the workload; the same model and seed give the same jobs.
func (m LublinModel) Generate() ([]RigidJob, error) {
	switch {
	case m.Procs < 1:
		return nil, fmt.Errorf("lublin model: %d processors: want ≥ 1", m.Procs)
	case m.Jobs < 1:
		return nil, fmt.Errorf("lublin model: %d jobs: want ≥ 1", m.Jobs)
	case !(m.Load >= 0 && m.Load <= 2):
		return nil, fmt.Errorf("lublin model: load %v: want 0 (the model's own rate) or (0, 2]", m.Load)
	case !(m.EstimateFactor >= 1 && m.EstimateFactor <= 1000):
		return nil, fmt.Errorf("lublin model: estimate factor %v: want 1..1000", m.EstimateFactor)
	case !(m.KilledShare >= 0 && m.KilledShare < 1):
		return nil, fmt.Errorf("lublin model: killed share %v: want [0, 1)", m.KilledShare)
	}
	r := rand.New(rand.NewPCG(m.Seed, 0x4c75626c696e)) // "Lublin"
	src := &gonumSource{r: r}
	gamma := func(shape, scale float64) float64 {
		return distuv.Gamma{Alpha: shape, Beta: 1 / scale, Src: src}.Rand()
	}
	uHi := math.Log2(float64(m.Procs))
	uMed := max(uHi-lublinUMedBelow, lublinULow)
	arr := newLublinArrivals()
	jobs := make([]RigidJob, m.Jobs)
	submit := make([]float64, m.Jobs)
	var t, area float64
	for i := range jobs {
		t += arr.next(r, gamma)
		submit[i] = t
		n := int64(1)
		if u := r.Float64(); u > lublinSerialProb && m.Procs > 1 {
			lo, hi := lublinULow, uMed
			if r.Float64() > lublinUProb {
				lo, hi = uMed, uHi
			}
			par := lo + r.Float64()*(hi-lo)
			if u <= lublinSerialProb+lublinPow2Prob {
				par = math.Round(par)
			}
			n = min(max(int64(math.Round(math.Exp2(par))), 1), m.Procs)
		}
		p := min(max(lublinPA*float64(n)+lublinPB, 0), 1)
		var hg float64
		for {
			if r.Float64() <= p {
				hg = gamma(lublinA1, lublinB1)
			} else {
				hg = gamma(lublinA2, lublinB2)
			}
			if hg <= lublinMaxLogRun {
				break
			}
		}
		te := max(int64(math.Exp(hg)), 1)
		var tr int64
		if r.Float64() < m.KilledShare && te > 1 {
			tr = max(te/2+int64(r.Float64()*float64(te-te/2)), 1)
			tr = min(tr, te-1)
		} else {
			f := 1 + r.Float64()*(m.EstimateFactor-1)
			tr = int64(math.Ceil(float64(te)*f/60)) * 60
		}
		jobs[i] = RigidJob{ID: "j" + strconv.Itoa(i+1), Procs: n, RequestedSeconds: tr, RunSeconds: te}
		area += float64(n) * float64(min(te, tr))
	}
	scale := 1.0
	if span := submit[len(submit)-1] - submit[0]; m.Load > 0 && span > 0 {
		scale = area / (float64(m.Procs) * span) / m.Load
	}
	for i := range jobs {
		jobs[i].SubmitSeconds = int64(math.Round((submit[i] - submit[0]) * scale))
	}
	return jobs, nil
}

// lublinArrivals is the daily-cycle arrival process: an inter-arrival drawn
// for the rush hour buys "points", and each half-hour bucket costs its
// weight (busier buckets cost less, so more jobs arrive in them).
type lublinArrivals struct {
	weights          [lublinBuckets]float64
	bucket           int
	points, reminder float64
}

func newLublinArrivals() *lublinArrivals {
	a := &lublinArrivals{}
	g := distuv.Gamma{Alpha: lublinANum, Beta: 1 / lublinBNum}
	var mean float64
	for i := lublinDayStart; i < lublinBuckets+lublinDayStart; i++ {
		w := g.CDF(float64(i)+0.5) - g.CDF(float64(i)-0.5)
		a.weights[(i-1)%lublinBuckets] = w
		mean += w
	}
	mean /= lublinBuckets
	for i := range a.weights {
		a.weights[i] /= mean
	}
	return a
}

// next is the time to the next arrival, in seconds.
func (a *lublinArrivals) next(r *rand.Rand, gamma func(shape, scale float64) float64) float64 {
	var g float64
	for g = gamma(lublinAArr, lublinBArr); g > lublinMaxLogArr; g = gamma(lublinAArr, lublinBArr) {
	}
	a.points += math.Exp(g) / lublinBucketSec
	var dt float64
	for a.points > a.weights[a.bucket] {
		a.points -= a.weights[a.bucket]
		a.bucket = (a.bucket + 1) % lublinBuckets
		dt += lublinBucketSec
	}
	rem := a.points / a.weights[a.bucket]
	dt += lublinBucketSec * (rem - a.reminder)
	a.reminder = rem
	return max(dt, 0)
}

// gonumSource feeds gonum's distributions from a math/rand/v2 generator
// (gonum asks for Uint64 and Seed).
type gonumSource struct{ r *rand.Rand }

func (s *gonumSource) Uint64() uint64 { return s.r.Uint64() }
func (s *gonumSource) Seed(uint64)    {}
