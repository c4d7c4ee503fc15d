package ledger

import (
	"fmt"
	"math"
	"math/bits"
)

// Executors earn trust (issue 15). The executing peer reports what its
// runs did: when they started and ended, the energy they drew, the work a
// checkpoint saves. Those figures come from the machine's owner, who may
// lie. The ledger cannot measure anything itself, but it can refuse what
// the owner's own declarations make impossible, deterministically, from
// the command's times and the ledger state only:
//
//   - energy: a run's reported energy is at most its machine's declared
//     busy power over the run, plus PlausibleSlackMs, times
//     EnergyMarginPercent;
//   - time: a run reported done cannot have been shorter than its work at
//     the machine's declared speed divided by SpeedMargin, less
//     PlausibleSlackMs; a checkpoint cannot save more work than that speed
//     allows in the time the run has had;
//   - the simulated energy source is refused on a live federation;
//   - a machine cannot be declared more efficient than MaxMFLOPSPerMilliW;
//   - each machine's completed runs are observed, and its effective speed
//     (EffectiveMFLOPS), which the policy view uses, is corrected down when
//     enough of them show it slower than declared;
//   - an organisation cannot hold more than Rules.MaxQueuedPerOrg
//     unfinished tasks.
//
// Every rule applies only on a federation that has Rules (the first
// registration fixed them): a log or snapshot from before them replays to
// the same state and the same hash. docs/SECURITY.md ("Executors") says what
// a lying executor can still do.

// ExecutorMode says whether the federation's executors run real work.
type ExecutorMode string

const (
	// ExecutorsLive: real executors. The simulated energy source is
	// refused, and every plausibility rule applies.
	ExecutorsLive ExecutorMode = "live"
	// ExecutorsSimulated: a demonstration or test federation of simulated
	// executors, which compress time. Simulated reports are exempt from
	// the energy, time and progress rules (nothing there is real); runs
	// are still observed and the other rules apply.
	ExecutorsSimulated ExecutorMode = "simulated"
)

func (m ExecutorMode) valid() bool { return m == ExecutorsLive || m == ExecutorsSimulated }

// Rules are the federation's rules on executors and queues. The first
// register_org of a federation fixes them (RegisterOrg.Rules; `peer init
// --new-federation` sends them from the bootstrapping peer's executor
// kind); a federation whose first registration carried none keeps the
// rules from before issue 15 (no plausibility checks, no queue cap), so
// that its log replays to the same hash.
type Rules struct {
	// Executors is live or simulated.
	Executors ExecutorMode `json:"executors"`
	// MaxQueuedPerOrg caps an organisation's unfinished (not done,
	// failed or cancelled) tasks. In a command 0 means
	// DefaultMaxQueuedPerOrg; the ledger stores the figure it applies.
	MaxQueuedPerOrg int64 `json:"max_queued_per_org,omitempty"`
	// Scheduling, when set, makes every peer compute each scheduling pass
	// from a schedule trigger, with these settings, and refuses decisions
	// batches (schedule.go). Omitted when unset: rules from before it
	// encode, hash and behave as before (the leader proposes decisions).
	Scheduling *Scheduling `json:"scheduling,omitempty"`
	// Retention, when set, lets terminal tasks leave the replicated state
	// (retention.go). Omitted when unset: every task is kept, as before.
	Retention *Retention `json:"retention,omitempty" since:"2"`
	// RunBounds, when set, bounds a run's start below by what the ledger
	// already holds of its task: its submission time and the end of its
	// previous run. A start is stamped on the executing peer's clock, and
	// a clock stepped back (the chaos harness's clock-jump-leader: one
	// hour) otherwise credits the run, once lost, an hour of energy. Only
	// federations whose first registration set it (this build's `peer
	// init --new-federation`) apply it: older logs replay as before.
	RunBounds bool `json:"run_bounds,omitempty" since:"3"`
}

