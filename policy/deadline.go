package policy

import (
	"cmp"
	"fmt"
	"slices"
)

// Deadline mapping: seed 004 (Martins, 2012), §4.1.4, figures 4.1 and 4.2
// (L965-1050). An online heuristic with two task classes: a soft-deadline
// task goes to the most stable machine (highest MTBF) that can finish it in
// time with a 10 % margin; a nice task to the least stable free machine.
// Everything here is pure: times are integer milliseconds on the caller's
// clock, work is MFlop, computing power MFLOPS.

// TaskClass is the seed's application class (L887).
type TaskClass uint8

const (
	// Nice tasks have no deadline: the goal is only that they finish.
	Nice TaskClass = iota + 1
	// SoftDeadline tasks should finish by their deadline (soft: missing it
	// is a failure of service, not of the task).
	SoftDeadline
)

func (c TaskClass) String() string {
	switch c {
	case Nice:
		return "nice"
	case SoftDeadline:
		return "soft-deadline"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// DeadlineMarginPercent is the seed's safety margin on a predicted run
// time (L967: "acrescida de uma margem de 10%"), covering checkpoint cost
// and unforeseen local load.
const DeadlineMarginPercent = 10

// MaxDeadlineMFlop bounds sizes so that predictions never overflow int64
// (2^40 MFlop · 1000 · 110 < 2^63).
const MaxDeadlineMFlop = int64(1) << 40

// maxDeadlineMs bounds the clock and deadlines for the same reason.
const maxDeadlineMs = int64(1) << 60

// PredictRunMs is the seed's predictor (§4.1.1, L911): the run time of
// sizeMFlop on a machine of mflops, rounded up to the millisecond.
func PredictRunMs(sizeMFlop, mflops int64) int64 {
	return ceilDiv(sizeMFlop*1000, mflops)
}

// WithMargin adds the DeadlineMarginPercent margin to a predicted run time,
// rounded up.
func WithMargin(ms int64) int64 {
	return ceilDiv(ms*(100+DeadlineMarginPercent), 100)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// DeadlineMachine is what the mapping knows of a machine.
type DeadlineMachine struct {
	ID string
	// MFLOPS is the capacity the predictor assumes (local load already
	// taken off by the caller).
	MFLOPS int64
	// MTBFMs is the machine's mean time between failures (see MTBF);
	// larger is more stable.
	MTBFMs int64
	// Running is the class of the task it runs (0: it is free);
	// RunningID names it and RemainingMFlop is its work left.
	Running        TaskClass
	RunningID      string
	RemainingMFlop int64
	// Reserved says its reservation slot (the next task after the running
	// one) is taken.
	Reserved bool
	// Protected says its running nice task may not be preempted for this
	// task (see DeadlineProtected): EHOSEP's rule for who may lose a
	// machine.
	Protected bool
}

// DeadlineTask is the task being mapped.
type DeadlineTask struct {
	ID        string
	Class     TaskClass
	SizeMFlop int64
	// DeadlineMs is the absolute deadline of a SoftDeadline task, on the
	// same clock as the mapping's now.
	DeadlineMs int64
}

// MapOutcome says which branch of figures 4.1 and 4.2 placed the task.
type MapOutcome uint8

const (
	// MapRun: a free machine, starting now (fig. 4.1 L19-25, fig. 4.2 L3-6).
	MapRun MapOutcome = iota + 1
	// MapPreemptNice: the nice task on Machine is stopped (it resumes there
	// later from its last checkpoint) and the soft task starts now (fig. 4.1
	// L4-7, L28-31).
	MapPreemptNice
	// MapReserveSoft: the soft task takes the reservation slot behind the
	// soft task running on Machine (fig. 4.1 L9-12, L33-36).
	MapReserveSoft
	// MapReserveNice: the nice task takes the reservation slot behind the
	// nice task running on Machine (fig. 4.2 L8-11).
	MapReserveNice
	// MapQueueRandom: the nice task joins the end of a random machine's
	// queue (fig. 4.2 L13-16).
	MapQueueRandom
	// MapRefused: no machine can meet the soft task's deadline (fig. 4.1
	// L14, L38), or no machine may take the task at all.
	MapRefused
)

func (o MapOutcome) String() string {
	switch o {
	case MapRun:
		return "run"
	case MapPreemptNice:
		return "preempt-nice"
	case MapReserveSoft:
		return "reserve-soft"
	case MapReserveNice:
		return "reserve-nice"
	case MapQueueRandom:
		return "queue-random"
	case MapRefused:
		return "refused"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Mapping is the decision for one task.
type Mapping struct {
	Outcome MapOutcome
	// Machine is the index of the chosen machine (-1 when refused).
	Machine int
	// Victim is the nice task stopped by MapPreemptNice.
	Victim string
	// FinishMs is, for a soft task, the predicted finish with the margin
	// (what was checked against the deadline); 0 otherwise.
	FinishMs int64
}

// DeadlineInput is one mapping question.
type DeadlineInput struct {
	NowMs    int64
	Machines []DeadlineMachine
	// May, if not nil (one entry per machine), restricts the machines the
	// task may use: EHOSEP's power limit and the task's requirements (see
	// DeadlineMay). A machine it may not use is invisible to the mapping.
	May  []bool
	Task DeadlineTask
	// Draw is the caller's random number for fig. 4.2 L13: the leader
	// derives it from the log, the simulator from its seeded generator, so
	// that every peer and every rerun draws the same.
	Draw uint64
}

// stableBefore orders machines most stable first: MTBF descending, then ID.
// IDs are unique (validateDeadline), so the order is total.
func stableBefore(a, b *DeadlineMachine) bool {
	if a.MTBFMs != b.MTBFMs {
		return a.MTBFMs > b.MTBFMs
	}
	return a.ID < b.ID
}

// MapDeadline is figures 4.1 and 4.2. Soft-deadline task: the most stable
// free machine that finishes it in time; else the most stable machine
// running an unprotected nice task on which it finishes in time (the nice
// task is preempted); else the most stable machine running a soft task, with its
// reservation slot free, where the running task's remainder plus this task
// finish in time; else refused. Nice task: the least stable free machine;
// else the most stable machine running a nice task with a free reservation
// slot (fig. 4.2 takes "the first", L1026, of the MTBF-ordered list,
// L1147); else the machine at Draw mod n in ID order. "In time" is
// now + WithMargin(PredictRunMs(...)) <= deadline. One scan, no sort
// (except for the random branch).
func MapDeadline(in DeadlineInput) (Mapping, error) {
	if err := validateDeadline(in); err != nil {
		return Mapping{}, err
	}
	t := in.Task
	finishOn := func(work, mflops int64) int64 { return in.NowMs + WithMargin(PredictRunMs(work, mflops)) }
	var free, nice, softRes, niceRes, leastFree = -1, -1, -1, -1, -1
	var freeAt, niceAt, softAt int64
	better := func(cur, j int) bool { return cur < 0 || stableBefore(&in.Machines[j], &in.Machines[cur]) }
	for j := range in.Machines {
		if in.May != nil && !in.May[j] {
			continue
		}
		m := &in.Machines[j]
		switch {
		case m.Running == 0:
			if t.Class == Nice {
				if leastFree < 0 || stableBefore(&in.Machines[leastFree], m) {
					leastFree = j
				}
			} else if f := finishOn(t.SizeMFlop, m.MFLOPS); f <= t.DeadlineMs && better(free, j) {
				free, freeAt = j, f
			}
		case m.Running == Nice:
			if t.Class == Nice {
				if !m.Reserved && better(niceRes, j) {
					niceRes = j
				}
			} else if f := finishOn(t.SizeMFlop, m.MFLOPS); !m.Protected && f <= t.DeadlineMs && better(nice, j) {
				nice, niceAt = j, f
			}
		case m.Running == SoftDeadline && t.Class == SoftDeadline && !m.Reserved:
			if f := finishOn(m.RemainingMFlop+t.SizeMFlop, m.MFLOPS); f <= t.DeadlineMs && better(softRes, j) {
				softRes, softAt = j, f
			}
		}
	}
	if t.Class == SoftDeadline {
		switch {
		case free >= 0:
			return Mapping{Outcome: MapRun, Machine: free, FinishMs: freeAt}, nil
		case nice >= 0:
			return Mapping{Outcome: MapPreemptNice, Machine: nice, Victim: in.Machines[nice].RunningID, FinishMs: niceAt}, nil
		case softRes >= 0:
			return Mapping{Outcome: MapReserveSoft, Machine: softRes, FinishMs: softAt}, nil
		}
		return Mapping{Outcome: MapRefused, Machine: -1}, nil
	}
	switch {
	case leastFree >= 0:
		return Mapping{Outcome: MapRun, Machine: leastFree}, nil
	case niceRes >= 0:
		return Mapping{Outcome: MapReserveNice, Machine: niceRes}, nil
	}
	if j := randomMachine(in); j >= 0 {
		return Mapping{Outcome: MapQueueRandom, Machine: j}, nil
	}
	return Mapping{Outcome: MapRefused, Machine: -1}, nil
}

// randomMachine is fig. 4.2 L13-14 over the machines the task may use, in
// ID order so that the draw does not depend on how the caller listed them.
func randomMachine(in DeadlineInput) int {
	var idx []int
	for j := range in.Machines {
		if in.May == nil || in.May[j] {
			idx = append(idx, j)
		}
	}
	if len(idx) == 0 {
		return -1
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(in.Machines[a].ID, in.Machines[b].ID) })
	return idx[in.Draw%uint64(len(idx))]
}

func validateDeadline(in DeadlineInput) error {
	t := in.Task
	if in.NowMs < 0 || in.NowMs > maxDeadlineMs {
		return fmt.Errorf("deadline mapping: now %d ms outside [0, 2^60]", in.NowMs)
	}
	if t.Class != Nice && t.Class != SoftDeadline {
		return fmt.Errorf("deadline mapping: task %q: class %d is neither nice nor soft-deadline", t.ID, t.Class)
	}
	if t.SizeMFlop <= 0 || t.SizeMFlop > MaxDeadlineMFlop {
		return fmt.Errorf("deadline mapping: task %q: size %d MFlop outside [1, 2^40]", t.ID, t.SizeMFlop)
	}
	if t.Class == SoftDeadline && (t.DeadlineMs < 0 || t.DeadlineMs > maxDeadlineMs) {
		return fmt.Errorf("deadline mapping: task %q: deadline %d ms outside [0, 2^60]", t.ID, t.DeadlineMs)
	}
	if in.May != nil && len(in.May) != len(in.Machines) {
		return fmt.Errorf("deadline mapping: %d may entries for %d machines", len(in.May), len(in.Machines))
	}
	seen := make(map[string]bool, len(in.Machines))
	for j, m := range in.Machines {
		if seen[m.ID] {
			return fmt.Errorf("deadline mapping: machine %d: duplicate ID %q", j, m.ID)
		}
		seen[m.ID] = true
		if m.MFLOPS <= 0 {
			return fmt.Errorf("deadline mapping: machine %q: MFLOPS %d must be positive", m.ID, m.MFLOPS)
		}
		if m.MTBFMs < 0 {
			return fmt.Errorf("deadline mapping: machine %q: negative MTBF %d ms", m.ID, m.MTBFMs)
		}
		if m.Running != 0 && m.Running != Nice && m.Running != SoftDeadline {
			return fmt.Errorf("deadline mapping: machine %q: running class %d unknown", m.ID, m.Running)
		}
		if m.Running == 0 && (m.RemainingMFlop != 0 || m.Reserved || m.RunningID != "") {
			return fmt.Errorf("deadline mapping: machine %q: free but has a running task or a reservation", m.ID)
		}
		if m.Running != 0 && (m.RemainingMFlop < 0 || m.RemainingMFlop > MaxDeadlineMFlop) {
			return fmt.Errorf("deadline mapping: machine %q: remaining %d MFlop outside [0, 2^40]", m.ID, m.RemainingMFlop)
		}
	}
	return nil
}

// DeadlineMay composes the mapping with EHOSEP: the machines on which a
// task of organisation t.Org may start now. A machine qualifies when the
// task may run there (Eligible: requirements, owner policy, Avoid), it is
// not held, and placing the task keeps PI_org <= Lim_org; a machine already
// running a task of the same organisation is charged only the difference,
// since preempting that task frees its share. EHOSEP still decides which
// organisation is served (docs/POLICY.md §9); this decides where.
func DeadlineMay(s *State, t Task) []bool {
	pi := make([]int64, len(s.Orgs))
	own := make([]int64, len(s.Machines))
	for _, r := range s.Running {
		m := s.Machines[r.Machine]
		c := ShareOf(m.Capacity, r.Task.Request).Of(m.BusyMilliW)
		pi[r.Task.Org] += c
		if r.Task.Org == t.Org {
			own[r.Machine] += c
		}
	}
	may := Eligible(s.Machines, t, s.Orgs)
	for j, m := range s.Machines {
		cost := ShareOf(m.Capacity, t.Request).Of(m.BusyMilliW)
		may[j] = may[j] && !s.held(j) && pi[t.Org]+cost-min(cost, own[j]) <= s.Orgs[t.Org].LimitMilliW
	}
	return may
}

// DeadlineProtected says, per machine, whether the nice task running there
// may not be preempted for a soft task of t.Org. EHOSEP's algorithm 5 takes
// a machine from an organisation only when it is in excess (DP > 0) and
// gives it only to one in deficit (DP < 0); the deadline mapping keeps that
// rule for other organisations' tasks, so that an organisation in deficit
// never loses a machine to another's deadline. A task of t.Org's own is
// never protected: the organisation trades its own nice work for its own
// deadline. Free machines are not protected.
func DeadlineProtected(s *State, t Task) []bool {
	tot := ComputeTotals(s)
	alloc := make([]int64, len(s.Orgs))
	for _, r := range s.Running {
		m := s.Machines[r.Machine]
		alloc[r.Task.Org] += ShareOf(m.Capacity, r.Task.Request).Of(m.MFLOPS)
	}
	dp := func(o int) float64 { return DP(alloc[o], tot.QuotaMFLOPS[o]) }
	protected := make([]bool, len(s.Machines))
	for _, r := range s.Running {
		if o := r.Task.Org; o != t.Org && !(dp(o) > 0 && dp(t.Org) < 0) {
			protected[r.Machine] = true
		}
	}
	return protected
}
