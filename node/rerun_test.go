package node

import (
	"context"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/transfer"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestStaleRunReportedAfterReplacement replays, with real peers, real
// processes and the real scheduler, what the chaos smoke test found
// (docs/RELIABILITY.md): a run ends, and while its outputs wait for the
// submitting peer the ledger preempts the task, runs another task on the
// machine and places the task on the same machine again. The old run's
// end report then arrives for a task assigned there again. It must be
// booked as the end of the preempted run, and the new assignment must run:
// before the fix the report was refused and the task stayed assigned for
// ever (the owner's bridge kept taking the old run's pending stop for the
// new run's).
//
// The submitting peer's outputs handler is held (the in-process stand-in
// for the chaos test's SIGSTOP), which keeps the old run's report back
// for as long as the test needs, so the order of events is exact.
func TestStaleRunReportedAfterReplacement(t *testing.T) {
	// rr-s's own machine draws more than rr-s's 120 W limit, so its task
	// can only run on rr-o/m1; rr-o in deficit takes rr-o/m1 back by
	// preemption (TestPreemptionStopsAndReports's federation).
	peers := federation(t, "process", []string{"rr-s", "rr-o"}, map[string]string{
		"rr-s": processMachine("m1", 50, 150),
		"rr-o": processMachine("m1", 100, 100),
	}, map[string]func(*config.Config){
		"rr-s": func(c *config.Config) { c.Limit = "120W" },
	})
	s, o := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	s.n.host.Handle(transfer.ProtoOutputs, func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
		once.Do(func() { close(entered) })
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return s.n.files.HandleOutputs(ctx, remote, req)
	})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()

	rs, err := s.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{
		Argv: []string{"/bin/sh", "-c", "echo ok > out.txt"}, SizeMFlop: 1000, Outputs: []string{"out.txt"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	id := rs.TaskIDs[0]
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s's outputs never reached rr-s; task %+v", id, s.task(id))
	}
	// The run has ended and its report waits behind the outputs.
	if tk := s.task(id); tk.State != ledger.TaskRunning || tk.Machine != "rr-o/m1" {
		t.Fatalf("while its outputs are held, %s is %s on %q", id, tk.State, tk.Machine)
	}

	ro, err := o.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{
		Argv: []string{"/bin/sh", "-c", "sleep 1; echo u > u.txt"}, SizeMFlop: 1000, Outputs: []string{"u.txt"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	other := ro.TaskIDs[0]
	waitFor(t, 30*time.Second, id+" preempted, "+other+" done, "+id+" placed on rr-o/m1 again", func() bool {
		tk := o.task(id)
		return o.task(other).State == ledger.TaskDone && tk.State == ledger.TaskAssigned && tk.Machine == "rr-o/m1" &&
			len(tk.Segments) == 1 && tk.Segments[0].Outcome == ledger.OutcomePreempting
	})
	unblock()

	waitFor(t, 30*time.Second, id+" done after the old run's report", func() bool { return s.task(id).State == ledger.TaskDone })
	// One view of the ledger for every figure below.
	var (
		tk, own      ledger.Task
		stops        []ledger.PendingStop
		sAcc, oAcc   ledger.Energy
		invariantErr error
	)
	s.n.cons.View(func(l *ledger.Ledger) {
		tk, _ = l.Task(id)
		own, _ = l.Task(other)
		stops = l.PendingStops("rr-o")
		so, _ := l.Org("rr-s")
		oo, _ := l.Org("rr-o")
		sAcc, oAcc = so.Energy, oo.Energy
		invariantErr = l.CheckInvariants()
	})
	if invariantErr != nil {
		t.Fatalf("invariants: %v", invariantErr)
	}
	// The old run's report closed its preempted segment; the new
	// assignment then ran.
	if len(tk.Segments) != 2 || tk.Attempts != 2 ||
		tk.Segments[0].Machine != "rr-o/m1" || tk.Segments[0].Outcome != ledger.OutcomePreempted || tk.Segments[0].EnergyMilliJ <= 0 ||
		tk.Segments[1].Machine != "rr-o/m1" || tk.Segments[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("%s: attempts %d, segments %+v", id, tk.Attempts, tk.Segments)
	}
	if len(stops) != 0 {
		t.Fatalf("pending stops left: %+v", stops)
	}
	// The old run (an echo) was booked with the executor's measure, not
	// with the declared estimate a refused report leaves to the bridge
	// (busy power since the run's start, a span that covers the whole run
	// of rr-o's one-second task on the same machine).
	if tk.Segments[0].EnergyMilliJ >= own.Segments[0].EnergyMilliJ {
		t.Fatalf("the old run of %s was booked %d mJ, more than %s's run after it (%d mJ): its own report was not booked", id, tk.Segments[0].EnergyMilliJ, other, own.Segments[0].EnergyMilliJ)
	}
	// rr-s pays for both runs of its task, rr-o is credited for hosting
	// them; rr-o's own task is its own.
	runs := tk.Segments[0].EnergyMilliJ + tk.Segments[1].EnergyMilliJ
	mine := own.Segments[0].EnergyMilliJ
	if sAcc.UserMilliJ != runs || oAcc.OwnerOthersMilliJ != runs || oAcc.UserMilliJ != mine || oAcc.OwnerSelfMilliJ != mine {
		t.Fatalf("energy: rr-s %+v, rr-o %+v; runs of %s %d mJ, %s %d mJ", sAcc, oAcc, id, runs, other, mine)
	}
	outs := s.n.files.ListOutputs(id)
	if len(outs) != 1 || filepath.Base(outs[0]) != "out.txt" {
		t.Fatalf("outputs of %s on rr-s: %v", id, outs)
	}
	if b, err := os.ReadFile(outs[0]); err != nil || string(b) != "ok\n" {
		t.Fatalf("out.txt: %q %v", b, err)
	}
}
