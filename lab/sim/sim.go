// Package sim is a discrete-event simulator that drives a policy.Policy the
// way the federation's Raft leader does (POLICY.md §4 "Triggers"): a virtual
// clock in float64 seconds, and a scheduling pass after every instant at
// which a task arrives or completes, plus a periodic tick.
//
// One run is a plain sequential loop: no goroutines, no clock, no map
// iteration, so the same Instance and the same policy give the same Result
// bit for bit. RunMany runs independent runs of one case in parallel and
// aggregates them in run order, so its Summary does not depend on the number
// of workers.
//
// That is the default engine. Config.Engine = EngineISPD selects the
// author's iSPD semantics instead (ispd.go): one decision per scheduler
// call, calls on completions and on arrivals at an idle master, machines
// blocked for two 15 s status updates, and no checkpoint kept.
//
// Choices made here (POLICY.md leaves them to the simulator):
//
//   - Within one instant, completions are applied first (in machine order),
//     then arrivals (in submission order), then one pass. A tick at an
//     instant with nothing queued is skipped: every decision places a
//     queued task, so that pass could only return nothing.
//   - A preempted task keeps floor(run/B)·B·d MFlop with checkpoint blocks of
//     B seconds (eq. 3.7), nothing without (eq. 3.8); it returns to the queue
//     with its original submission order (policy.Task.Seq).
//   - T, the simulated time of the metrics, is the last completion counted
//     from time 0.
//   - EHOSEP satisfaction: when nobody used an organisation's machines
//     (LocalJ_i = 0) α_i = PowerQuota_i·T/LocalJ_i is unbounded; that run's
//     α and satisfaction for the organisation are NaN and left out of the
//     means over runs (Stat.N counts the runs that remain), rather than
//     capped at an arbitrary value.
//   - Bounded slowdown uses te = the task's total time on machines, wasted
//     segments included.
//   - On machines with resources (docs/SCENARIOS.md, "Machines with
//     resources, tasks with requests") several tasks run at once; a task
//     runs at its share of the machine's computing power and is booked its
//     share of its draw (policy.Share: ⌈share·d⌉ MFLOPS, ⌈share·c⌉ mW), as
//     the ledger counts it. On one-slot machines every share is whole and
//     the figures are the papers'.
package sim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// DefaultTickSeconds is the period of the scheduler in seed 000 (L645).
const DefaultTickSeconds = 30

// DefaultCheckpointBlockSeconds is the dissertation's checkpoint block: five
// minutes of execution (L1182).
const DefaultCheckpointBlockSeconds = 300

// BoundedSlowdownTau is τ of the bounded slowdown tt / max(te, τ) (seed 002,
// with the τ = 10 s that POLICY.md §5 names).
const BoundedSlowdownTau = 10

// BoundedSlowdownTau100 is seed 002's other τ (POLICY.md §8: τ = 10 and
// 100).
const BoundedSlowdownTau100 = 100

// The disagreement accepted between the work a policy says a preempted task
// keeps and the simulator's own figure: both come from the same run time,
// but by different float expressions (the policy's run·d − (run mod B)·d
// against floor(run/B)·B·d), and the simulator rounds down to whole MFlop.
const (
	keptRelTolerance = 1e-9
	keptAbsTolerance = 1
)

