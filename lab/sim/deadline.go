package sim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/coopgrid/coopgrid/policy"
)

// Seed 004's evaluation (Martins 2012, §5.3, L1185-1275, table 5.1): soft
// deadlines on an opportunistic desktop grid, the mechanism of §4.1
// (policy.MapDeadline plus progress monitoring and checkpoints) against
// InteGrade's online scheduler. This is its own small time-stepped
// simulator, not Engine: the seed's machines run a queue each, feel their
// owner's daily load and fail, none of which the EHOSEP engine models.
// docs/REPRODUCTION.md ("Seed 004") lists every choice that is ours.

// DeadlineStrategy is the scheduler compared.
type DeadlineStrategy int

const (
	// Martins is the seed's mechanism: policy.MapDeadline on arrival and on
	// every re-mapping, and progress monitoring that migrates a soft task
	// predicted to miss its deadline.
	Martins DeadlineStrategy = iota + 1
	// InteGrade is the baseline (L1189): no requirements or preferences,
	// so each task goes to a machine chosen at random, at the end of its
	// queue; several tasks may wait on one machine.
	InteGrade
)

func (s DeadlineStrategy) String() string {
	switch s {
	case Martins:
		return "martins"
	case InteGrade:
		return "integrade"
	}
	return fmt.Sprintf("strategy(%d)", int(s))
}

// DeadlineScenario is one cell of table 5.1.
type DeadlineScenario struct {
	Machines int // 100 (L1195)
	// MinMIPS and MaxMIPS bound the uniform machine speeds: factor 3 is
	// U(1385, 4155), factor 6 U(791, 4746) (L1195, L1208).
	MinMIPS, MaxMIPS int64
	Apps             int     // 770 (L1199)
	ArrivalsPerMin   float64 // 0.12, 0.24, 0.36 (L1210)
	SoftPercent      int     // 25, 50, 75, 100 (L1211)
	// MinSizeMI and MaxSizeMI bound the uniform sizes (L1212): 4 to 16 h
	// on the mean 2770-MIPS machine.
	MinSizeMI, MaxSizeMI int64
	// SlackMin and SlackMax: a soft task's deadline is its submission plus
	// U(SlackMin, SlackMax) times its run time on the mean machine (ours:
	// the seed does not say how deadlines were drawn).
	SlackMin, SlackMax float64
	// Failures turns on §5.3.2: machine failures every GridMTBFMin minutes
	// on average across the grid (L1235-1237, read as the grid's MTBF),
	// downtimes exponential with a mean drawn per failure from U(0.166,
	// 30) hours (L1239).
	Failures    bool
	GridMTBFMin float64
	// CheckpointMin is the checkpoint interval (ours: fixed; the seed's
	// Viana et al. mechanism adapts it to MTBF).
	CheckpointMin int
	// MonitorMin is how often the mechanism checks a soft task's progress.
	MonitorMin int
	// PredictionErrorPct is the predictor's error (L1158-1159: "uma taxa
	// erro de 10%"): each prediction uses the machine's capacity times
	// U(1 − e, 1 + e), drawn afresh.
	PredictionErrorPct int
}

// Table51 returns the scenario for one heterogeneity factor (3 or 6),
// arrival rate and share of soft tasks.
func Table51(factor int, perMin float64, softPercent int, failures bool) DeadlineScenario {
	sc := DeadlineScenario{Machines: 100, MinMIPS: 1385, MaxMIPS: 4155, Apps: 770, ArrivalsPerMin: perMin,
		SoftPercent: softPercent, MinSizeMI: 39_888_000, MaxSizeMI: 159_552_000, SlackMin: 1.5, SlackMax: 3,
		Failures: failures, GridMTBFMin: 30, CheckpointMin: 30, MonitorMin: 10, PredictionErrorPct: 10}
	if factor == 6 {
		sc.MinMIPS, sc.MaxMIPS = 791, 4746
	}
	return sc
}

// meanMIPS is the seed's mean machine (L1195).
const meanMIPS = 2770

// dailyLoad is the documented synthetic stand-in for the USP host-load
// vectors (L1197): the share of a machine's CPU its local user takes in
// each hour of the day; each machine scales it by its own factor.
var dailyLoad = [24]float64{
	0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.10, 0.20, 0.50, 0.50, 0.50,
	0.30, 0.30, 0.50, 0.50, 0.50, 0.50, 0.30, 0.30, 0.10, 0.10, 0.10, 0.05,
}