// The documented margins of the plausibility rules.
const (
	// DefaultMaxQueuedPerOrg is the queue cap of a federation whose rules
	// name none; MaxQueuedPerOrgLimit bounds what rules may name.
	DefaultMaxQueuedPerOrg = 100_000
	MaxQueuedPerOrgLimit   = 10_000_000
	// EnergyMarginPercent: a run may report up to 150 % of its machine's
	// declared busy power over its duration (RAPL counts the whole
	// package, and declared figures are estimates).
	EnergyMarginPercent = 150
	// PlausibleSlackMs is added to every run's duration for the energy
	// and time rules: a report's time is its proposer's clock when the
	// report was committed, which lags the event by up to a leader
	// election or a retry; short runs are dominated by it.
	PlausibleSlackMs = 60_000
	// SpeedMargin: a run may do its work up to 4 times faster than its
	// machine's declared speed allows (tasks' sizes are their submitters'
	// estimates).
	SpeedMargin = 4
	// MaxMFLOPSPerMilliW bounds a machine's declared efficiency: 10,000
	// GFLOPS per watt, well above any hardware's peak (1 MFLOPS/mW is
	// 1 GFLOPS/W).
	MaxMFLOPSPerMilliW = 10_000
	// ObserveMinRunMs: runs shorter than this are not observed (report
	// latency would dominate them); ObserveMinRuns observed runs are
	// needed before the effective speed departs from the declared one.
	ObserveMinRunMs = 5_000
	ObserveMinRuns  = 3
)

// normalized is r as the ledger stores it.
func (r Rules) normalized() *Rules {
	if r.MaxQueuedPerOrg == 0 {
		r.MaxQueuedPerOrg = DefaultMaxQueuedPerOrg
	}
	if r.Scheduling != nil {
		r.Scheduling = r.Scheduling.normalized()
	}
	return &r
}

func (r *Rules) validate() *Error {
	if !r.Executors.valid() {
		return errf(CodeMalformed, "rules: executors %q: want live or simulated", r.Executors)
	}
	if r.MaxQueuedPerOrg < 0 || r.MaxQueuedPerOrg > MaxQueuedPerOrgLimit {
		return errf(CodeMalformed, "rules: max_queued_per_org %d out of range [0, %d]", r.MaxQueuedPerOrg, int64(MaxQueuedPerOrgLimit))
	}
	if r.Retention != nil {
		if err := r.Retention.validate(); err != nil {
			return err
		}
	}
	if r.Scheduling != nil {
		return r.Scheduling.validate()
	}
	return nil
}

// Rules returns the federation's rules, ok false on a federation from
// before them.
func (l *Ledger) Rules() (Rules, bool) {
	if l.rules == nil {
		return Rules{}, false
	}
	r := *l.rules
	if r.Scheduling != nil {
		s := *r.Scheduling
		r.Scheduling = &s
	}
	if r.Retention != nil {
		k := *r.Retention
		r.Retention = &k
	}
	return r, true
}

func (l *Ledger) live() bool { return l.rules != nil && l.rules.Executors == ExecutorsLive }

// checkRegistration checks a registration against the rules it would
// apply under: the federation's, or the ones a first registration brings.
func (l *Ledger) checkRegistration(b *RegisterOrg) *Error {
	rules := l.rules
	if len(l.orgs) == 0 && b.Rules != nil {
		rules = b.Rules
	}
	if rules == nil {
		return nil
	}
	if b.Rules != nil && b.Rules.Executors != rules.Executors {
		return errf(CodeExecutorMode, "the federation's executors are %s; this organisation's are %s", rules.Executors, b.Rules.Executors)
	}
	for _, s := range b.Machines {
		if err := checkEfficiency(s); err != nil {
			return err
		}
	}
	return nil
}

// checkEfficiency refuses a machine declared faster per watt than any
// hardware: 10⁶ GFLOPS at 1 mW would make every task's energy estimate
// vanish and attract every task.
func checkEfficiency(s MachineSpec) *Error {
	// Both figures are bounded by validate: the product fits in int64.
	if s.MFLOPS > s.BusyMilliW*MaxMFLOPSPerMilliW {
		return errf(CodeImplausible, "machine %q: %d MFLOPS at %d mW is more than %d GFLOPS per watt",
			s.Name, s.MFLOPS, s.BusyMilliW, MaxMFLOPSPerMilliW)
	}
	return nil
}

// checkQueue refuses n more unfinished tasks for o over the cap.
func (l *Ledger) checkQueue(o *Org, n int) *Error {
	if l.rules == nil {
		return nil
	}
	if have := l.unfinished[o.Name]; have+int64(n) > l.rules.MaxQueuedPerOrg {
		return errf(CodeQueueFull, "organisation %q has %d unfinished tasks; %d more would exceed the federation's cap of %d",
			o.Name, have, n, l.rules.MaxQueuedPerOrg)
	}
	return nil
}