// Config sets how a run drives the policy. The zero Config is valid: no
// periodic tick, no checkpointing. DefaultConfig gives the dissertation's
// setting.
type Config struct {
	// TickSeconds is the period of the scheduling tick: a pass runs at every
	// multiple of it (counted from time 0) while tasks are waiting. 0
	// disables the tick, leaving only arrivals and completions as triggers.
	TickSeconds float64
	// CheckpointBlockSeconds is the checkpoint block B, as seconds of
	// execution on the machine (seed 000 eq. 3.7): a preempted task keeps
	// floor(run/B)·B·d MFlop. 0 means no checkpointing (eq. 3.8): a
	// preempted task keeps nothing of its last segment.
	CheckpointBlockSeconds float64
	// CheckInvariants re-derives the simulator's bookkeeping from scratch
	// after every pass (each running task on exactly one machine, no
	// machine's tasks asking together for more than its capacity, the
	// incremental per-organisation power equal to the recomputed one). It costs O(machines + tasks) per
	// pass; tests turn it on.
	CheckInvariants bool
	// EnforceLimits makes a pass that leaves any organisation with
	// PI_i > Lim_i an error. EHOSEP guarantees it (seed 000 L917-999); OSEP
	// and HOSEP ignore limits, so leave it off for them.
	EnforceLimits bool
	// MaxSeconds stops a run that has not finished by this virtual time with
	// an error (a policy that keeps preempting would otherwise never end).
	// 0 means no bound.
	MaxSeconds float64
	// Trace, if set, receives every applied decision and every completion,
	// synchronously and in order. RunMany passes it to run 0 only.
	Trace func(TraceEvent)
	// OnRun, if set, receives each run's full result (task records
	// included) as RunMany finishes it, from the worker goroutines and in
	// no particular order; the Summary keeps task records of run 0 only.
	OnRun func(run int, r *Result)
	// Engine is EngineDefault ("" means the same) or EngineISPD, the
	// author's iSPD semantics (ispd.go), which ignores TickSeconds and
	// CheckpointBlockSeconds.
	Engine string
}

// DefaultConfig is the setting of the dissertation's experiments without
// checkpointing: a 30 s tick.
func DefaultConfig() Config { return Config{TickSeconds: DefaultTickSeconds} }

func (c Config) validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"tick", c.TickSeconds},
		{"checkpoint block", c.CheckpointBlockSeconds},
		{"max seconds", c.MaxSeconds},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("sim config: %s %v s: must be a finite number ≥ 0", f.name, f.v)
		}
	}
	switch c.Engine {
	case "", EngineDefault, EngineISPD:
	default:
		return fmt.Errorf("sim config: unknown engine %q (want %s or %s)", c.Engine, EngineDefault, EngineISPD)
	}
	return nil
}

type taskStatus uint8

const (
	pending taskStatus = iota // not yet submitted
	queued
	running
	done
)

// taskState is the simulator's view of one task. Indices are positions in
// submission order, which is also policy.Task.Seq.
type taskState struct {
	spec      scenario.TaskSpec
	status    taskStatus
	remaining int64 // MFlop still to do at the start of the current segment
	machine   int   // while running
	segStart  float64
	segID     uint32  // increments at every start, to drop stale completions
	queuePos  int     // index in sim.queue while queued
	firstRun  float64 // NaN until first started
	completed float64
	preempted int
	runSec    float64 // total time on machines, all segments
	energyJ   float64 // as user, all segments
	wasted    float64 // MFlop lost to preemptions
	doneOn    int     // the machine that completed it
	// mflops and milliW are what the current (or last) segment counts
	// for: its share of the machine's computing power, at which it runs,
	// and of its draw, which it is booked (policy.Share; the whole
	// machine's figures on a one-slot machine).
	mflops, milliW int64
}

// completion is a pending end of segment. Stale entries (their task was
// preempted) are dropped when popped.
type completion struct {
	at      float64
	machine int
	task    int
	segID   uint32
}

type completionHeap []completion

