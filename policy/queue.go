package policy

import (
	"fmt"

	"github.com/google/btree"
)

// Queue holds a federation's waiting tasks between scheduling passes: one
// B-tree per organisation in queue order (taskBefore), so that adding or
// removing a task costs O(log n) and a pass reads only the heads of the
// queues it serves, never the whole queue (issue 22). A caller that keeps
// one in step with its tasks sets State.Queue instead of State.Queued.
//
// The ledger keeps one: it is derived from the replicated state alone (the
// tasks in state queued, each as PolicyView would show it), so every peer
// holds the same Queue, and a restore from a snapshot rebuilds it. A pass
// never changes it: the placements it decides reach it when the ledger
// applies them.
type Queue struct {
	bestFit bool
	orgs    []*btree.BTreeG[*Task]
	byID    map[string]*Task
	// shaped counts the tasks that are not the papers' (unitTask): while
	// it is 0 and the machines are one-slot, EHOSEP runs indexed.
	shaped int
	// classed counts the tasks with a class: while it is 0 a pass skips
	// the deadline branches' look at the heads (deadline_pass.go).
	classed int
}

// queueDegree is the B-tree's degree: nodes of up to 63 pointers.
const queueDegree = 32

// NewQueue returns an empty queue for nOrgs organisations in EHOSEP's
// order, or the best-fit variant's (largest task first) when bestFit.
func NewQueue(nOrgs int, bestFit bool) *Queue {
	q := &Queue{bestFit: bestFit, byID: map[string]*Task{}}
	q.SetOrgs(nOrgs)
	return q
}

// BestFit says the queue is in the best-fit variant's order.
func (q *Queue) BestFit() bool { return q.bestFit }

// Orgs is the number of organisations the queue knows.
func (q *Queue) Orgs() int { return len(q.orgs) }

// SetOrgs grows the queue to n organisations (a federation's organisations
// are only ever added); a smaller n is ignored.
func (q *Queue) SetOrgs(n int) {
	bf := q.bestFit
	for len(q.orgs) < n {
		q.orgs = append(q.orgs, btree.NewG(queueDegree, func(a, b *Task) bool { return taskBefore(a, b, bf) }))
	}
}

// Len is the number of waiting tasks.
func (q *Queue) Len() int { return len(q.byID) }

// Waiting is the number of organisation i's waiting tasks.
func (q *Queue) Waiting(i int) int {
	if i < 0 || i >= len(q.orgs) {
		return 0
	}
	return q.orgs[i].Len()
}

// Has says a task of that ID waits.
func (q *Queue) Has(id string) bool {
	_, ok := q.byID[id]
	return ok
}

// Add puts t in its organisation's queue. It refuses, changing nothing, a
// task Validate would refuse (organisation out of range, negative size,
// malformed request or requirements) and a task whose ID already waits.
func (q *Queue) Add(t Task) error {
	if t.Org < 0 || t.Org >= len(q.orgs) {
		return fmt.Errorf("policy queue: task %q: org index %d out of range", t.ID, t.Org)
	}
	if err := checkTaskShape(&t); err != nil {
		return fmt.Errorf("policy queue: %w", err)
	}
	if q.Has(t.ID) {
		return fmt.Errorf("policy queue: task %q: already waiting", t.ID)
	}
	p := &t
	q.byID[t.ID] = p
	q.orgs[t.Org].ReplaceOrInsert(p)
	if !unitTask(p) {
		q.shaped++
	}
	if p.Class != 0 {
		q.classed++
	}
	return nil
}

// Remove takes the task of that ID out of the queue; false if none waits.
func (q *Queue) Remove(id string) bool {
	p, ok := q.byID[id]
	if !ok {
		return false
	}
	delete(q.byID, id)
	q.orgs[p.Org].Delete(p)
	if !unitTask(p) {
		q.shaped--
	}
	if p.Class != 0 {
		q.classed--
	}
	return true
}

// Tasks returns every waiting task: organisation by organisation, each in
// queue order.
func (q *Queue) Tasks() []Task {
	out := make([]Task, 0, q.Len())
	for _, tr := range q.orgs {
		tr.Ascend(func(t *Task) bool { out = append(out, *t); return true })
	}
	return out
}

// following appends to buf up to n of organisation i's waiting tasks that
// come after prev in queue order (from the first when prev is nil).
func (q *Queue) following(i int, prev *Task, n int, buf []*Task) []*Task {
	visit := func(t *Task) bool {
		if t != prev {
			buf = append(buf, t)
		}
		return len(buf) < n
	}
	if prev == nil {
		q.orgs[i].Ascend(visit)
	} else {
		q.orgs[i].AscendGreaterOrEqual(prev, visit)
	}
	return buf
}

// withQueued returns s itself when it has no Queue, else a shallow copy
// whose Queued lists the queue's tasks: for the passes that scan the queue
// anyway (HOSEP, OSEP, shared machines) and for pending reasons.
func withQueued(s *State) *State {
	if s == nil || s.Queue == nil || len(s.Queued) > 0 { // the last: Validate refuses it
		return s
	}
	c := *s
	c.Queued = s.Queue.Tasks()
	c.Queue = nil
	return &c
}

// queuedLen is the number of waiting tasks of s.
func (s *State) queuedLen() int {
	n := len(s.Queued)
	if s.Queue != nil {
		n += s.Queue.Len()
	}
	return n
}