// exempt says whether a report of source src escapes the energy and time
// rules: everywhere before the rules, and for simulated figures on a
// simulated federation.
func (l *Ledger) exempt(src EnergySource) bool {
	return l.rules == nil || (src == EnergySimulated && l.rules.Executors == ExecutorsSimulated)
}

// checkRun checks a report closing segment s of task t on machine m at
// endMs with mj of energy from src; done says the report claims the task's
// work complete.
func (l *Ledger) checkRun(t *Task, s *Segment, m *Machine, endMs, mj int64, src EnergySource, done bool) *Error {
	if l.rules == nil {
		return nil
	}
	if src == EnergySimulated && l.live() {
		return errf(CodeImplausible, "task %s on %q: simulated energy on a live federation", t.ID, m.ID)
	}
	if l.exempt(src) {
		return nil
	}
	if limit := maxEnergyMilliJ(m.BusyMilliW, s.StartMs, endMs); mj > limit {
		return errf(CodeImplausible, "task %s on %q: %d mJ over %d ms is more than %d mJ (%d %% of the declared %d mW, with %d s of slack)",
			t.ID, m.ID, mj, runMs(s, endMs), limit, EnergyMarginPercent, m.BusyMilliW, PlausibleSlackMs/1000)
	}
	if !done {
		return nil
	}
	work := t.SizeMFlop - s.FromMFlop
	if need := minRunMs(work, m.MFLOPS); runMs(s, endMs) < need {
		return errf(CodeImplausible, "task %s on %q: done after %d ms; %d MFlop at the declared %d MFLOPS take at least %d ms (a %d× margin and %d s of slack)",
			t.ID, m.ID, runMs(s, endMs), work, m.MFLOPS, need, SpeedMargin, PlausibleSlackMs/1000)
	}
	return nil
}

// checkProgress checks that a checkpoint taken at atMs during segment s
// of task t on machine m may save progress MFlop: the run cannot have done
// more than SpeedMargin times the declared speed allows since it started
// (from its starting point, Segment.FromMFlop).
func (l *Ledger) checkProgress(t *Task, s *Segment, m *Machine, atMs, progress int64) *Error {
	if !l.live() {
		return nil
	}
	work := progress - s.FromMFlop
	if limit := maxWorkMFlop(m.MFLOPS, runMs(s, atMs)); work > limit {
		return errf(CodeImplausible, "task %s on %q: a checkpoint saving %d MFlop of this run after %d ms; the declared %d MFLOPS allow at most %d (a %d× margin and %d s of slack)",
			t.ID, m.ID, work, runMs(s, atMs), m.MFLOPS, limit, SpeedMargin, PlausibleSlackMs/1000)
	}
	return nil
}

// runMs is the segment's duration up to endMs, never negative.
func runMs(s *Segment, endMs int64) int64 { return max(endMs-s.StartMs, 0) }

// maxEnergyMilliJ is the most energy a run from startMs to endMs may
// report: busy × (duration + slack) × EnergyMarginPercent / 100.
func maxEnergyMilliJ(busyMilliW, startMs, endMs int64) int64 {
	end := max(endMs, startMs) + PlausibleSlackMs
	return mulDiv(declaredMilliJ(busyMilliW, startMs, end), EnergyMarginPercent, 100)
}

// minRunMs is the shortest plausible run doing work MFlop at mflops:
// work / (mflops × SpeedMargin), in ms, less the slack.
func minRunMs(work, mflops int64) int64 {
	if work <= 0 || mflops <= 0 {
		return 0
	}
	return mulDiv(work, 1000, mflops*SpeedMargin) - PlausibleSlackMs
}

// maxWorkMFlop is the most work a run of ms at mflops may claim:
// mflops × SpeedMargin × (ms + slack) / 1000.
func maxWorkMFlop(mflops, ms int64) int64 {
	return mulDiv(mflops*SpeedMargin, ms+PlausibleSlackMs, 1000)
}