// DeadlineResult counts one run.
type DeadlineResult struct {
	Soft, SoftMet, Refused int
	Nice, NiceDone         int
	Migrations, Preempted  int
	MachineFailures        int
}

// SoftMetShare is the seed's metric: the share of soft-deadline tasks that
// finished by their deadline (refused ones count as missed).
func (r DeadlineResult) SoftMetShare() float64 {
	if r.Soft == 0 {
		return math.NaN()
	}
	return float64(r.SoftMet) / float64(r.Soft)
}

type dlTask struct {
	id        string
	class     policy.TaskClass
	submitMs  int64
	deadline  int64
	remaining float64 // MI
	ckpt      float64 // remaining at the last checkpoint
	ckptAtMs  int64
	doneAtMs  int64 // 0: not done
	refused   bool
	startLeft float64 // remaining when it started on its machine
	startAtMs int64   // and when
}

type dlMachine struct {
	id        string
	mips      float64
	load      [24]float64
	predicted int64 // MIPS the predictor assumes: mips × (1 − mean load)
	up        bool
	upAtMs    int64 // when it comes back, while down
	history   []policy.AvailabilityEvent
	running   *dlTask
	reserved  *dlTask
	queue     []*dlTask
}

type dlSim struct {
	sc       DeadlineScenario
	strategy DeadlineStrategy
	r        *rand.Rand
	machines []*dlMachine
	nowMs    int64
	res      DeadlineResult
}

const stepMs = 60_000

// RunDeadline simulates one run of the scenario with the strategy; the
// seed fixes machines, workload and failures, so both strategies of one
// seed see the same grid and the same tasks.
func RunDeadline(sc DeadlineScenario, strategy DeadlineStrategy, seed uint64) (DeadlineResult, error) {
	if sc.Machines <= 0 || sc.Apps <= 0 || sc.ArrivalsPerMin <= 0 || sc.MinMIPS <= 0 || sc.MaxMIPS < sc.MinMIPS ||
		sc.MinSizeMI <= 0 || sc.MaxSizeMI < sc.MinSizeMI || sc.SoftPercent < 0 || sc.SoftPercent > 100 ||
		sc.SlackMin <= 0 || sc.SlackMax < sc.SlackMin || sc.CheckpointMin <= 0 || sc.MonitorMin <= 0 ||
		sc.PredictionErrorPct < 0 || sc.PredictionErrorPct >= 100 ||
		(sc.Failures && sc.GridMTBFMin <= 0) {
		return DeadlineResult{}, fmt.Errorf("deadline scenario %+v: a count, rate, range or interval is not positive", sc)
	}
	world := rand.New(rand.NewPCG(seed, 0x5eed004))
	s := &dlSim{sc: sc, strategy: strategy, r: rand.New(rand.NewPCG(seed, uint64(strategy)))}
	for j := range sc.Machines {
		m := &dlMachine{id: fmt.Sprintf("m%03d", j), up: true,
			mips: float64(sc.MinMIPS) + world.Float64()*float64(sc.MaxMIPS-sc.MinMIPS)}
		amp, mean := 0.5+world.Float64(), 0.0
		for h, l := range dailyLoad {
			m.load[h] = min(0.9, l*amp)
			mean += m.load[h] / 24
		}
		m.predicted = max(1, int64(m.mips*(1-mean)))
		m.history = []policy.AvailabilityEvent{{AtMs: 0, Up: true}}
		s.machines = append(s.machines, m)
	}
	tasks := make([]*dlTask, sc.Apps)
	at := 0.0
	for i := range tasks {
		at += world.ExpFloat64() / sc.ArrivalsPerMin * 60_000
		size := float64(sc.MinSizeMI) + world.Float64()*float64(sc.MaxSizeMI-sc.MinSizeMI)
		t := &dlTask{id: fmt.Sprintf("t%04d", i), class: policy.Nice, submitMs: int64(at), remaining: size, ckpt: size}
		if world.IntN(100) < sc.SoftPercent {
			slack := sc.SlackMin + world.Float64()*(sc.SlackMax-sc.SlackMin)
			t.class, t.deadline = policy.SoftDeadline, t.submitMs+int64(slack*size/meanMIPS*1000)
		}
		tasks[i] = t
	}
	// Failures come from their own stream so both strategies see the same.
	fail := rand.New(rand.NewPCG(seed, 0xfa11))
	nextFailMs := int64(math.MaxInt64)
	if sc.Failures {
		nextFailMs = int64(fail.ExpFloat64() * sc.GridMTBFMin * 60_000)
	}
	horizon := int64(at) + 60*24*3600_000 // 60 days after the last arrival
	next := 0
	for s.nowMs = 0; s.nowMs <= horizon; s.nowMs += stepMs {
		for next < len(tasks) && tasks[next].submitMs <= s.nowMs {
			s.submit(tasks[next])
			next++
		}
		for sc.Failures && nextFailMs <= s.nowMs {
			s.failOne(fail)
			nextFailMs += int64(fail.ExpFloat64() * sc.GridMTBFMin * 60_000)
		}
		s.recover()
		s.progress()
		if strategy == Martins && s.nowMs%(int64(sc.MonitorMin)*60_000) == 0 {
			s.monitor()
		}
		if next == len(tasks) && s.idle() {
			break
		}
	}
	for _, t := range tasks {
		if t.class == policy.SoftDeadline {
			s.res.Soft++
			if t.refused {
				s.res.Refused++
			} else if t.doneAtMs > 0 && t.doneAtMs <= t.deadline {
				s.res.SoftMet++
			}
		} else {
			s.res.Nice++
			if t.doneAtMs > 0 {
				s.res.NiceDone++
			}
		}
	}
	return s.res, nil
}

