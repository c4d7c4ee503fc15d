package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// resultQueue delivers results in order on a channel without ever blocking
// the producer: results wait in a slice until the consumer reads them.
type resultQueue struct {
	out chan Result

	mu        sync.Mutex
	buf       []Result
	finishing bool
	wake      chan struct{}
}

func newResultQueue() *resultQueue {
	q := &resultQueue{out: make(chan Result), wake: make(chan struct{}, 1)}
	go q.run()
	return q
}

func (q *resultQueue) push(r Result) {
	q.mu.Lock()
	q.buf = append(q.buf, r)
	q.mu.Unlock()
	q.poke()
}

func (q *resultQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *resultQueue) run() {
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.buf) == 0 {
			fin := q.finishing
			q.mu.Unlock()
			if fin {
				return
			}
			<-q.wake
			continue
		}
		r := q.buf[0]
		q.buf[0] = Result{}
		q.buf = q.buf[1:]
		q.mu.Unlock()
		q.out <- r
	}
}

// finish closes the channel once every queued result has been read. It
// does not wait for the consumer: the delivering goroutine ends when the
// consumer has drained the channel.
func (q *resultQueue) finish() {
	q.mu.Lock()
	q.finishing = true
	q.mu.Unlock()
	q.poke()
}

// registry tracks which task runs on which machine. T is the executor's
// own record of a run.
type registry[T any] struct {
	machines map[string]MachineConfig

	mu     sync.Mutex
	closed bool
	tasks  map[string]T
	busy   map[string][]string // machine → IDs of the tasks running there
	// runs counts the accepted runs whose result is not queued yet. It is
	// incremented under mu, so once close has run no Add races a Wait.
	runs sync.WaitGroup
}

func newRegistry[T any](ms []MachineConfig) (*registry[T], error) {
	set, err := machineSet(ms)
	if err != nil {
		return nil, err
	}
	return &registry[T]{machines: set, tasks: make(map[string]T), busy: make(map[string][]string)}, nil
}

// reserve claims machine for task id, or says why no Result will come.
func (r *registry[T]) reserve(machine, id string, t T) (MachineConfig, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.machines[machine]
	switch {
	case r.closed:
		return m, ErrClosed
	case !ok:
		return m, fmt.Errorf("start %s on %q: %w", id, machine, ErrUnknownMachine)
	}
	// A machine runs at most one task per CPU it declares (one, for a
	// machine without CPUs): the ledger places only requests that fit,
	// this is the executor's own bound on what it is asked.
	if others := r.busy[machine]; len(others) >= int(max(1, m.CPUs)) {
		return m, fmt.Errorf("start %s on %q: %w (running %s)", id, machine, ErrMachineBusy, strings.Join(others, ", "))
	}
	if _, running := r.tasks[id]; running {
		return m, fmt.Errorf("start %s: %w", id, ErrTaskRunning)
	}
	r.tasks[id] = t
	r.busy[machine] = append(r.busy[machine], id)
	r.runs.Add(1)
	return m, nil
}

func (r *registry[T]) release(machine, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tasks, id)
	if i := slices.Index(r.busy[machine], id); i >= 0 {
		r.busy[machine] = slices.Delete(r.busy[machine], i, i+1)
		if len(r.busy[machine]) == 0 {
			delete(r.busy, machine)
		}
	}
}

func (r *registry[T]) get(id string) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	return t, ok
}

func (r *registry[T]) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.tasks))
	for id := range r.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// close refuses further starts and returns the running tasks.
func (r *registry[T]) close() (running []T, already bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	already = r.closed
	r.closed = true
	for _, t := range r.tasks {
		running = append(running, t)
	}
	return running, already
}

func machineList(set map[string]MachineConfig) []MachineConfig {
	ms := make([]MachineConfig, 0, len(set))
	for _, m := range set {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms
}

// stopAll stops every task concurrently with the given grace and waits.
func stopAll(ctx context.Context, ids []string, grace time.Duration, stop func(context.Context, string, time.Duration) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stop(ctx, id, grace)
		}()
	}
	wg.Wait()
	// A task that ended by itself meanwhile is not an error.
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrUnknownTask) {
			return err
		}
	}
	return nil
}

// awaitGate waits for a run's gate (TaskSpec.Gate): true lets the task
// run; false, a closed channel or a stop request does not.
func awaitGate(gate <-chan bool, stopped <-chan struct{}) bool {
	select {
	case ok := <-gate:
		return ok
	case <-stopped:
		return false
	}
}