func (h completionHeap) Len() int { return len(h) }
func (h completionHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	if h[i].machine != h[j].machine {
		return h[i].machine < h[j].machine // deterministic tie-break
	}
	return h[i].task < h[j].task // tasks sharing a machine
}
func (h completionHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *completionHeap) Push(x any)   { *h = append(*h, x.(completion)) }
func (h *completionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type simulator struct {
	inst   *scenario.Instance
	pol    policy.Policy
	cfg    Config
	tasks  []taskState
	byID   map[string]int // lookups only, never iterated
	onMach [][]int        // task indices per machine, in start order
	used   []policy.Resources
	busyS  []float64 // seconds per machine running at least one task
	busyAt []float64 // when the machine last went from no task to one
	queue  []int     // queued task indices, order deterministic
	heap   completionHeap
	nextAr int // next task to arrive
	now    float64

	piMilliW []int64 // per org, machines running its tasks
	// fed is the machines prepared once for every pass of the run (the
	// machines never change during a run); nil if preparing failed, in
	// which case the policy validates and reports the problem itself.
	fed     *policy.Federation
	userJ   []float64
	ownerJ  []float64
	prempts []int // per org, as victim
	gained  []int // per org, preemptions made to place its tasks
	wasted  []float64

	passes, decisions, completedN int
	nRunning                      int

	// reused across passes so that building a State allocates nothing
	stQueued  []policy.Task
	stRunning []policy.Running
}

// Run simulates one instance under one policy and returns its metrics. An
// invalid instance, an invalid decision from the policy (a machine that is
// not free, a task that is not queued, a wrong victim, a kept amount that
// disagrees with eq. 3.7/3.8), or a run that cannot finish is an error.
func Run(ctx context.Context, inst *scenario.Instance, p policy.Policy, cfg Config) (*Result, error) {
	if p == nil {
		return nil, fmt.Errorf("sim: nil policy")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := validateInstance(inst); err != nil {
		return nil, err
	}
	if cfg.Engine == EngineISPD && !inst.OneSlot() {
		return nil, fmt.Errorf("sim: instance %q: the iSPD engine places one task per machine; this instance has machines with cpus, memory, gpus or an owner policy, or tasks with requests: use the default engine", inst.Name)
	}
	s := newSimulator(inst, p, cfg)
	loop := s.loop
	if cfg.Engine == EngineISPD {
		loop = func(ctx context.Context) error { return runISPD(ctx, s) }
	}
	if err := loop(ctx); err != nil {
		return nil, fmt.Errorf("sim %s/%s: %w", inst.Name, p.Name(), err)
	}
	return s.result(), nil
}

func validateInstance(inst *scenario.Instance) error {
	if inst == nil {
		return fmt.Errorf("sim: nil instance")
	}
	name := inst.Name
	if len(inst.Orgs) == 0 {
		return fmt.Errorf("sim: instance %q: no organisations", name)
	}
	orgNames := make(map[string]struct{}, len(inst.Orgs))
	owns := make([]int, len(inst.Orgs))
	for i, o := range inst.Orgs {
		if _, dup := orgNames[o.Name]; dup {
			return fmt.Errorf("sim: instance %q: orgs[%d]: duplicate name %q", name, i, o.Name)
		}
		orgNames[o.Name] = struct{}{}
		if o.LimitMilliW < 0 {
			return fmt.Errorf("sim: instance %q: org %q: limit %d mW < 0", name, o.Name, o.LimitMilliW)
		}
	}
	if len(inst.IdleMilliW) != 0 && len(inst.IdleMilliW) != len(inst.Machines) {
		return fmt.Errorf("sim: instance %q: %d idle draws for %d machines", name, len(inst.IdleMilliW), len(inst.Machines))
	}
	mids := make(map[string]struct{}, len(inst.Machines))
	for i, m := range inst.Machines {
		if m.Owner < 0 || m.Owner >= len(inst.Orgs) {
			return fmt.Errorf("sim: instance %q: machine %q: owner index %d out of range", name, m.ID, m.Owner)
		}
		if m.MFLOPS <= 0 || m.BusyMilliW <= 0 {
			return fmt.Errorf("sim: instance %q: machine %q: power %d MFLOPS and draw %d mW must be > 0", name, m.ID, m.MFLOPS, m.BusyMilliW)
		}
		if len(inst.IdleMilliW) != 0 && inst.IdleMilliW[i] < 0 {
			return fmt.Errorf("sim: instance %q: machine %q: idle draw %d mW < 0", name, m.ID, inst.IdleMilliW[i])
		}
		if _, dup := mids[m.ID]; dup {
			return fmt.Errorf("sim: instance %q: machines[%d]: duplicate id %q", name, i, m.ID)
		}
		mids[m.ID] = struct{}{}
		owns[m.Owner]++
	}
	for i, n := range owns {
		if n == 0 {
			// Quota_i = 0 leaves DP, CSQ and both satisfactions undefined.
			return fmt.Errorf("sim: instance %q: org %q owns no machine", name, inst.Orgs[i].Name)
		}
	}
	tids := make(map[string]struct{}, len(inst.Tasks))
	for i, t := range inst.Tasks {
		if t.ID == "" {
			return fmt.Errorf("sim: instance %q: tasks[%d]: empty id", name, i)
		}
		if _, dup := tids[t.ID]; dup {
			return fmt.Errorf("sim: instance %q: tasks[%d]: duplicate id %q", name, i, t.ID)
		}
		tids[t.ID] = struct{}{}
		if t.Org < 0 || t.Org >= len(inst.Orgs) {
			return fmt.Errorf("sim: instance %q: task %q: org index %d out of range", name, t.ID, t.Org)
		}
		if t.SizeMFlop <= 0 {
			return fmt.Errorf("sim: instance %q: task %q: size %d MFlop must be > 0", name, t.ID, t.SizeMFlop)
		}
		if math.IsNaN(t.SubmitSeconds) || math.IsInf(t.SubmitSeconds, 0) || t.SubmitSeconds < 0 {
			return fmt.Errorf("sim: instance %q: task %q: submit time %v s must be finite and ≥ 0", name, t.ID, t.SubmitSeconds)
		}
	}
	return nil
}

func newSimulator(inst *scenario.Instance, p policy.Policy, cfg Config) *simulator {
	nO, nM, nT := len(inst.Orgs), len(inst.Machines), len(inst.Tasks)
	// Submission order: by submit time, then by position in the instance
	// (scenario.Instance promises this order already; sorting keeps
	// hand-built instances honest).
	order := make([]int, nT)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(inst.Tasks[a].SubmitSeconds, inst.Tasks[b].SubmitSeconds)
	})
	s := &simulator{
		inst:     inst,
		pol:      p,
		cfg:      cfg,
		tasks:    make([]taskState, nT),
		byID:     make(map[string]int, nT),
		onMach:   make([][]int, nM),
		used:     make([]policy.Resources, nM),
		busyS:    make([]float64, nM),
		busyAt:   make([]float64, nM),
		queue:    make([]int, 0, nT),
		heap:     make(completionHeap, 0, nM),
		piMilliW: make([]int64, nO),
		userJ:    make([]float64, nO),
		ownerJ:   make([]float64, nO),
		prempts:  make([]int, nO),
		gained:   make([]int, nO),
		wasted:   make([]float64, nO),
	}
	for i, k := range order {
		spec := inst.Tasks[k]
		s.tasks[i] = taskState{spec: spec, remaining: spec.SizeMFlop, machine: -1, queuePos: -1, firstRun: math.NaN()}
		s.byID[spec.ID] = i
	}
	s.fed, _ = policy.NewFederation(nO, inst.Machines)
	return s
}