// mulDiv is a × b / c for non-negative a, b and positive c, saturating at
// MaxInt64 rather than overflowing.
func mulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// observe records a completed run of machine m: work MFlop in ms. Runs
// shorter than ObserveMinRunMs are not counted. Sums about to overflow
// are halved first, which keeps their ratio.
func (m *Machine) observe(work, ms int64) {
	if work <= 0 || ms < ObserveMinRunMs {
		return
	}
	const ceiling = 1 << 62
	for m.ObservedMFlop > ceiling-work || m.ObservedMs > ceiling-ms {
		m.ObservedMFlop /= 2
		m.ObservedMs /= 2
	}
	m.ObservedMFlop += work
	m.ObservedMs += ms
	if m.ObservedRuns < math.MaxInt64 {
		m.ObservedRuns++
	}
}

// ObservedMFLOPS is the machine's speed over its observed runs (total
// work / total run time), capped at MaxMFLOPS; 0 before any.
func (m *Machine) ObservedMFLOPS() int64 {
	if m.ObservedMs <= 0 {
		return 0
	}
	return min(mulDiv(m.ObservedMFlop, 1000, m.ObservedMs), MaxMFLOPS)
}

// EffectiveMFLOPS is the speed the policy view gives the machine: the
// declared MFLOPS, or, once ObserveMinRuns runs were observed and they
// show it slower than 3/4 of it, the observed speed. Never above the
// declared figure, never below 1.
func (m *Machine) EffectiveMFLOPS() int64 {
	if m.ObservedRuns < ObserveMinRuns {
		return m.MFLOPS
	}
	obs := m.ObservedMFLOPS()
	if obs*4 >= m.MFLOPS*3 {
		return m.MFLOPS
	}
	return max(obs, 1)
}

// SpeedMismatch says the observed runs show the machine at less than half
// its declared speed: a large mismatch, flagged in the API and `peer
// ledger` output.
func (m *Machine) SpeedMismatch() bool {
	return m.ObservedRuns >= ObserveMinRuns && m.ObservedMFLOPS()*2 < m.MFLOPS
}

// checkRulesState checks the stored rules and observations (invariants).
func (l *Ledger) checkRulesState(fail func(string, ...any)) {
	if l.rules != nil {
		if err := l.rules.validate(); err != nil || l.rules.MaxQueuedPerOrg == 0 {
			fail("rules %+v: %v", *l.rules, err)
		}
	}
	for _, id := range sortedKeys(l.machines) {
		m := l.machines[id]
		if m.ObservedRuns < 0 || m.ObservedMFlop < 0 || m.ObservedMs < 0 || (m.ObservedRuns == 0) != (m.ObservedMs == 0) {
			fail("machine %q: observations %d runs, %d MFlop, %d ms", id, m.ObservedRuns, m.ObservedMFlop, m.ObservedMs)
		}
	}
	unfinished := map[string]int64{}
	for _, t := range l.bySeq {
		if !t.State.Terminal() {
			unfinished[t.Org]++
		}
		for i, s := range t.Segments {
			if s.FromMFlop < 0 || s.FromMFlop > t.SizeMFlop {
				fail("task %s: segment %d starts from %d MFlop of %d", t.ID, i, s.FromMFlop, t.SizeMFlop)
			}
		}
	}
	for _, n := range sortedKeys(l.unfinished) {
		if l.unfinished[n] != unfinished[n] {
			fail("organisation %q: %d unfinished tasks kept, %d counted", n, l.unfinished[n], unfinished[n])
		}
	}
	for _, n := range sortedKeys(unfinished) {
		if l.unfinished[n] != unfinished[n] {
			fail("organisation %q: %d unfinished tasks counted, %d kept", n, unfinished[n], l.unfinished[n])
		}
	}
}

// String names the rules for messages and `peer ledger`.
func (r Rules) String() string {
	return fmt.Sprintf("executors %s, at most %d unfinished tasks per organisation", r.Executors, r.MaxQueuedPerOrg)
}

// observeDone records segment i of task t, just closed done on machine m,
// as an observed run of m (on a federation with rules).
func (l *Ledger) observeDone(t *Task, i int, m *Machine) {
	if l.rules == nil {
		return
	}
	s := &t.Segments[i]
	was := m.EffectiveMFLOPS()
	m.observe(t.SizeMFlop-s.FromMFlop, s.EndMs-s.StartMs)
	if m.EffectiveMFLOPS() != was { // a corrected speed: the view's changed
		l.machinesChanged()
	}
}