func (s *dlSim) idle() bool {
	for _, m := range s.machines {
		if m.running != nil || m.reserved != nil || len(m.queue) > 0 {
			return false
		}
	}
	return true
}

// submit maps a new or displaced task.
func (s *dlSim) submit(t *dlTask) {
	if s.strategy == InteGrade {
		var ups []*dlMachine
		for _, m := range s.machines {
			if m.up {
				ups = append(ups, m)
			}
		}
		if len(ups) == 0 { // the whole grid is down: wait on any machine
			ups = s.machines
		}
		m := ups[s.r.IntN(len(ups))]
		m.queue = append(m.queue, t)
		s.startNext(m)
		return
	}
	mp, err := s.mapTask(t, nil)
	if err != nil {
		panic(err) // inputs are built here: an error is a bug
	}
	s.apply(t, mp)
}

// mapTask asks policy.MapDeadline; exclude is a machine the task may not
// use (the one it is migrating from).
func (s *dlSim) mapTask(t *dlTask, exclude *dlMachine) (policy.Mapping, error) {
	in := policy.DeadlineInput{NowMs: s.nowMs, Draw: s.r.Uint64(), May: make([]bool, len(s.machines)),
		Task: policy.DeadlineTask{ID: t.id, Class: t.class, SizeMFlop: max(1, int64(math.Ceil(t.remaining))), DeadlineMs: t.deadline}}
	for j, m := range s.machines {
		st, err := policy.MTBF(m.history, s.nowMs)
		if err != nil {
			return policy.Mapping{}, err
		}
		mflops := m.predicted
		if e := float64(s.sc.PredictionErrorPct) / 100; e > 0 {
			mflops = max(1, int64(float64(mflops)*(1-e+2*e*s.r.Float64())))
		}
		dm := policy.DeadlineMachine{ID: m.id, MFLOPS: mflops, MTBFMs: st.MTBFMs, Reserved: m.reserved != nil}
		if r := m.running; r != nil {
			dm.Running, dm.RunningID, dm.RemainingMFlop = r.class, r.id, int64(math.Ceil(r.remaining))
		}
		in.Machines = append(in.Machines, dm)
		in.May[j] = m.up && m != exclude
	}
	return policy.MapDeadline(in)
}

func (s *dlSim) apply(t *dlTask, mp policy.Mapping) {
	if mp.Outcome == policy.MapRefused {
		t.refused = t.class == policy.SoftDeadline
		if !t.refused { // a nice task with every machine down waits on one
			m := s.machines[s.r.IntN(len(s.machines))]
			m.queue = append(m.queue, t)
		}
		return
	}
	m := s.machines[mp.Machine]
	switch mp.Outcome {
	case policy.MapRun:
		s.start(m, t)
	case policy.MapPreemptNice:
		v := m.running
		v.remaining = v.ckpt // back to its last checkpoint
		if m.reserved == nil {
			m.reserved = v
		} else {
			m.queue = append([]*dlTask{v}, m.queue...)
		}
		s.res.Preempted++
		s.start(m, t)
	case policy.MapReserveSoft, policy.MapReserveNice:
		m.reserved = t
	case policy.MapQueueRandom:
		m.queue = append(m.queue, t)
	}
}