// loop advances the clock from instant to instant. At each instant it first
// applies every completion and arrival due then, and then runs one pass.
func (s *simulator) loop(ctx context.Context) error {
	nT := len(s.tasks)
	for iter := 0; s.completedN < nT; iter++ {
		if iter&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("at t=%g s: %w", s.now, err)
			}
		}
		next := math.Inf(1)
		if s.nextAr < nT {
			next = s.tasks[s.nextAr].spec.SubmitSeconds
		}
		// Drop the completions of preempted segments first, so that they
		// neither trigger a pass nor count as work in progress.
		for len(s.heap) > 0 && s.stale(s.heap[0]) {
			heap.Pop(&s.heap)
		}
		if len(s.heap) > 0 {
			next = math.Min(next, s.heap[0].at)
		}
		tick := false
		if s.cfg.TickSeconds > 0 && len(s.queue) > 0 {
			// A tick with nothing queued is skipped: every decision places
			// a queued task, so the pass could only return nothing.
			t := (math.Floor(s.now/s.cfg.TickSeconds) + 1) * s.cfg.TickSeconds
			if t <= next {
				next, tick = t, true
			}
		}
		if math.IsInf(next, 1) {
			return fmt.Errorf("at t=%g s: %d tasks never completed and nothing is pending (internal error)", s.now, nT-s.completedN)
		}
		if s.cfg.MaxSeconds > 0 && next > s.cfg.MaxSeconds {
			return fmt.Errorf("not finished by t=%g s (max seconds): %d of %d tasks completed", s.cfg.MaxSeconds, s.completedN, nT)
		}
		s.now = next
		_ = tick // a tick only triggers the pass below
		for len(s.heap) > 0 && s.heap[0].at == s.now {
			if c := heap.Pop(&s.heap).(completion); !s.stale(c) {
				s.complete(c.task)
			}
		}
		for s.nextAr < nT && s.tasks[s.nextAr].spec.SubmitSeconds == s.now {
			s.enqueue(s.nextAr)
			s.nextAr++
		}
		if len(s.queue) == 0 {
			continue
		}
		if err := s.pass(); err != nil {
			return err
		}
		if len(s.queue) > 0 && s.nRunning == 0 && s.nextAr == nT {
			// Nothing runs and nothing will arrive: the state, run times
			// included, is the same at every later tick, so a deterministic
			// policy will never place these tasks.
			return fmt.Errorf("stuck at t=%g s: %d tasks queued, none running, none to arrive; policy %s places nothing (a limit below every machine's draw?)",
				s.now, len(s.queue), s.pol.Name())
		}
	}
	return nil
}

