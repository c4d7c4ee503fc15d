package policy

import "slices"

// The rest of figures 4.1 and 4.2 in the indexed one-slot pass
// (docs/POLICY.md §9, "Preemption and reservations in the pass"). EHOSEP
// still decides which organisation is served and its task (algorithm 3's
// order, the power limit); for a task with a class this file decides what
// happens when the run branch (deadline_place.go) has no machine for it:
//
//   - a soft-deadline task that no free candidate finishes in time
//     preempts an unprotected nice task (DeadlineProtected's rule, read on
//     the pass's own DP) on the most stable machine where it then meets
//     its deadline (fig. 4.1 L4-7, L28-31); the nice task goes back to its
//     queue with the work it keeps, as an algorithm 5 victim does, and
//     resumes from its checkpoint; the machine is then nobody's victim
//     for the rest of the pass (so preemptions cannot cycle: each takes
//     one machine for good, and the pass still ends);
//   - else it takes the reservation slot behind a running soft task on the
//     most stable machine where that task's remaining work plus its own
//     still meets its deadline (L9-12, L33-36): it is not placed now, and
//     nobody else reserves or preempts that machine for the rest of the
//     pass;
//   - else, when a free candidate exists, the fastest as before (it was
//     admitted: that is its best chance), otherwise it waits.
//
// A nice task with no free candidate reserves behind a running nice task
// (fig. 4.2 L8-11, the most stable such machine); else it stays in the
// federation's queue, which is fig. 4.2's "any machine's queue" (L13-16)
// with the queue shared.
//
// EHOSEP serves an organisation only when a free machine fits its
// remaining power, so the branches for a task whose organisation has no
// free machine run when algorithm 3 has nobody left to serve
// (serveClassedHeads): the organisations that may be served (line 7) are
// visited in algorithm 3's order and each one's first waiting task, if it
// has a class, gets its branch. Power: a preemption or a reservation is
// only on a machine where starting the task keeps PI ≤ Lim (a machine of
// the organisation's own task is charged the difference), DeadlineMay's
// rule; a reservation changes no PI now, and its task's later start is an
// ordinary allocation. A task without a class never takes these branches,
// so a pass over classless tasks decides exactly as EHOSEP.
//
// Reservations live for one pass (the ledger keeps no reservation): the
// next pass recomputes them from the committed state, where the reserving
// task, still queued, is mapped again (and takes the machine once it is
// free, if EHOSEP serves its organisation first).

// allocateClassed is algorithm 4 for a task t with a class of
// organisation i (detached, t already popped), def being the free
// machine EHOSEP chose for it.
func (w *ehosepPass) allocateClassed(i int, t *Task, def int) {
	m := deadlinePlace(w.s, t, def, w.candidate(i))
	if t.Class == SoftDeadline && !w.meets(t, m, 0) && w.softElsewhere(i, t) {
		return
	}
	w.free.set(w.watt.pos[m], -1)
	w.place(t, m)
	w.decisions = append(w.decisions, Decision{Kind: Allocate, Task: t.ID, Org: i, Machine: m})
}

// serveClassedHeads serves, when EHOSEP serves nobody, the first
// organisation in algorithm 3's order that may be served and whose first
// waiting task has a class and a branch that takes it; false when none.
func (w *ehosepPass) serveClassedHeads() bool {
	if !w.anyClassed() {
		return false
	}
	for c := w.order.first(1); c >= 0; c = w.order.after(c, 1) {
		i := int(c)
		t := w.queue[i].peek()
		if t == nil || t.Class == 0 {
			continue
		}
		var m int
		if t.Class == SoftDeadline {
			if m = w.niceVictim(i, t); m < 0 {
				m = w.slotBehind(i, t, SoftDeadline)
			}
		} else {
			m = w.slotBehind(i, t, Nice)
		}
		if m < 0 {
			continue
		}
		w.detach(i)
		task := w.queue[i].pop()
		if w.running[m].Class == Nice && task.Class == SoftDeadline {
			w.preemptNice(i, task, m)
		} else {
			w.reserve(task, m)
		}
		w.attach(i)
		return true
	}
	return false
}

// softElsewhere is fig. 4.1's second and third branches for soft task t
// of organisation i (detached): false when neither applies.
func (w *ehosepPass) softElsewhere(i int, t *Task) bool {
	if m := w.niceVictim(i, t); m >= 0 {
		w.preemptNice(i, t, m)
		return true
	}
	if m := w.slotBehind(i, t, SoftDeadline); m >= 0 {
		w.reserve(t, m)
		return true
	}
	return false
}

// meets says soft task t, started on machine m after extra MFlop of work
// ahead of it, finishes by its deadline with the margin.
func (w *ehosepPass) meets(t *Task, m int, extra int64) bool {
	size := min(max(t.SizeMFlop, 1), MaxDeadlineMFlop)
	work := min(size+extra, MaxDeadlineMFlop)
	return w.s.NowMs+WithMargin(PredictRunMs(work, TaskMFLOPS(&w.s.Machines[m], t))) <= t.DeadlineMs
}

// mayTake says machine m, busy with a task of organisation z, is one
// organisation i may take or reserve: not held, not reserved in this
// pass, and starting i's task there keeps PI_i ≤ Lim_i.
func (w *ehosepPass) mayTake(i, m, z int) bool {
	if w.s.held(m) || w.reservedAt(m) {
		return false
	}
	cost := w.s.Machines[m].BusyMilliW
	if z == i {
		cost = 0
	}
	return w.pi[i]+cost <= w.limit[i]
}