func (s *dlSim) start(m *dlMachine, t *dlTask) {
	m.running = t
	t.ckpt, t.ckptAtMs, t.startLeft, t.startAtMs = t.remaining, s.nowMs, t.remaining, s.nowMs
}

// startNext starts the reserved task, else the head of the queue.
func (s *dlSim) startNext(m *dlMachine) {
	if m.running != nil || !m.up {
		return
	}
	if m.reserved != nil {
		t := m.reserved
		m.reserved = nil
		s.start(m, t)
	} else if len(m.queue) > 0 {
		t := m.queue[0]
		m.queue = m.queue[1:]
		s.start(m, t)
	}
}

// progress runs one step of every up machine at its speed left by the local
// load of this hour.
func (s *dlSim) progress() {
	hour := (s.nowMs / 3600_000) % 24
	for _, m := range s.machines {
		t := m.running
		if !m.up || t == nil {
			continue
		}
		t.remaining -= m.mips * (1 - m.load[hour]) * stepMs / 1000
		if t.remaining <= 0 {
			t.remaining, t.doneAtMs, m.running = 0, s.nowMs+stepMs, nil
			s.startNext(m)
			continue
		}
		if s.nowMs+stepMs-t.ckptAtMs >= int64(s.sc.CheckpointMin)*60_000 {
			t.ckpt, t.ckptAtMs = t.remaining, s.nowMs+stepMs
		}
	}
}

// monitor is the seed's progress monitoring (§4.1.3, L957): a soft task
// whose rate observed since it started on its machine (at least MonitorMin
// of it) predicts a miss is checkpointed
// and moved to a machine where it starts now and meets its deadline, if
// there is one; otherwise it stays.
func (s *dlSim) monitor() {
	for _, m := range s.machines {
		t := m.running
		if t == nil || t.class != policy.SoftDeadline || !m.up || s.nowMs-t.startAtMs < int64(s.sc.MonitorMin)*60_000 {
			continue
		}
		rate := (t.startLeft - t.remaining) / float64(s.nowMs-t.startAtMs) * 1000 // MI per second
		if rate <= 0 || float64(s.nowMs)+t.remaining/rate*1000 <= float64(t.deadline) {
			continue
		}
		mp, err := s.mapTask(t, m)
		if err != nil {
			panic(err)
		}
		if mp.Outcome != policy.MapRun && mp.Outcome != policy.MapPreemptNice {
			continue
		}
		m.running = nil
		s.res.Migrations++
		s.apply(t, mp) // it checkpoints as it leaves: no work lost
		s.startNext(m)
	}
}

// failOne takes a random up machine down: its running task falls back to
// its last checkpoint, and every task on it is mapped again.
func (s *dlSim) failOne(r *rand.Rand) {
	var ups []*dlMachine
	for _, m := range s.machines {
		if m.up {
			ups = append(ups, m)
		}
	}
	if len(ups) == 0 {
		return
	}
	m := ups[r.IntN(len(ups))]
	meanH := 0.166 + r.Float64()*(30-0.166)
	m.up, m.upAtMs = false, s.nowMs+int64(r.ExpFloat64()*meanH*3600_000)
	m.history = append(m.history, policy.AvailabilityEvent{AtMs: s.nowMs})
	s.res.MachineFailures++
	var displaced []*dlTask
	if t := m.running; t != nil {
		t.remaining = t.ckpt
		displaced = append(displaced, t)
	}
	if m.reserved != nil {
		displaced = append(displaced, m.reserved)
	}
	displaced = append(displaced, m.queue...)
	m.running, m.reserved, m.queue = nil, nil, nil
	for _, t := range displaced {
		s.submit(t)
	}
}

func (s *dlSim) recover() {
	for _, m := range s.machines {
		if !m.up && m.upAtMs <= s.nowMs {
			m.up = true
			m.history = append(m.history, policy.AvailabilityEvent{AtMs: s.nowMs, Up: true})
			s.startNext(m)
		}
	}
}

// RunDeadlineMany runs seeds 1..runs of a scenario with a strategy and
// summarises the share of soft deadlines met.
func RunDeadlineMany(sc DeadlineScenario, strategy DeadlineStrategy, runs int) (Stat, []DeadlineResult, error) {
	var shares []float64
	var all []DeadlineResult
	for seed := uint64(1); seed <= uint64(runs); seed++ {
		r, err := RunDeadline(sc, strategy, seed)
		if err != nil {
			return Stat{}, nil, err
		}
		shares = append(shares, r.SoftMetShare())
		all = append(all, r)
	}
	return NewStat(shares), all, nil
}
