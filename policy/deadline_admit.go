package policy

import (
	"cmp"
	"slices"
)

// Admission of a submission's soft-deadline tasks, judged together
// (docs/POLICY.md §9, "Admission"). A batch is admitted only if the whole
// set can meet its deadlines given the others: the tasks are packed
// earliest deadline first (ties: their place in the submission) over the
// machines each may use, each mapped by MapDeadline on the machines as the
// tasks packed before it left them:
//
//   - a machine's work ahead is the longest remaining work of the tasks it
//     runs, plus every task of the batch packed behind them; a task meets
//     its deadline behind that work when now + WithMargin(PredictRunMs(
//     ahead + size)) <= deadline (fig. 4.1's reservation test, with the
//     slot allowed to stack, since admission plans the batch's own
//     queue);
//   - a machine running one nice task may be preempted for it (fig. 4.1
//     L4-7) only where the pass would do it: a one-slot federation and a
//     one-slot task, the nice task not DeadlineProtected; any other busy
//     machine counts as running a soft task (the task waits behind it);
//   - power: a task packed on a machine that was free (or preempted)
//     starts now, so its draw counts in its organisation's PI for the
//     tasks after it (DeadlineMay's rule, the machine's own task of the
//     organisation charged only the difference); a task stacked behind
//     work starts later and counts nothing now.
//
// EDF is the order that meets every deadline on one machine whenever any
// order does; over several machines it is a heuristic (the problem is
// NP-hard), which can refuse a set some other packing would meet, never
// admit one this packing misses. Tasks already queued are not counted, as
// before: an admitted task may still miss its deadline under load.

// AdmitRefusal says which task of a batch cannot be admitted.
type AdmitRefusal struct {
	// Task is its index in the batch; Ahead counts the tasks of the batch
	// packed before it (earlier deadlines).
	Task, Ahead int
	// FastestMs is its earliest predicted finish (with the margin) behind
	// the work packed so far, over the machines it may use; 0 when it may
	// use none.
	FastestMs int64
}

// AdmitDeadlines packs the soft-deadline tasks of ts (one organisation's
// submission; tasks of other classes are ignored) on s at s.NowMs and
// returns the first that cannot meet its deadline, or nil when all can.
func AdmitDeadlines(s *State, ts []Task) *AdmitRefusal {
	var order []int
	for k := range ts {
		if ts[k].Class == SoftDeadline {
			order = append(order, k)
		}
	}
	if len(order) == 0 {
		return nil
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ts[a].DeadlineMs, ts[b].DeadlineMs) })
	org := ts[order[0]].Org
	p := newPacking(s, org)
	for ahead, k := range order {
		t := ts[k]
		if r := p.pack(&t); r != nil {
			r.Task, r.Ahead = k, ahead
			return r
		}
	}
	return nil
}

// packing is the machines as the tasks packed so far left them.
type packing struct {
	s    *State
	org  int
	pi   int64   // org's PI counting the tasks packed to start now
	own  []int64 // per machine: org's draw on it
	work []int64 // per machine: MFlop ahead of a new task
	busy []bool  // per machine: runs a task (or one of the batch)
	nice []bool  // per machine: runs exactly one nice task
	// protected is DeadlineProtected for the organisation's tasks.
	protected []bool
}

func newPacking(s *State, org int) *packing {
	n := len(s.Machines)
	p := &packing{s: s, org: org, own: make([]int64, n), work: make([]int64, n), busy: make([]bool, n), nice: make([]bool, n),
		protected: DeadlineProtected(s, Task{Org: org})}
	count := make([]int, n)
	for _, r := range s.Running {
		m := &s.Machines[r.Machine]
		c := ShareOf(m.Capacity, r.Task.Request).Of(m.BusyMilliW)
		if r.Task.Org == org {
			p.pi += c
			p.own[r.Machine] += c
		}
		p.work[r.Machine] = max(p.work[r.Machine], min(max(r.Task.SizeMFlop, 0), MaxDeadlineMFlop))
		count[r.Machine]++
		p.busy[r.Machine] = true
		p.nice[r.Machine] = r.Task.Class == Nice
	}
	for j := range p.nice {
		p.nice[j] = p.nice[j] && count[j] == 1
	}
	return p
}

// pack maps soft task t and records it; a refusal when it cannot meet its
// deadline.
func (p *packing) pack(t *Task) *AdmitRefusal {
	s := p.s
	size := min(max(t.SizeMFlop, 1), MaxDeadlineMFlop)
	may := Eligible(s.Machines, *t, s.Orgs)
	preemptOK := unitMachines(s.Machines) && unitTask(t)
	ms := make([]DeadlineMachine, len(s.Machines))
	for j := range s.Machines {
		mc := &s.Machines[j]
		cost := ShareOf(mc.Capacity, t.Request).Of(mc.BusyMilliW)
		may[j] = may[j] && !s.held(j) && p.pi+cost-min(cost, p.own[j]) <= s.Orgs[p.org].LimitMilliW
		ms[j] = DeadlineMachine{ID: mc.ID, MFLOPS: TaskMFLOPS(mc, t), MTBFMs: mc.MTBFMs}
		switch {
		case p.nice[j] && preemptOK:
			ms[j].Running, ms[j].RunningID, ms[j].Protected = Nice, "running", p.protected[j]
			ms[j].RemainingMFlop = min(p.work[j], MaxDeadlineMFlop-size)
		case p.busy[j]:
			ms[j].Running, ms[j].RunningID, ms[j].Protected = SoftDeadline, "running", true
			ms[j].RemainingMFlop = min(p.work[j], MaxDeadlineMFlop-size)
		}
	}
	in := DeadlineInput{NowMs: s.NowMs, Machines: ms, May: may,
		Task: DeadlineTask{ID: t.ID, Class: SoftDeadline, SizeMFlop: size, DeadlineMs: t.DeadlineMs}}
	mp, err := MapDeadline(in)
	if err != nil || mp.Outcome == MapRefused {
		r := &AdmitRefusal{}
		for j, m := range ms {
			if may[j] {
				f := s.NowMs + WithMargin(PredictRunMs(min(m.RemainingMFlop+size, MaxDeadlineMFlop), m.MFLOPS))
				if r.FastestMs == 0 || f < r.FastestMs {
					r.FastestMs = f
				}
			}
		}
		return r
	}
	m := mp.Machine
	cost := ShareOf(s.Machines[m].Capacity, t.Request).Of(s.Machines[m].BusyMilliW)
	switch mp.Outcome {
	case MapRun, MapPreemptNice:
		if mp.Outcome == MapPreemptNice {
			// The nice task's draw leaves its organisation's PI.
			p.pi -= p.own[m]
			p.own[m] = 0
		}
		p.pi += cost
		p.own[m] += cost
		p.work[m] = size
	case MapReserveSoft:
		p.work[m] = min(p.work[m]+size, MaxDeadlineMFlop)
	}
	p.nice[m], p.busy[m] = false, true
	return nil
}
