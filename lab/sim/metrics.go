package sim

import (
	"math"
)

// Result is everything measured in one run.
type Result struct {
	// Scenario is the instance's name, Policy the policy's.
	Scenario string
	Policy   string
	// MakespanSeconds is T: the time of the last completion, counted from
	// time 0 (the simulated time of POLICY.md §5).
	MakespanSeconds float64
	// Orgs in the instance's order.
	Orgs  []OrgMetrics
	Total TotalMetrics
	// Tasks in submission order.
	Tasks []TaskRecord
	// Passes is the number of times the policy was called, Decisions the
	// number of decisions applied.
	Passes, Decisions int
}

// OrgMetrics are one organisation's figures for one run. A figure that is
// undefined in a run (see each field) is NaN.
type OrgMetrics struct {
	Name  string
	Tasks int

	// SatisfactionHOSEP is seed 001 eqs. 1-2: the mean over the
	// organisation's tasks of 100·(CT_ideal − AT)/(CT_real − AT), where
	// CT_ideal − AT = size / (mean MFLOPS of the organisation's own
	// machines). NaN if it has no tasks.
	SatisfactionHOSEP float64
	// SatisfactionEHOSEP is seed 000 eq. 4.1 as the author's simulator code
	// computes it (POLICY.md §5): TimeRatio · Alpha · Beta. NaN when Alpha
	// or Beta is undefined or the organisation has no tasks.
	SatisfactionEHOSEP float64
	// TimeRatio is mean_t(100 · Ideal_t / Real_t), Ideal_t = size / mean
	// MFLOPS of all the federation's machines, Real_t = completion −
	// submission.
	TimeRatio float64
	// Alpha is PowerQuota_i · T / LocalJ_i, LocalJ_i the joules consumed on
	// the organisation's machines by anyone. When nobody used its machines
	// (LocalJ_i = 0) the ratio is unbounded: Alpha is NaN and the run's
	// SatisfactionEHOSEP for this organisation is NaN, excluded from the
	// means over runs (Stat.N says how many runs count).
	Alpha float64
	// Beta is (SystemJ − UserJ_i)/(Lim_i · T) + 1; NaN if Lim_i = 0.
	Beta float64
	// SatisfactionUse is the author's second form of eq. 4.1,
	// satisfacaoGeralUso (gspd-unesp/ispd 196cdf6, Metricas.java
	// L604-653): TimeRatio · Alpha · BetaUse, with β over the organisation's
	// own span of use instead of T: BetaUse = (SystemJ − UserJ_i)/(Lim_i ·
	// (last completion − first start of its tasks)) + 1. NaN like
	// SatisfactionEHOSEP.
	SatisfactionUse, BetaUse float64
	// SatisfactionHOSEPExec is seed 001 eq. 1-2 with the ideal time on the
	// machine that completed the task (size / its MFLOPS, or / the task's
	// share of them on a shared machine) rather than on the organisation's
	// mean machine (definition 5).
	SatisfactionHOSEPExec float64

	// Energy in joules: of its tasks wherever they ran, preempted segments
	// included (as user); of anything run on its machines (as owner); and
	// the idle draw of its machines over [0, T] while they ran nothing
	// (never part of the others, never seen by the policy).
	UserJ, OwnerJ, IdleJ float64
	// UserKJs and OwnerKJs are UserJ and OwnerJ in kJ per second of T, the
	// dissertation's KJ/s.
	UserKJs, OwnerKJs float64

	// Turnaround (completion − submission) over the organisation's tasks:
	// arithmetic and geometric mean, and mean bounded slowdown
	// tt / max(te, τ) with te the task's total time on machines (all
	// segments, wasted ones included) and τ = BoundedSlowdownTau. NaN with
	// no tasks.
	TurnaroundMean, TurnaroundGeoMean, BoundedSlowdownMean float64
	// BoundedSlowdown100Mean is the bounded slowdown with seed 002's other
	// τ, 100 s (BoundedSlowdownTau100).
	BoundedSlowdown100Mean float64

	// Preemptions counts how often its tasks were stopped;
	// PreemptionsGained how often another task was stopped to place one of
	// its tasks. WastedMFlop is the work its tasks lost when stopped.
	Preemptions, PreemptionsGained int
	WastedMFlop                    float64
}