// niceVictim is the most stable machine running a nice task that soft
// task t of organisation i may preempt (its own organisation's, or one in
// excess while i is in deficit) and on which t meets its deadline; -1
// when none.
func (w *ehosepPass) niceVictim(i int, t *Task) int {
	best := -1
	for m := range w.s.Machines {
		if !w.busy[m] || w.running[m].Class != Nice {
			continue
		}
		z := w.running[m].Org
		if z != i && !(w.dp[z] > 0 && w.dp[i] < 0) || !w.mayTake(i, m, z) || !w.meets(t, m, 0) {
			continue
		}
		if best < 0 || stabilityLess(&w.s.Machines[best], &w.s.Machines[m]) {
			best = m
		}
	}
	return best
}

// slotBehind is the most stable machine running a task of class c whose
// reservation slot t of organisation i may take; for a soft t, the
// running task's remaining work plus t's must meet t's deadline. -1 when
// none.
func (w *ehosepPass) slotBehind(i int, t *Task, c TaskClass) int {
	best := -1
	for m := range w.s.Machines {
		if !w.busy[m] || w.running[m].Class != c || !w.mayTake(i, m, w.running[m].Org) {
			continue
		}
		if t.Class == SoftDeadline && !w.meets(t, m, w.remaining(m)) {
			continue
		}
		if best < 0 || stabilityLess(&w.s.Machines[best], &w.s.Machines[m]) {
			best = m
		}
	}
	return best
}

// remaining is the work left of the task running on machine m.
func (w *ehosepPass) remaining(m int) int64 {
	return remainingAfter(min(w.running[m].SizeMFlop, MaxDeadlineMFlop), w.exec[m])
}

// preemptNice stops the nice task on machine m (it goes back to its
// organisation's queue keeping its checkpointed work) and starts soft task
// t of organisation i (detached) there.
func (w *ehosepPass) preemptNice(i int, t *Task, m int) {
	z := w.running[m].Org
	if z != i {
		w.detach(z)
	}
	victim, waste, kept := w.stopVictim(m)
	if z != i {
		w.attach(z)
	}
	w.place(t, m)
	// Not a victim again in this pass: without this a soft task and
	// algorithm 5 could hand a machine back and forth for ever.
	w.unlist(m)
	w.decisions = append(w.decisions, Decision{
		Kind: Preempt, Task: t.ID, Org: i, Machine: m,
		Victim: victim.ID, VictimOrg: z, VictimWasteMFlop: waste, VictimKeptMFlop: kept,
	})
}

// reserve gives t the reservation slot of busy machine m for the rest of
// the pass: t is not placed, and m is no longer anyone's victim.
func (w *ehosepPass) reserve(t *Task, m int) {
	w.state().reserved[m] = t.ID
	w.unlist(m)
}

// deadlineState is what this file adds to a pass, made on first use.
type deadlineState struct {
	// classed says some task of the pass, waiting or running, has a
	// class; known once asked (anyClassed).
	classed, known bool
	// reserved names, per machine, the task holding its slot ("": none).
	reserved []string
	// unlisted says the machine left algorithm 5's victims for the rest
	// of the pass (reserved, or taken by a deadline preemption).
	unlisted []bool
}

func (w *ehosepPass) state() *deadlineState {
	if w.dl == nil {
		w.dl = &deadlineState{}
	}
	if w.dl.reserved == nil {
		n := len(w.s.Machines)
		w.dl.reserved, w.dl.unlisted = make([]string, n), make([]bool, n)
	}
	return w.dl
}

// anyClassed says some waiting or running task has a class: otherwise no
// head can take a deadline branch, and a pass over a large federation
// does not look at every organisation's head at its end. It costs the
// kept queue's counter, or one scan of the listed tasks per pass.
func (w *ehosepPass) anyClassed() bool {
	if w.dl == nil {
		w.dl = &deadlineState{}
	}
	d := w.dl
	if !d.known {
		d.known = true
		s := w.s
		d.classed = s.Queue != nil && s.Queue.classed > 0 ||
			slices.ContainsFunc(s.Queued, func(t Task) bool { return t.Class != 0 }) ||
			slices.ContainsFunc(s.Running, func(r Running) bool { return r.Task.Class != 0 })
	}
	return d.classed
}

// unlist takes busy machine m out of its organisation's victims for the
// rest of the pass.
func (w *ehosepPass) unlist(m int) {
	if d := w.state(); !d.unlisted[m] {
		d.unlisted[m] = true
		w.victims.remove(w.running[m].Org, int32(m))
	}
}

func (w *ehosepPass) reservedAt(m int) bool {
	return w.dl != nil && w.dl.reserved != nil && w.dl.reserved[m] != ""
}

// reservations are the pass's reservations (machine index -> task ID).
func (w *ehosepPass) reservations() map[int]string {
	out := map[int]string{}
	if w.dl != nil && w.dl.reserved != nil {
		for m, id := range w.dl.reserved {
			if id != "" {
				out[m] = id
			}
		}
	}
	return out
}

// decidesAny runs services until one decides something: a service may
// only reserve, and a pass that only reserves decides nothing.
func (w *ehosepPass) decidesAny() bool {
	for n := 0; n <= w.maxServices && w.serveOne(); n++ {
		if len(w.decisions) > 0 {
			return true
		}
	}
	return false
}

// peek is the task pop would return, or nil.
func (q *passQueue) peek() *Task {
	if q.len() == 0 {
		return nil
	}
	if q.fromSource() {
		return q.ahead[0]
	}
	return q.heap.items[0]
}
