package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// GET /v1/events streams task state changes as server-sent events
// (text/event-stream), from this peer's own applied log: any peer serves
// it, and the same change has the same ID on every peer, so a client that
// lost its peer resumes on another one where it stopped.
//
// Where it starts: after the Last-Event-ID header's position if given,
// else from the index ?from=INDEX (its events included), else after what
// is applied now. Events:
//
//	event: open   id: POS  data: {"after":"POS"}   first, the stream's start
//	event: task   id: I.N  data: TaskEvent         one change, in log order
//	event: ping   id: POS  data: {"after":"POS"}   every EventKeepAlive: the position reached (with ?org= the changes filtered out move it too)
//	event: end           data: {"code","message"} last, when the peer ends the stream
//
// A position older than the peer's ring (or before the snapshot it
// restored) is refused with 410 events_gone; a client that falls that far
// behind while streaming gets an end event with code too_slow. Both mean:
// list the state again (GET /v1/tasks), then stream from the present.

// Error codes of the watch API.
const (
	// CodeEventsGone (410): the events after the requested position are
	// no longer held by this peer.
	CodeEventsGone = "events_gone"
	// CodeTooSlow ends a stream whose client fell more than the ring's
	// capacity behind (end event only).
	CodeTooSlow = "too_slow"
	// CodeShuttingDown ends the streams of a peer that stops (end event
	// only): resume on another peer, or on this one once it is back.
	CodeShuttingDown = "shutting_down"
)

// Defaults of the watch streams (ServerOptions).
const (
	DefaultMaxEventStreams   = 64
	DefaultEventWriteTimeout = 30 * time.Second
	DefaultEventKeepAlive    = 15 * time.Second
	// eventBatch bounds the events read from the ring and written at once.
	eventBatch = 512
)

// TaskEventSource is implemented by a backend that keeps the recent task
// events (package node, apitest); the server answers 404 for one without.
type TaskEventSource interface {
	TaskEvents() *EventLog
}

// streamState is the server's watch streams: their count, and the signal
// that ends them when Serve shuts down.
type streamState struct {
	active  atomic.Int64
	stopped chan struct{}
	once    sync.Once
}

func newStreamState() *streamState { return &streamState{stopped: make(chan struct{})} }

// stop ends every stream (with an end event shutting_down): Serve calls it
// before its graceful shutdown, which would otherwise wait for them.
func (s *streamState) stop() { s.once.Do(func() { close(s.stopped) }) }

// streamEnd is the data of an end event.
type streamEnd struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// streamPos is the data of open and ping events.
type streamPos struct {
	After string `json:"after"`
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "from", "org"); err != nil {
		return err
	}
	src, ok := s.b.(TaskEventSource)
	if !ok {
		return Errorf(CodeNotFound, "this peer does not stream events")
	}
	log := src.TaskEvents()
	pos, err := streamStart(r, log)
	if err != nil {
		return err
	}
	org := r.URL.Query().Get("org")
	if org != "" && !validOrgName(org) {
		return Errorf(CodeBadRequest, "org %q is not an organisation name", org)
	}
	if _, _, err := log.Read(pos, 0); err != nil {
		return &Error{Status: http.StatusGone, Code: CodeEventsGone, Message: err.Error() + ": list the tasks again, then stream from the present"}
	}
	if n := s.streams.active.Add(1); n > int64(s.opts.MaxEventStreams) {
		s.streams.active.Add(-1)
		return Errorf(CodeUnavailable, "%d event streams already open on this peer (the limit)", s.opts.MaxEventStreams)
	}
	defer s.streams.active.Add(-1)

	rc := http.NewResponseController(w)
	// A stream outlives the server's read timeout, which would end it.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &sseWriter{w: w, rc: rc, timeout: s.opts.EventWriteTimeout}
	st.buf.WriteString("retry: 2000\n\n")
	st.event("open", pos.String(), streamPos{After: pos.String()})
	if st.flush() != nil {
		return nil
	}
	keep := time.NewTicker(s.opts.EventKeepAlive)
	defer keep.Stop()
	for {
		evs, wake, err := log.Read(pos, eventBatch)
		if err != nil {
			st.event("end", "", streamEnd{Code: CodeTooSlow, Message: fmt.Sprintf("this client fell more than %d events behind: list the tasks again, then stream from the present", cap(log.ring))})
			_ = st.flush()
			return nil
		}
		for _, e := range evs {
			if org == "" || e.Org == org {
				st.event("task", e.ID, e)
			}
			pos = EventPos{e.Index, e.N}
		}
		if st.buf.Len() > 0 && st.flush() != nil {
			return nil // the client is gone or stuck past the write timeout
		}
		if len(evs) == eventBatch {
			continue
		}
		select {
		case <-wake:
		case <-keep.C:
			st.event("ping", pos.String(), streamPos{After: pos.String()})
			if st.flush() != nil {
				return nil
			}
		case <-s.streams.stopped:
			st.event("end", "", streamEnd{Code: CodeShuttingDown, Message: "this peer is shutting down: resume on another peer with the last event ID"})
			_ = st.flush()
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// streamStart is where a stream begins: Last-Event-ID, else ?from=, else
// the present.
func streamStart(r *http.Request, log *EventLog) (EventPos, error) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		p, err := ParseEventPos(id)
		if err != nil {
			return EventPos{}, Errorf(CodeBadRequest, "Last-Event-ID: %v", err)
		}
		return p, nil
	}
	if f := r.URL.Query().Get("from"); f != "" {
		idx, err := strconv.ParseUint(f, 10, 64)
		if err != nil || idx == 0 {
			return EventPos{}, Errorf(CodeBadRequest, "from %q: want a log index ≥ 1", f)
		}
		return EventPos{Index: idx - 1, N: AllOfIndex}, nil
	}
	return log.Now(), nil
}

// sseWriter buffers events and writes them at once, each write bounded by
// the timeout: a client that stops reading is dropped, never waited for
// longer.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
}

func (s *sseWriter) event(name, id string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		b, _ = json.Marshal(streamEnd{Code: CodeInternal, Message: err.Error()})
	}
	s.buf.WriteString("event: " + name + "\n")
	if id != "" {
		s.buf.WriteString("id: " + id + "\n")
	}
	s.buf.WriteString("data: ")
	s.buf.Write(b)
	s.buf.WriteString("\n\n")
}

func (s *sseWriter) flush() error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	_, err := s.w.Write(s.buf.Bytes())
	s.buf.Reset()
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