// stale says c ends a segment that was preempted.
func (s *simulator) stale(c completion) bool {
	t := &s.tasks[c.task]
	return t.status != running || t.machine != c.machine || t.segID != c.segID
}

func (s *simulator) enqueue(ti int) {
	t := &s.tasks[ti]
	t.status = queued
	t.queuePos = len(s.queue)
	s.queue = append(s.queue, ti)
}

func (s *simulator) dequeue(ti int) {
	t := &s.tasks[ti]
	last := s.queue[len(s.queue)-1]
	s.queue[t.queuePos] = last
	s.tasks[last].queuePos = t.queuePos
	s.queue = s.queue[:len(s.queue)-1]
	t.queuePos = -1
}

// state builds the policy's view of now. The slices are reused between
// passes; the policy only reads them during Schedule.
func (s *simulator) state() *policy.State {
	q := s.stQueued[:0]
	for _, ti := range s.queue {
		t := &s.tasks[ti]
		q = append(q, t.policyTask(ti))
	}
	r := s.stRunning[:0]
	for m, on := range s.onMach {
		for _, ti := range on {
			t := &s.tasks[ti]
			r = append(r, policy.Running{Task: t.policyTask(ti), Machine: m, RunSeconds: s.now - t.segStart})
		}
	}
	s.stQueued, s.stRunning = q, r
	return &policy.State{
		Orgs:                   s.inst.Orgs,
		Machines:               s.inst.Machines,
		Federation:             s.fed,
		Queued:                 q,
		Running:                r,
		CheckpointBlockSeconds: s.cfg.CheckpointBlockSeconds,
	}
}

// policyTask is task ti as the policy sees it.
func (t *taskState) policyTask(ti int) policy.Task {
	return policy.Task{ID: t.spec.ID, Org: t.spec.Org, SizeMFlop: t.remaining, Seq: uint64(ti),
		Request: t.spec.Request, Requirements: t.spec.Requirements, Executable: t.spec.Executable}
}

