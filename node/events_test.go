package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// serveAPI serves tn's HTTP API on loopback until stop.
func serveAPI(t *testing.T, tn *tnode) (c *api.Client, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tn.n.APIToken()
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(tn.n, api.ServerOptions{Token: tok, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("%s: serve: %v", tn.org, err)
			}
		})
	}
	t.Cleanup(stop)
	return api.NewClient("http://"+ln.Addr().String(), tok, nil), stop
}

// TestWatchSurvivesTheLossOfTheLeader: a client follows the task events of
// a three-peer federation on the leader's API; the leader dies mid-run.
// The client resumes on another peer after its last event and sees the
// run to its end: exactly the events that peer applied, from the first,
// none missed or repeated, and they fold into the ledger's task states.
func TestWatchSurvivesTheLossOfTheLeader(t *testing.T) {
	waitsMostly(t)
	peers := federation(t, "sim", []string{"w-a", "w-b", "w-c"}, map[string]string{
		"w-a": simMachine("a1", 10, 100),
		"w-b": simMachine("b1", 10, 100),
		"w-c": simMachine("c1", 10, 100),
	}, nil)
	var lead *tnode
	var others []*tnode
	for _, p := range peers {
		if p.n.cons.IsLeader() {
			lead = p
		} else {
			others = append(others, p)
		}
	}
	if lead == nil || len(others) != 2 {
		t.Fatal("no single leader")
	}
	leadClient, stopLead := serveAPI(t, lead)
	clients := []*api.Client{leadClient}
	for _, p := range others {
		c, _ := serveAPI(t, p)
		clients = append(clients, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// 12 tasks of about 1 s each (sim, compressed 40×) on three machines.
	req := api.SubmitRequest{Job: "watch"}
	for range 12 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Argv: []string{"sim"}, SizeMFlop: 400_000, WallLimitMs: 600_000})
	}
	sub, err := others[0].n.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pending := map[string]bool{}
	for _, id := range sub.TaskIDs {
		pending[id] = true
	}
	var (
		got    []api.TaskEvent
		killed bool
	)
	errEnd := errors.New("every task ended")
	_, err = api.Follow(ctx, clients, api.EventQuery{From: 1}, func(e api.TaskEvent) error {
		got = append(got, e)
		if e.Terminal() {
			delete(pending, e.Task)
		}
		// Once tasks run, the leader (the peer watched) dies.
		if !killed && e.Reason == "started" {
			killed = true
			t.Logf("killing the leader %s after event %s", lead.org, e.ID)
			lead.crash()
			stopLead()
		}
		if len(pending) == 0 {
			return errEnd
		}
		return nil
	})
	if !errors.Is(err, errEnd) {
		t.Fatalf("follow: %v (still pending %v)", err, pending)
	}
	if !killed {
		t.Fatal("the leader was never killed")
	}
	// What a surviving peer applied, from its first event.
	survivor := others[0]
	waitFor(t, 20*time.Second, "the survivor applies the last event", func() bool {
		return survivor.n.TaskEvents().Now().Index >= got[len(got)-1].Index
	})
	want, _, err := survivor.n.TaskEvents().Read(api.EventPos{}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want = want[:min(len(want), len(got))]
	if len(want) != len(got) {
		t.Fatalf("the client saw %d events, the survivor applied %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d: the client saw %+v, the survivor applied %+v", i, got[i], want[i])
		}
	}
	states := map[string]string{}
	for _, e := range got {
		if states[e.Task] != e.From {
			t.Fatalf("event %s: %s from %q, but it was %q", e.ID, e.Task, e.From, states[e.Task])
		}
		states[e.Task] = e.To
	}
	reasons := map[string]int{}
	for _, e := range got {
		reasons[e.Reason]++
	}
	t.Logf("%d events: %v", len(got), reasons)
	for _, id := range sub.TaskIDs {
		if s := survivor.task(id).State; string(s) != states[id] || s != ledger.TaskDone {
			t.Errorf("%s: the ledger says %s, the events %s", id, s, states[id])
		}
	}
	if got[0].Reason != "submitted" {
		t.Errorf("the first event is %+v, want a submission", got[0])
	}
}

// TestWatchAfterARestartFromASnapshot: a peer restarted from a snapshot
// never applied the entries before it one by one, so it refuses a
// position before the snapshot with 410 events_gone (the client lists
// again) and streams what comes after.
func TestWatchAfterARestartFromASnapshot(t *testing.T) {
	peers := federation(t, "sim", []string{"s-a"}, map[string]string{"s-a": simMachine("a1", 10, 100)}, nil)
	a := peers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	task := api.SubmitTask{Argv: []string{"sim"}, SizeMFlop: 1000, WallLimitMs: 600_000}
	sub, err := a.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{task}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, sub.TaskIDs[0]+" done", func() bool { return a.task(sub.TaskIDs[0]).State == ledger.TaskDone })
	if evs, _, err := a.n.TaskEvents().Read(api.EventPos{}, 100); err != nil || len(evs) != 4 {
		t.Fatalf("before the restart: %d events, %v; want submitted, allocated, started, done", len(evs), err)
	}
	if err := a.n.cons.Snapshot(); err != nil {
		t.Fatal(err)
	}
	snap := a.n.cons.AppliedIndex()
	a.close()
	a.start()

	c, _ := serveAPI(t, a)
	_, err = c.Events(ctx, api.EventQuery{From: 1}, func(e api.TaskEvent) error {
		t.Errorf("an event from before the snapshot: %+v", e)
		return nil
	})
	if api.CodeOf(err) != api.CodeEventsGone {
		t.Fatalf("from index 1 after a restart from the snapshot at %d: %v, want events_gone", snap, err)
	}
	// After the snapshot: the next task's life. The clean stop took a
	// snapshot of its own, later than snap (node.snapshotAtStop), so the
	// stream starts at what the restarted peer has applied.
	snap = a.n.cons.AppliedIndex()
	errDone := errors.New("done")
	var got []string
	opened := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Events(ctx, api.EventQuery{After: api.EventPos{Index: snap, N: api.AllOfIndex}.String(), OnOpen: func(string) { close(opened) }}, func(e api.TaskEvent) error {
			got = append(got, e.From+"→"+e.To)
			if e.Terminal() {
				return errDone
			}
			return nil
		})
		errc <- err
	}()
	<-opened
	if _, err := a.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{task}}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, errDone) {
		t.Fatalf("after the snapshot: %v (saw %v)", err, got)
	}
	if want := "→queued queued→assigned assigned→running running→done"; strings.Join(got, " ") != want {
		t.Fatalf("after the snapshot: %q, want %q", got, want)
	}
}
