package ledger

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/coopgrid/coopgrid/policy"
)

// keptQueue is the queued tasks as the scheduling pass reads them
// (policy.Queue, issue 22): kept in step with the tasks by apply, so that
// a pass neither lists nor sorts the whole queue. It is derived from the
// replicated state alone (the queued tasks as PolicyView shows them) and
// rebuilt from it on Restore; it is a cache, never an input: a pass on it
// decides exactly what a pass on the listed tasks decides (the policy's
// property tests), so a peer that has none, or lost it, still decides as
// every other.
type keptQueue struct {
	q      *policy.Queue
	orgIdx map[string]int // organisation → index in l.order
	// broken: a task the policy refuses (Queue.Add) is queued; the passes
	// list the tasks until the next Restore, and the policy refuses that
	// task there too.
	broken bool
}

// queueWanted says whether this federation's peers compute the passes
// with a policy that reads a kept queue, and in which order.
func (l *Ledger) queueWanted() (bestFit, ok bool) {
	s, ok := l.SchedulingSettings()
	if !ok {
		return false, false
	}
	switch s.Policy {
	case "ehosep":
		return false, true
	case "ehosep-bestfit":
		return true, true
	}
	return false, false
}

// buildQueue derives the kept queue from the tasks.
func (l *Ledger) buildQueue() {
	l.queue = nil
	bestFit, ok := l.queueWanted()
	if !ok {
		return
	}
	k := &keptQueue{q: policy.NewQueue(len(l.order), bestFit), orgIdx: make(map[string]int, len(l.order))}
	for i, n := range l.order {
		k.orgIdx[n] = i
	}
	l.queue = k
	for _, t := range l.bySeq {
		if t.State == TaskQueued && t.Spec.Gang == nil && !k.add(t) {
			return
		}
	}
}

func (k *keptQueue) add(t *Task) bool {
	if err := k.q.Add(policyTask(t, k.orgIdx)); err != nil {
		k.broken = true
	}
	return !k.broken
}

// syncQueue brings the kept queue in step after a command changed the
// state: the tasks it moved (Result.Transitions) leave the queue or enter
// it as they are now. It builds the queue when the federation first wants
// one (the registration that fixes the scheduling settings).
func (l *Ledger) syncQueue(res *Result) {
	if l.queue == nil {
		if _, ok := l.queueWanted(); ok {
			l.buildQueue()
		}
		return
	}
	k := l.queue
	for len(k.orgIdx) < len(l.order) {
		k.orgIdx[l.order[len(k.orgIdx)]] = len(k.orgIdx)
	}
	k.q.SetOrgs(len(l.order))
	for _, tr := range res.Transitions {
		if t := l.tasks[tr.Task]; t != nil {
			l.queueSync(t)
		}
	}
}

// queueSync puts task t in the kept queue as it is now (out of it when it
// is not queued): after a move, or a change of what the pass reads of a
// queued task (its remaining work, when a stopped run's checkpoint lands).
func (l *Ledger) queueSync(t *Task) {
	k := l.queue
	if k == nil || k.broken {
		return
	}
	k.q.Remove(t.ID)
	if t.State == TaskQueued && t.Spec.Gang == nil {
		k.add(t)
	}
}

// keptPolicyQueue returns the kept queue if a pass may read it now.
func (l *Ledger) keptPolicyQueue() *policy.Queue {
	bestFit, ok := l.queueWanted()
	if k := l.queue; ok && k != nil && !k.broken && k.q.BestFit() == bestFit && k.q.Orgs() == len(l.order) {
		return k.q
	}
	return nil
}

// checkKeptQueue is CheckInvariants' check of the kept queue: it holds the
// queued tasks, each as PolicyView shows it.
func (l *Ledger) checkKeptQueue(fail func(string, ...any)) {
	k := l.queue
	if k == nil || k.broken {
		return
	}
	orgIdx := make(map[string]int, len(l.order))
	for i, n := range l.order {
		orgIdx[n] = i
		if j, ok := k.orgIdx[n]; ok && j != i {
			fail("kept queue: organisation %q at index %d, registered at %d", n, j, i)
		}
	}
	var want []policy.Task
	for _, t := range l.bySeq {
		if t.State == TaskQueued && t.Spec.Gang == nil {
			want = append(want, policyTask(t, orgIdx))
		}
	}
	got := k.q.Tasks()
	byID := func(a, b policy.Task) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	}
	slices.SortFunc(want, byID)
	slices.SortFunc(got, byID)
	if len(got) != len(want) {
		fail("kept queue: %d tasks, %d queued", len(got), len(want))
		return
	}
	for i := range got {
		// DeepEqual first: the printed forms, which do not tell a nil
		// slice from an empty one, cost a restart of 20,000 queued tasks
		// a quarter of its restore (issue 17).
		if reflect.DeepEqual(got[i], want[i]) {
			continue
		}
		if g, w := fmt.Sprintf("%+v", got[i]), fmt.Sprintf("%+v", want[i]); g != w {
			fail("kept queue: task %s kept as %s, queued as %s", got[i].ID, g, w)
			return
		}
	}
}