// pass calls the policy once and applies its decisions in order.
func (s *simulator) pass() error {
	s.passes++
	ds, err := s.pol.Schedule(s.state())
	if err != nil {
		return fmt.Errorf("at t=%g s: policy %s: %w", s.now, s.pol.Name(), err)
	}
	for i, d := range ds {
		if err := s.apply(d); err != nil {
			return fmt.Errorf("at t=%g s: policy %s: decision %d of %d (%s task %q on machine %d): %w",
				s.now, s.pol.Name(), i+1, len(ds), d.Kind, d.Task, d.Machine, err)
		}
		s.decisions++
	}
	if s.cfg.EnforceLimits {
		for i, pi := range s.piMilliW {
			if lim := s.inst.Orgs[i].LimitMilliW; pi > lim {
				return fmt.Errorf("at t=%g s: policy %s: org %q at %d mW above its limit %d mW after the pass",
					s.now, s.pol.Name(), s.inst.Orgs[i].Name, pi, lim)
			}
		}
	}
	if s.cfg.CheckInvariants {
		if err := s.checkInvariants(); err != nil {
			return fmt.Errorf("at t=%g s: after a pass of policy %s: %w", s.now, s.pol.Name(), err)
		}
	}
	return nil
}

// queuedTask resolves a decision's task: it must exist, be queued and belong
// to the organisation the decision names.
func (s *simulator) queuedTask(id string, org int) (int, error) {
	ti, ok := s.byID[id]
	if !ok {
		return 0, fmt.Errorf("unknown task")
	}
	t := &s.tasks[ti]
	if t.status != queued {
		return 0, fmt.Errorf("task is not queued")
	}
	if t.spec.Org != org {
		return 0, fmt.Errorf("decision names org %d, task belongs to org %d", org, t.spec.Org)
	}
	return ti, nil
}

func (s *simulator) apply(d policy.Decision) error {
	if d.Machine < 0 || d.Machine >= len(s.onMach) {
		return fmt.Errorf("machine index out of range")
	}
	ti, err := s.queuedTask(d.Task, d.Org)
	if err != nil {
		return err
	}
	m := d.Machine
	mach := &s.inst.Machines[m]
	t := &s.tasks[ti]
	if why := policy.Mismatch(*mach, t.policyTask(ti), s.inst.Orgs); why != "" {
		return fmt.Errorf("task cannot run on machine %q: %s", mach.ID, why)
	}
	switch d.Kind {
	case policy.Allocate:
		if !s.room(ti, m, s.used[m]) {
			return fmt.Errorf("machine %q is not free: no room for the task (runs %s)", mach.ID, s.running(m))
		}
	case policy.Preempt:
		if len(s.onMach[m]) == 0 {
			return fmt.Errorf("preempt on free machine %q", mach.ID)
		}
		vi := slices.IndexFunc(s.onMach[m], func(vi int) bool { return s.tasks[vi].spec.ID == d.Victim })
		if vi < 0 {
			return fmt.Errorf("victim %q named, machine %q runs %s", d.Victim, mach.ID, s.running(m))
		}
		vi = s.onMach[m][vi]
		v := &s.tasks[vi]
		if v.spec.Org != d.VictimOrg {
			return fmt.Errorf("victim %q of org %d named, it belongs to org %d", d.Victim, d.VictimOrg, v.spec.Org)
		}
		if !s.room(ti, m, s.used[m].Plus(negate(v.spec.Request.Request()))) {
			return fmt.Errorf("machine %q has no room for the task once victim %q stops (runs %s)", mach.ID, d.Victim, s.running(m))
		}
		kept := s.kept(s.now-v.segStart, v.mflops)
		if diff := math.Abs(d.VictimKeptMFlop - float64(kept)); diff > keptAbsTolerance+keptRelTolerance*float64(kept) || math.IsNaN(d.VictimKeptMFlop) {
			return fmt.Errorf("victim %q keeps %v MFlop by the policy, %d by eq. 3.7/3.8", d.Victim, d.VictimKeptMFlop, kept)
		}
		s.preempt(vi, kept)
		s.gained[d.Org]++
		if s.cfg.Trace != nil {
			s.cfg.Trace(TraceEvent{
				Time: s.now, Kind: EventPreempt,
				Org: s.inst.Orgs[d.Org].Name, Task: d.Task, Machine: s.inst.Machines[m].ID,
				Victim: v.spec.ID, VictimOrg: s.inst.Orgs[v.spec.Org].Name, KeptMFlop: float64(kept),
			})
		}
	default:
		return fmt.Errorf("unknown decision kind %d", d.Kind)
	}
	s.dequeue(ti)
	s.start(ti, m)
	if d.Kind == policy.Allocate && s.cfg.Trace != nil {
		s.cfg.Trace(TraceEvent{
			Time: s.now, Kind: EventAllocate,
			Org: s.inst.Orgs[d.Org].Name, Task: d.Task, Machine: s.inst.Machines[m].ID,
		})
	}
	return nil
}

