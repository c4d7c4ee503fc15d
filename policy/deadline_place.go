package policy

import "fmt"

// Deadline placement in the scheduling pass (docs/POLICY.md §9, "Composing
// with EHOSEP"). EHOSEP decides which organisation is served and which of
// its tasks (algorithm 3's order, the power limit); for a task with a
// Class, the deadline mapping then decides where among the machines EHOSEP
// lets that organisation use for it: free (room for it), eligible
// (requirements, owner policy, Avoid), and within the organisation's
// power limit — what DeadlineMay gives outside a pass. A soft-deadline
// task takes the most stable of them on which it meets its deadline, a
// nice task the least stable (MapDeadline's run branches, figures 4.1 and
// 4.2). A soft task that no candidate can finish in time takes the one on
// which it finishes first (most stable on a tie): it was admitted when
// some machine could meet its deadline, and the fastest is its best
// chance now. A task without a class keeps EHOSEP's machine, so that
// passes over tasks queued before classes existed decide as before.

// checkTaskClass is the shape of a task's class and deadline.
func checkTaskClass(t *Task) error {
	if t.Class != Nice && t.Class != SoftDeadline {
		return fmt.Errorf("task %q: class %d is neither nice nor soft-deadline", t.ID, t.Class)
	}
	if t.DeadlineMs < 0 || t.DeadlineMs > maxDeadlineMs {
		return fmt.Errorf("task %q: deadline %d ms outside [0, 2^60]", t.ID, t.DeadlineMs)
	}
	return nil
}

// deadlinePlace is the pass's hook: the machine for task t, given the
// machine EHOSEP chose (def, a candidate) and which machines are
// candidates. It costs one scan of the machines, and only for tasks with a
// class.
func deadlinePlace(s *State, t *Task, def int, candidate func(m int) bool) int {
	if t.Class == 0 {
		return def
	}
	size := min(max(t.SizeMFlop, 1), MaxDeadlineMFlop)
	best := -1
	fastest, fastestFinish := -1, int64(0)
	for m := range s.Machines {
		if !candidate(m) {
			continue
		}
		mc := &s.Machines[m]
		if t.Class == Nice {
			if best < 0 || stabilityLess(mc, &s.Machines[best]) {
				best = m
			}
			continue
		}
		f := s.NowMs + WithMargin(PredictRunMs(size, TaskMFLOPS(mc, t)))
		if f <= t.DeadlineMs && (best < 0 || stabilityLess(&s.Machines[best], mc)) {
			best = m
		}
		if fastest < 0 || f < fastestFinish || f == fastestFinish && stabilityLess(&s.Machines[fastest], mc) {
			fastest, fastestFinish = m, f
		}
	}
	switch {
	case best >= 0:
		return best
	case fastest >= 0:
		return fastest
	}
	return def
}

// stabilityLess orders machines least stable first: the reverse of
// stableBefore (MTBF descending, then ID), so that the most stable is the
// greatest and the least stable the least, as in MapDeadline.
func stabilityLess(a, b *Machine) bool {
	if a.MTBFMs != b.MTBFMs {
		return a.MTBFMs < b.MTBFMs
	}
	return a.ID > b.ID
}

// candidate says, in the indexed one-slot pass, that machine m is free,
// not held, and its draw fits within what organisation i may still draw.
func (w *ehosepPass) candidate(i int) func(m int) bool {
	upTo := w.watt.upTo(w.limit[i] - w.pi[i])
	return func(m int) bool {
		p := w.watt.pos[m]
		return p < upTo && w.free.node[p+w.free.size] >= 0
	}
}

// TaskMFLOPS is the speed the deadline predictor assumes for task t on
// machine m: its share of the machine's available speed (the whole
// machine on a one-slot machine), at least 1.
func TaskMFLOPS(m *Machine, t *Task) int64 {
	return max(ShareOf(m.Capacity, t.Request).Of(AvailableMFLOPS(m.MFLOPS, m.OwnerLoadPermille)), 1)
}

// AvailableMFLOPS is the speed left to the grid on a machine of mflops
// whose own users take loadPermille of it (clamped to 0-1000): seed 004's
// prediction from the machine's capacity with its local load taken off
// (§4.1.1, L911-930), rounded down, at least 1.
func AvailableMFLOPS(mflops, loadPermille int64) int64 {
	free := 1000 - min(max(loadPermille, 0), 1000)
	return max(mflops/1000*free+mflops%1000*free/1000, 1)
}
