package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

var errEnough = errors.New("enough")

// collect streams from c until fn has seen n events (or the stream ends).
func collect(t *testing.T, ctx context.Context, c *api.Client, q api.EventQuery, n int) ([]api.TaskEvent, string, error) {
	t.Helper()
	var got []api.TaskEvent
	last, err := c.Events(ctx, q, func(e api.TaskEvent) error {
		got = append(got, e)
		if len(got) == n {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return got, last, err
}

// TestEventsStreamTheTaskStatesInOrder streams the seeded ledger's history
// from index 1, then what is submitted and cancelled while it streams:
// the events come in log order, fold into exactly the states GET
// /v1/tasks lists, and resuming after any event gives exactly the rest.
func TestEventsStreamTheTaskStatesInOrder(t *testing.T) {
	b, srv := serve(t, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	history, _, err := b.TaskEvents().Read(api.EventPos{}, 1<<20)
	if err != nil || len(history) == 0 {
		t.Fatalf("the seeded ledger's events: %d, %v", len(history), err)
	}
	// A submission and a cancellation while the stream is open.
	opened := make(chan string, 1)
	var got []api.TaskEvent
	done := make(chan error, 1)
	go func() {
		_, err := c.Events(ctx, api.EventQuery{From: 1, OnOpen: func(a string) { opened <- a }}, func(e api.TaskEvent) error {
			got = append(got, e)
			if e.Reason == "cancelled" {
				return errEnough
			}
			return nil
		})
		done <- err
	}()
	if a := <-opened; a != "0" {
		t.Errorf("a stream from index 1 opens after %q, want 0", a)
	}
	sub, err := b.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{Argv: []string{"/bin/true"}, SizeMFlop: 10, WallLimitMs: 1000}, {Argv: []string{"/bin/true"}, SizeMFlop: 10, WallLimitMs: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Cancel(ctx, sub.TaskIDs[1]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, errEnough) {
		t.Fatalf("stream: %v", err)
	}
	if len(got) != len(history)+3 {
		t.Fatalf("%d events, want the %d of the history and 3 (2 submitted, 1 cancelled)", len(got), len(history))
	}
	states := map[string]string{}
	for i, e := range got {
		if i > 0 && !(api.EventPos{Index: got[i-1].Index, N: got[i-1].N}).Before(api.EventPos{Index: e.Index, N: e.N}) {
			t.Fatalf("event %d (%s) does not come after %s", i, e.ID, got[i-1].ID)
		}
		if states[e.Task] != e.From {
			t.Fatalf("event %s: %s from %q, but it was %q", e.ID, e.Task, e.From, states[e.Task])
		}
		states[e.Task] = e.To
	}
	tail := got[len(got)-3:]
	if tail[0].Task != sub.TaskIDs[0] || tail[0].Reason != "submitted" || tail[1].Task != sub.TaskIDs[1] || tail[2].Task != sub.TaskIDs[1] || tail[2].To != "cancelled" {
		t.Fatalf("the last events: %+v", tail)
	}
	tasks, err := c.Tasks(ctx, api.TaskQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != len(states) {
		t.Fatalf("%d tasks listed, %d in the events", len(tasks), len(states))
	}
	for _, task := range tasks {
		if states[task.ID] != task.State {
			t.Errorf("%s is %s, the events say %q", task.ID, task.State, states[task.ID])
		}
	}

	// Resuming after any event gives exactly the rest, whatever the form
	// of the position.
	for _, k := range []int{0, len(got) / 2, len(got) - 2} {
		rest, _, err := collect(t, ctx, c, api.EventQuery{After: got[k].ID}, len(got)-k-1)
		if err != nil {
			t.Fatalf("resume after %s: %v", got[k].ID, err)
		}
		for i, e := range rest {
			if e != got[k+1+i] {
				t.Fatalf("resume after %s: event %d is %+v, want %+v", got[k].ID, i, e, got[k+1+i])
			}
		}
	}
	// ?from=INDEX includes that index's events.
	last := got[len(got)-1]
	rest, _, err := collect(t, ctx, c, api.EventQuery{From: last.Index}, 1)
	if err != nil || len(rest) != 1 || rest[0] != last {
		t.Fatalf("from %d: %+v, %v; want %+v", last.Index, rest, err, last)
	}
}

// TestEventsNeedTheToken: the stream is a read route like the others.
func TestEventsNeedTheToken(t *testing.T) {
	_, srv := serve(t, api.ServerOptions{})
	for _, auth := range []string{"-", "Bearer wrong-token"} {
		r := call(t, srv, http.MethodGet, "/v1/events?from=1", "", auth)
		if r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), `"unauthorized"`) || strings.Contains(string(r.body), "event:") {
			t.Errorf("auth %q: %d %s, want 401 unauthorized and no event", auth, r.status, r.body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := api.NewClient(srv.URL, "wrong-token", nil).Events(ctx, api.EventQuery{From: 1}, func(api.TaskEvent) error {
		t.Error("an event reached a client with a wrong token")
		return nil
	})
	if api.CodeOf(err) != api.CodeUnauthorized || api.Resumable(err) {
		t.Fatalf("wrong token: %v, want unauthorized, not resumable", err)
	}
}

// TestEventsBadPositions are refused with 400 before anything streams.
func TestEventsBadPositions(t *testing.T) {
	_, srv := serve(t, api.ServerOptions{})
	for _, path := range []string{"/v1/events?from=x", "/v1/events?from=0", "/v1/events?since=3", "/v1/events?org=-bad"} {
		r := call(t, srv, http.MethodGet, path, "")
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"bad_request"`) {
			t.Errorf("%s: %d %s, want 400 bad_request", path, r.status, r.body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Last-Event-ID", "12.x")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Last-Event-ID 12.x: %d, want 400", resp.StatusCode)
	}
}

// smallLogBackend is a registered organisation whose event log holds
// capacity events.
func smallLogBackend(t *testing.T, capacity int) *apitest.Backend {
	t.Helper()
	b := apitest.New("uni-a", "peerA", nil)
	b.SetEventLog(api.NewEventLog(capacity))
	if err := b.Register("uni-a", "peerA", 1_000_000); err != nil {
		t.Fatal(err)
	}
	return b
}

func submitN(t *testing.T, b *apitest.Backend, n int) []string {
	t.Helper()
	ts := make([]api.SubmitTask, n)
	for i := range ts {
		ts[i] = api.SubmitTask{Argv: []string{"/bin/true"}, SizeMFlop: 1, WallLimitMs: 1000}
	}
	r, err := b.Submit(context.Background(), api.SubmitRequest{Tasks: ts})
	if err != nil {
		t.Fatal(err)
	}
	return r.TaskIDs
}

// TestEventsOlderThanTheRing: a position the ring no longer holds is
// refused with 410 events_gone (not resumable: list again); the present
// still streams.
func TestEventsOlderThanTheRing(t *testing.T) {
	b := smallLogBackend(t, 4)
	submitN(t, b, 10)
	srv := serveBackend(t, b, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range []api.EventQuery{{From: 1}, {From: 2}, {After: "2.4"}} {
		_, _, err := collect(t, ctx, c, q, 1)
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeEventsGone || e.Status != http.StatusGone || api.Resumable(err) {
			t.Fatalf("%+v: %v, want 410 events_gone, not resumable", q, err)
		}
	}
	// The ten submitted tasks are events 2.0-2.9; the last four are held.
	got, _, err := collect(t, ctx, c, api.EventQuery{After: "2.5"}, 4)
	if err != nil || len(got) != 4 || got[0].ID != "2.6" || got[3].ID != "2.9" {
		t.Fatalf("after 2.5: %+v, %v; want 2.6-2.9", got, err)
	}
	// From the present: only what comes next.
	opened := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		got, _, err := collect(t, ctx, c, api.EventQuery{OnOpen: func(string) { close(opened) }}, 1)
		if err == nil && (len(got) != 1 || got[0].ID != "3.0") {
			err = fmt.Errorf("got %+v, want 3.0 only", got)
		}
		errc <- err
	}()
	<-opened
	submitN(t, b, 1)
	if err := <-errc; err != nil {
		t.Fatalf("from the present: %v", err)
	}
}

// TestEventsSlowClientIsDroppedWithoutBlocking: a client that stops
// reading while far more than the ring passes by gets, once it reads
// again, the events that were in flight and then an end event too_slow;
// the appends never waited for it.
func TestEventsSlowClientIsDroppedWithoutBlocking(t *testing.T) {
	log := api.NewEventLog(64)
	b := smallLogBackend(t, 64)
	b.SetEventLog(log)
	srv := serveBackend(t, b, api.ServerOptions{EventWriteTimeout: time.Minute})
	c := api.NewClient(srv.URL, token, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := log.Now().Index
	stalled, release, opened := make(chan struct{}), make(chan struct{}), make(chan struct{})
	n := 0
	errc := make(chan error, 1)
	go func() {
		_, err := c.Events(ctx, api.EventQuery{OnOpen: func(string) { close(opened) }}, func(api.TaskEvent) error {
			n++
			if n == 1 {
				close(stalled)
				<-release
			}
			return nil
		})
		errc <- err
	}()
	// 40 MB of events, far beyond the socket buffers and the ring.
	big := strings.Repeat("x", 1000)
	evs := make([]api.TaskEvent, 100)
	for i := range evs {
		evs[i] = api.TaskEvent{Task: "t", Org: "uni-a", To: "queued", Reason: big}
	}
	<-opened
	log.Append(start+1, evs[:1])
	<-stalled
	for i := uint64(2); i <= 400; i++ {
		log.Append(start+i, evs)
	}
	close(release)
	err := <-errc
	if api.CodeOf(err) != api.CodeTooSlow || api.Resumable(err) {
		t.Fatalf("the slow client's stream ended with %v, want too_slow", err)
	}
	if n >= 399*100 {
		t.Fatalf("the slow client received all %d events", n)
	}
}

// TestEventsStuckClientFreesItsSlot: a client that never reads again is
// dropped after the write timeout (the ring holds everything: only the
// stuck write ends it); with one stream allowed, a second client is
// refused (503) while the first holds it, and served after.
func TestEventsStuckClientFreesItsSlot(t *testing.T) {
	log := api.NewEventLog(100_000)
	b := smallLogBackend(t, 64)
	b.SetEventLog(log)
	srv := serveBackend(t, b, api.ServerOptions{EventWriteTimeout: 300 * time.Millisecond, MaxEventStreams: 1})
	c := api.NewClient(srv.URL, token, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stuck, release, opened := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(release)
	go func() {
		_, _ = c.Events(ctx, api.EventQuery{OnOpen: func(string) { close(opened) }}, func(api.TaskEvent) error {
			select {
			case <-stuck:
			default:
				close(stuck)
			}
			<-release
			return nil
		})
	}()
	big := strings.Repeat("x", 1000)
	evs := make([]api.TaskEvent, 100)
	for i := range evs {
		evs[i] = api.TaskEvent{Task: "t", Org: "uni-a", To: "queued", Reason: big}
	}
	start := log.Now().Index
	<-opened
	log.Append(start+1, evs[:1])
	<-stuck
	_, _, err := collect(t, ctx, c, api.EventQuery{}, 1)
	if api.CodeOf(err) != api.CodeUnavailable {
		t.Fatalf("a second stream while the first holds the only slot: %v, want unavailable", err)
	}
	for i := uint64(2); i <= 400; i++ {
		log.Append(start+i, evs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c2 := api.NewClient(srv.URL, token, nil)
		opened := false
		sctx, scancel := context.WithCancel(ctx)
		_, err := c2.Events(sctx, api.EventQuery{OnOpen: func(string) { opened = true; scancel() }}, func(api.TaskEvent) error { return nil })
		scancel()
		if opened {
			break
		}
		if api.CodeOf(err) != api.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("the stuck client still holds the slot: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFollowResumesOnAnotherServer: the peer a client follows shuts down
// mid-stream (end event shutting_down); Follow resumes on the next one
// after its last event, and the client misses nothing and sees nothing
// twice.
func TestFollowResumesOnAnotherServer(t *testing.T) {
	b := smallLogBackend(t, 1024)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var clients []*api.Client
	stops := make([]context.CancelFunc, 2)
	served := make([]chan error, 2)
	for i := range stops {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		stops[i], served[i] = stop, make(chan error, 1)
		go func(ch chan error) {
			ch <- api.NewServer(b, api.ServerOptions{Token: token, Logger: quiet}).Serve(sctx, ln)
		}(served[i])
		clients = append(clients, api.NewClient("http://"+ln.Addr().String(), token, nil))
	}
	defer stops[1]()
	var got []api.TaskEvent
	ids := submitN(t, b, 5)
	_, err := api.Follow(ctx, clients, api.EventQuery{From: 1}, func(e api.TaskEvent) error {
		got = append(got, e)
		switch len(got) {
		case 5:
			// The first server goes away mid-stream; more tasks come
			// meanwhile.
			stops[0]()
			if err := <-served[0]; err != nil {
				t.Errorf("serve: %v", err)
			}
			ids = append(ids, submitN(t, b, 5)...)
		case 10:
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("follow: %v", err)
	}
	for i, e := range got {
		if e.Task != ids[i] || e.Reason != "submitted" {
			t.Fatalf("event %d: %+v, want %s submitted (missed or repeated)", i, e, ids[i])
		}
	}
}