// room says task ti fits on machine m when used of it is taken.
func (s *simulator) room(ti, m int, used policy.Resources) bool {
	capa := s.inst.Machines[m].Capacity.Capacity()
	return policy.Fits(s.tasks[ti].spec.Request.Request(), capa.Plus(negate(used)), capa)
}

func negate(r policy.Resources) policy.Resources {
	return policy.Resources{CPUs: -r.CPUs, MemoryBytes: -r.MemoryBytes, GPUs: -r.GPUs}
}

// running names the tasks on machine m, for errors.
func (s *simulator) running(m int) string {
	if len(s.onMach[m]) == 0 {
		return "nothing"
	}
	ids := make([]string, len(s.onMach[m]))
	for i, ti := range s.onMach[m] {
		ids[i] = fmt.Sprintf("%q", s.tasks[ti].spec.ID)
	}
	return strings.Join(ids, ", ")
}

// kept is the work a task keeps when stopped after run seconds on a machine
// of d MFLOPS: the completed checkpoint blocks, floor(run/B)·B·d, with
// checkpointing (eq. 3.7); nothing without (eq. 3.8). Whole MFlop, rounded
// down, so remaining sizes stay exact integers.
func (s *simulator) kept(run float64, mflops int64) int64 {
	b := s.cfg.CheckpointBlockSeconds
	if b <= 0 || run <= 0 {
		return 0
	}
	return int64(math.Floor(math.Floor(run/b) * b * float64(mflops)))
}

func (s *simulator) start(ti, m int) {
	t := &s.tasks[ti]
	mach := &s.inst.Machines[m]
	t.status = running
	t.machine = m
	t.segStart = s.now
	t.segID++
	if math.IsNaN(t.firstRun) {
		t.firstRun = s.now
	}
	share := policy.ShareOf(mach.Capacity, t.spec.Request)
	t.mflops, t.milliW = share.Of(mach.MFLOPS), share.Of(mach.BusyMilliW)
	if len(s.onMach[m]) == 0 {
		s.busyAt[m] = s.now
	}
	s.onMach[m] = append(s.onMach[m], ti)
	s.used[m] = s.used[m].Plus(t.spec.Request.Request())
	s.nRunning++
	s.piMilliW[t.spec.Org] += t.milliW
	heap.Push(&s.heap, completion{
		at:      s.now + float64(t.remaining)/float64(t.mflops),
		machine: m, task: ti, segID: t.segID,
	})
}

// stop ends the current segment of task ti and credits its energy, its
// share of the machine's draw over the segment (docs/POLICY.md §4a, "Energy
// booked"): to the task's organisation as user, to the machine's owner as
// owner.
func (s *simulator) stop(ti int) {
	t := &s.tasks[ti]
	m := t.machine
	mach := &s.inst.Machines[m]
	dur := s.now - t.segStart
	j := float64(t.milliW) * dur / 1000
	t.energyJ += j
	t.runSec += dur
	s.userJ[t.spec.Org] += j
	s.ownerJ[mach.Owner] += j
	s.piMilliW[t.spec.Org] -= t.milliW
	on := s.onMach[m]
	k := slices.Index(on, ti)
	s.onMach[m] = append(on[:k], on[k+1:]...)
	s.used[m] = s.used[m].Plus(negate(t.spec.Request.Request()))
	if len(s.onMach[m]) == 0 {
		s.busyS[m] += s.now - s.busyAt[m]
	}
	s.nRunning--
	t.machine = -1
}

