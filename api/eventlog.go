package api

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// TaskEvent is one task's change of state, as GET /v1/events streams it.
// Index and N place it in the replicated log: the same change has the
// same Index and N on every peer, so a client resumes on any peer.
type TaskEvent struct {
	// ID is "INDEX.N", the server-sent event's id: what a client resumes
	// after (Last-Event-ID).
	ID string `json:"id"`
	// Index is the Raft log index of the entry that made the change; N its
	// position among that entry's changes (from 0).
	Index uint64 `json:"index"`
	N     int    `json:"n"`
	Task  string `json:"task"`
	Org   string `json:"org"`
	// From is "" for a task just submitted.
	From    string `json:"from"`
	To      string `json:"to"`
	Machine string `json:"machine,omitempty"`
	// Reason is submitted, allocated, preempted, started, done, failed,
	// cancelled or lost.
	Reason string `json:"reason"`
}

// Terminal says whether the event ends its task (done, failed, cancelled).
func (e TaskEvent) Terminal() bool {
	return e.To == "done" || e.To == "failed" || e.To == "cancelled"
}

// EventPos is a position in the stream of task events: after it come the
// events of a later index, and those of the same index with a larger N.
// N = AllOfIndex places it after every event of Index.
type EventPos struct {
	Index uint64
	N     int
}

// AllOfIndex is EventPos.N for a position after all of an index's events.
const AllOfIndex = math.MaxInt

// Before orders positions.
func (p EventPos) Before(q EventPos) bool {
	return p.Index < q.Index || p.Index == q.Index && p.N < q.N
}

// String is the position as an event ID: "INDEX.N", or "INDEX" after all
// of an index.
func (p EventPos) String() string {
	if p.N == AllOfIndex {
		return strconv.FormatUint(p.Index, 10)
	}
	return strconv.FormatUint(p.Index, 10) + "." + strconv.Itoa(p.N)
}

// ParseEventPos reads an event ID ("INDEX.N" or "INDEX").
func ParseEventPos(s string) (EventPos, error) {
	is, ns, dotted := strings.Cut(s, ".")
	idx, err := strconv.ParseUint(is, 10, 64)
	if err != nil {
		return EventPos{}, fmt.Errorf("event ID %q: want INDEX or INDEX.N", s)
	}
	if !dotted {
		return EventPos{Index: idx, N: AllOfIndex}, nil
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 0 {
		return EventPos{}, fmt.Errorf("event ID %q: want INDEX or INDEX.N", s)
	}
	return EventPos{Index: idx, N: n}, nil
}

// ErrEventsGone says the events after a position are no longer all held:
// older than the ring, or before the snapshot this peer restored. The
// client lists the state again, then resumes from the present.
var ErrEventsGone = errors.New("events no longer held")

// DefaultEventLogCapacity is the events a peer keeps for resuming clients
// (about 10 MB).
const DefaultEventLogCapacity = 1 << 16

// EventLog is a peer's bounded memory of recent task events, fed in log
// order by whoever applies the log (Append, Reset) and read by the watch
// streams (Read). Append never waits for a reader: a reader that falls
// behind by more than the capacity finds its position gone. Safe for
// concurrent use.
type EventLog struct {
	mu   sync.Mutex
	ring []TaskEvent
	head int // the oldest event's slot
	n    int // events held
	// gone: the events up to it (included) are not held.
	gone EventPos
	// last is the last index appended or restored.
	last uint64
	// wake is closed and replaced at every Append and Reset.
	wake chan struct{}
}

// NewEventLog returns an empty log holding at most capacity events
// (DefaultEventLogCapacity when capacity ≤ 0).
func NewEventLog(capacity int) *EventLog {
	if capacity <= 0 {
		capacity = DefaultEventLogCapacity
	}
	return &EventLog{ring: make([]TaskEvent, capacity), wake: make(chan struct{})}
}

// Append records the events of the entry at index, in order (their Index,
// N and ID are set here); an entry without events only advances the log.
// Entries come in increasing index order; an index not above the last is
// ignored (a replay).
func (l *EventLog) Append(index uint64, evs []TaskEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index <= l.last {
		return
	}
	l.last = index
	for i, e := range evs {
		e.Index, e.N = index, i
		e.ID = EventPos{index, i}.String()
		slot := (l.head + l.n) % len(l.ring)
		if l.n == len(l.ring) {
			old := l.ring[l.head]
			l.gone = EventPos{old.Index, old.N}
			l.head = (l.head + 1) % len(l.ring)
		} else {
			l.n++
		}
		l.ring[slot] = e
	}
	l.signal()
}

// Reset forgets every event: the state was replaced by a snapshot at
// index, so the events up to it are unknown here.
func (l *EventLog) Reset(index uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// An empty ring holds nothing to clear: a start-up's restore leaves
	// the fresh ring's pages untouched (64 Ki events, megabytes of RSS).
	if l.n > 0 {
		clear(l.ring)
	}
	l.head, l.n = 0, 0
	l.gone = EventPos{index, AllOfIndex}
	l.last = index
	l.signal()
}

func (l *EventLog) signal() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// Now is the position after everything appended so far: a stream from it
// sees only what comes next.
func (l *EventLog) Now() EventPos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return EventPos{l.last, AllOfIndex}
}

// Read returns up to max events after pos, and a channel closed when more
// may have arrived. It fails with ErrEventsGone when events after pos are
// no longer held. pos may be ahead of the log: the events come as the
// entries are applied.
func (l *EventLog) Read(pos EventPos, max int) ([]TaskEvent, <-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pos.Before(l.gone) {
		return nil, l.wake, fmt.Errorf("after %s: %w (this peer holds the events after %s)", pos, ErrEventsGone, l.gone)
	}
	first := sort.Search(l.n, func(i int) bool {
		e := &l.ring[(l.head+i)%len(l.ring)]
		return pos.Before(EventPos{e.Index, e.N})
	})
	k := min(l.n-first, max)
	out := make([]TaskEvent, k)
	for i := range out {
		out[i] = l.ring[(l.head+first+i)%len(l.ring)]
	}
	return out, l.wake, nil
}