// TotalMetrics are the federation's figures for one run.
type TotalMetrics struct {
	Tasks int
	// EnergyJ is the busy energy of all machines (= Σ UserJ = Σ OwnerJ);
	// KJs is EnergyJ in kJ per second of T. IdleJ is the idle energy.
	EnergyJ, KJs, IdleJ float64
	MakespanSeconds     float64
	// Over all tasks, as in OrgMetrics.
	TurnaroundMean, TurnaroundGeoMean, BoundedSlowdownMean float64
	// BoundedSlowdown100Mean is the bounded slowdown with seed 002's other
	// τ, 100 s (BoundedSlowdownTau100).
	BoundedSlowdown100Mean float64
	Preemptions            int
	WastedMFlop            float64
}

// TaskRecord is one task's history, for per-task CSV output.
type TaskRecord struct {
	ID        string
	Org       string
	SizeMFlop int64
	// Times in seconds of virtual time.
	SubmitSeconds     float64
	FirstStartSeconds float64
	CompletionSeconds float64
	TurnaroundSeconds float64
	// RunSeconds is the total time on machines, all segments.
	RunSeconds  float64
	Preemptions int
	WastedMFlop float64
	// EnergyJ is the busy energy of all its segments.
	EnergyJ float64
}

func (s *simulator) result() *Result {
	inst := s.inst
	nO := len(inst.Orgs)
	var T float64
	for i := range s.tasks {
		T = math.Max(T, s.tasks[i].completed)
	}

	quota := make([]int64, nO)
	powerQuota := make([]int64, nO)
	owned := make([]int, nO)
	idle := make([]float64, nO)
	var computeSystem int64
	for m, mach := range inst.Machines {
		quota[mach.Owner] += mach.MFLOPS
		powerQuota[mach.Owner] += mach.BusyMilliW
		owned[mach.Owner]++
		computeSystem += mach.MFLOPS
		if len(inst.IdleMilliW) > 0 {
			idle[mach.Owner] += float64(inst.IdleMilliW[m]) * math.Max(0, T-s.busyS[m]) / 1000
		}
	}
	fedMean := float64(computeSystem) / float64(len(inst.Machines))

	type acc struct {
		n              int
		hosep, ratio   float64
		tt, logTT, bsd float64
		bsd100         float64
		hosepExec      float64
		first, last    float64
	}
	per := make([]acc, nO)
	var all acc
	records := make([]TaskRecord, len(s.tasks))
	for i := range s.tasks {
		t := &s.tasks[i]
		o := t.spec.Org
		size := float64(t.spec.SizeMFlop)
		tt := t.completed - t.spec.SubmitSeconds
		ownMean := float64(quota[o]) / float64(owned[o])
		a := &per[o]
		if a.n == 0 || t.firstRun < a.first {
			a.first = t.firstRun
		}
		a.last = math.Max(a.last, t.completed)
		a.hosepExec += 100 * (size / float64(t.mflops)) / tt // t.mflops: its share of the machine that completed it
		a.n++
		a.hosep += 100 * (size / ownMean) / tt
		a.ratio += 100 * (size / fedMean) / tt
		a.tt += tt
		a.logTT += math.Log(tt)
		bsd := tt / math.Max(t.runSec, BoundedSlowdownTau)
		a.bsd += bsd
		bsd100 := tt / math.Max(t.runSec, BoundedSlowdownTau100)
		a.bsd100 += bsd100
		all.bsd100 += bsd100
		all.n++
		all.tt += tt
		all.logTT += math.Log(tt)
		all.bsd += bsd
		records[i] = TaskRecord{
			ID: t.spec.ID, Org: inst.Orgs[o].Name, SizeMFlop: t.spec.SizeMFlop,
			SubmitSeconds: t.spec.SubmitSeconds, FirstStartSeconds: t.firstRun,
			CompletionSeconds: t.completed, TurnaroundSeconds: tt, RunSeconds: t.runSec,
			Preemptions: t.preempted, WastedMFlop: t.wasted, EnergyJ: t.energyJ,
		}
	}
	mean := func(sum float64, n int) float64 {
		if n == 0 {
			return math.NaN()
		}
		return sum / float64(n)
	}
	perSecond := func(j float64) float64 {
		if T <= 0 {
			return math.NaN()
		}
		return j / 1000 / T
	}

	var systemJ, idleJ, wasted float64
	var preempts int
	for i := 0; i < nO; i++ {
		systemJ += s.userJ[i]
		idleJ += idle[i]
		wasted += s.wasted[i]
		preempts += s.prempts[i]
	}

	r := &Result{
		Scenario:        inst.Name,
		Policy:          s.pol.Name(),
		MakespanSeconds: T,
		Orgs:            make([]OrgMetrics, nO),
		Tasks:           records,
		Passes:          s.passes,
		Decisions:       s.decisions,
	}
	for i, o := range inst.Orgs {
		a := per[i]
		alpha, beta := math.NaN(), math.NaN()
		if ownerJ := s.ownerJ[i]; ownerJ > 0 {
			alpha = float64(powerQuota[i]) / 1000 * T / ownerJ
		}
		if o.LimitMilliW > 0 && T > 0 {
			beta = (systemJ-s.userJ[i])/(float64(o.LimitMilliW)/1000*T) + 1
		}
		betaUse := math.NaN()
		if span := a.last - a.first; o.LimitMilliW > 0 && a.n > 0 && span > 0 {
			betaUse = (systemJ-s.userJ[i])/(float64(o.LimitMilliW)/1000*span) + 1
		}
		ratio := mean(a.ratio, a.n)
		r.Orgs[i] = OrgMetrics{
			Name:                   o.Name,
			Tasks:                  a.n,
			SatisfactionHOSEP:      mean(a.hosep, a.n),
			SatisfactionEHOSEP:     ratio * alpha * beta, // NaN propagates
			TimeRatio:              ratio,
			Alpha:                  alpha,
			Beta:                   beta,
			SatisfactionUse:        ratio * alpha * betaUse,
			BetaUse:                betaUse,
			SatisfactionHOSEPExec:  mean(a.hosepExec, a.n),
			UserJ:                  s.userJ[i],
			OwnerJ:                 s.ownerJ[i],
			IdleJ:                  idle[i],
			UserKJs:                perSecond(s.userJ[i]),
			OwnerKJs:               perSecond(s.ownerJ[i]),
			TurnaroundMean:         mean(a.tt, a.n),
			TurnaroundGeoMean:      math.Exp(mean(a.logTT, a.n)),
			BoundedSlowdownMean:    mean(a.bsd, a.n),
			BoundedSlowdown100Mean: mean(a.bsd100, a.n),
			Preemptions:            s.prempts[i],
			PreemptionsGained:      s.gained[i],
			WastedMFlop:            s.wasted[i],
		}
	}
	r.Total = TotalMetrics{
		Tasks:                  all.n,
		EnergyJ:                systemJ,
		KJs:                    perSecond(systemJ),
		IdleJ:                  idleJ,
		MakespanSeconds:        T,
		TurnaroundMean:         mean(all.tt, all.n),
		TurnaroundGeoMean:      math.Exp(mean(all.logTT, all.n)),
		BoundedSlowdownMean:    mean(all.bsd, all.n),
		BoundedSlowdown100Mean: mean(all.bsd100, all.n),
		Preemptions:            preempts,
		WastedMFlop:            wasted,
	}
	return r
}