func (s *simulator) preempt(vi int, kept int64) {
	t := &s.tasks[vi]
	mflops := t.mflops
	run := s.now - t.segStart
	lost := run*float64(mflops) - float64(kept)
	t.wasted += lost
	s.wasted[t.spec.Org] += lost
	t.preempted++
	s.prempts[t.spec.Org]++
	s.stop(vi)
	// kept ≤ run·d < remaining: the task would have completed otherwise,
	// and completions at this instant were applied before the pass.
	t.remaining -= min(kept, t.remaining-1)
	s.enqueue(vi)
}

func (s *simulator) complete(ti int) {
	t := &s.tasks[ti]
	m := t.machine
	t.doneOn = m
	s.stop(ti)
	t.status = done
	t.remaining = 0
	t.completed = s.now
	s.completedN++
	if s.cfg.Trace != nil {
		s.cfg.Trace(TraceEvent{
			Time: s.now, Kind: EventComplete,
			Org: s.inst.Orgs[t.spec.Org].Name, Task: t.spec.ID, Machine: s.inst.Machines[m].ID,
		})
	}
}

// checkInvariants recomputes the bookkeeping from the task table: every
// running task on the machine it thinks, no machine asked for more than its
// capacity, each organisation's PI the sum of its tasks' shares of draw.
func (s *simulator) checkInvariants() error {
	pi := make([]int64, len(s.inst.Orgs))
	used := make([]policy.Resources, len(s.onMach))
	nOn := make([]int, len(s.onMach))
	nQueued := 0
	for ti := range s.tasks {
		t := &s.tasks[ti]
		switch t.status {
		case running:
			if t.machine < 0 {
				return fmt.Errorf("running task %q has no machine", t.spec.ID)
			}
			if !slices.Contains(s.onMach[t.machine], ti) {
				return fmt.Errorf("task %q thinks it runs on %q, the machine disagrees", t.spec.ID, s.inst.Machines[t.machine].ID)
			}
			mach := s.inst.Machines[t.machine]
			used[t.machine] = used[t.machine].Plus(t.spec.Request.Request())
			nOn[t.machine]++
			pi[t.spec.Org] += policy.ShareOf(mach.Capacity, t.spec.Request).Of(mach.BusyMilliW)
		case queued:
			nQueued++
			if t.queuePos < 0 || t.queuePos >= len(s.queue) || s.queue[t.queuePos] != ti {
				return fmt.Errorf("queued task %q is not in the queue", t.spec.ID)
			}
		}
	}
	for m, on := range s.onMach {
		id := s.inst.Machines[m].ID
		if len(on) != nOn[m] {
			return fmt.Errorf("machine %q claims %d tasks, %d run there", id, len(on), nOn[m])
		}
		capa := s.inst.Machines[m].Capacity.Capacity()
		if used[m] != s.used[m] {
			return fmt.Errorf("machine %q: %+v used recomputed, %+v tracked", id, used[m], s.used[m])
		}
		if !policy.Fits(used[m], capa, capa) {
			return fmt.Errorf("machine %q over-committed: its tasks ask %+v of %+v (runs %s)", id, used[m], capa, s.running(m))
		}
	}
	if nQueued != len(s.queue) {
		return fmt.Errorf("%d tasks queued, queue holds %d", nQueued, len(s.queue))
	}
	for i := range pi {
		if pi[i] != s.piMilliW[i] {
			return fmt.Errorf("org %q: PI %d mW recomputed, %d mW tracked", s.inst.Orgs[i].Name, pi[i], s.piMilliW[i])
		}
	}
	return nil
}
