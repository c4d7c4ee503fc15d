package consensus

import (
	"errors"
	"sync"

	"github.com/coopgrid/coopgrid/ledger"
)

// ErrSubscriberTooSlow ends a subscription whose reader fell more than
// MaxPendingEvents behind. The subscriber re-subscribes and reconciles from
// the state (Node.View with ledger.Allocations).
var ErrSubscriberTooSlow = errors.New("subscriber fell too far behind")

// MaxPendingEvents bounds the events queued for one subscription.
const MaxPendingEvents = 1 << 16

// Event is one committed effect on a machine, delivered to the machine's
// owner: start a task (allocated) or stop one (preempted, cancelled, lost).
type Event struct {
	// Index is the log index of the entry that caused it.
	Index uint64
	ledger.Change
	// Restored says the whole state was replaced by a snapshot at Index
	// (this peer was far behind, or restarted): Change is empty, and the
	// subscriber must reconcile against the state rather than rely on the
	// events it missed.
	Restored bool
}

// Subscription delivers events in log order. Events are queued without
// blocking the state machine; a reader that falls MaxPendingEvents behind
// loses the subscription (C is closed and Err returns ErrSubscriberTooSlow).
//
// After a restart the log after the last snapshot is applied again, so
// events repeat: an executor treats them as hints and reconciles against
// ledger.Allocations for its organisation, which is the truth.
type Subscription struct {
	org    string
	ch     chan Event
	signal chan struct{}
	done   chan struct{}
	hub    *hub

	mu    sync.Mutex
	queue []Event
	// pending counts the events pushed and not yet received by the
	// reader, including those deliver has taken out of queue.
	pending int
	err     error
	closed  bool
}

// C returns the channel of events. It is closed when the subscription ends.
func (s *Subscription) C() <-chan Event { return s.ch }

// Err says why the subscription ended: nil while it runs or after Close,
// ErrSubscriberTooSlow after an overflow.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription. It is safe to call more than once.
func (s *Subscription) Close() { s.end(nil) }

func (s *Subscription) end(err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.err = err
	s.queue = nil
	close(s.done)
	s.mu.Unlock()
	s.hub.remove(s)
}

func (s *Subscription) push(evs []Event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if s.pending+len(evs) > MaxPendingEvents {
		s.mu.Unlock()
		s.end(ErrSubscriberTooSlow)
		return
	}
	s.queue = append(s.queue, evs...)
	s.pending += len(evs)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *Subscription) deliver() {
	defer close(s.ch)
	for {
		select {
		case <-s.done:
			return
		case <-s.signal:
		}
		s.mu.Lock()
		batch := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range batch {
			select {
			case s.ch <- ev:
			case <-s.done:
				return
			}
			s.mu.Lock()
			s.pending--
			s.mu.Unlock()
		}
	}
}

// hub fans the FSM's results out to subscriptions.
type hub struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

func newHub() *hub { return &hub{subs: map[*Subscription]struct{}{}} }

func (h *hub) subscribe(org string) *Subscription {
	s := &Subscription{
		org:    org,
		ch:     make(chan Event, 64),
		signal: make(chan struct{}, 1),
		done:   make(chan struct{}),
		hub:    h,
	}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	go s.deliver()
	return s
}

func (h *hub) remove(s *Subscription) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

func (h *hub) closeAll() {
	for _, s := range h.list() {
		s.Close()
	}
}

// list returns the current subscriptions. Pushing happens outside h.mu: an
// overflowing push ends the subscription, which removes it from the hub.
func (h *hub) list() []*Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Subscription, 0, len(h.subs))
	for s := range h.subs {
		out = append(out, s)
	}
	return out
}

// publish is called from the FSM goroutine, in log order, so each
// subscription's queue is in log order too.
func (h *hub) publish(res *ledger.Result) {
	if len(res.Changes) == 0 {
		return
	}
	for _, s := range h.list() {
		var evs []Event
		for _, c := range res.Changes {
			if s.org == "" || c.MachineOrg == s.org {
				evs = append(evs, Event{Index: res.Index, Change: c})
			}
		}
		if len(evs) > 0 {
			s.push(evs)
		}
	}
}

func (h *hub) restored(index uint64) {
	for _, s := range h.list() {
		s.push([]Event{{Index: index, Restored: true}})
	}
}
