package node

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

func simMachine(name string, gflops, watts float64) string {
	return "machines:\n  - name: " + name + "\n    gflops: " + ftoa(gflops) + "\n    busy_watts: " + ftoa(watts) + "\n"
}

func ftoa(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// TestRestartRejoinsFromDataDir: a peer stopped and started again from its
// data directory, with no bootstrap address, is a member again, brings its
// machines back up and runs work.
func TestRestartRejoinsFromDataDir(t *testing.T) {
	peers := federation(t, "sim", []string{"r-a", "r-b", "r-c"}, map[string]string{
		"r-a": simMachine("m1", 10, 100),
		"r-b": simMachine("m1", 100, 100),
		"r-c": simMachine("m1", 10, 100),
	}, nil)
	a, b := peers[0], peers[1]
	oldID := b.n.ID()
	b.close()
	waitFor(t, 10*time.Second, "r-b's machine released", func() bool { return a.machine("r-b/m1").State == ledger.MachineLost })

	b.start() // no bootstrap address: the known peers and the Raft state suffice
	if b.n.ID() != oldID {
		t.Fatalf("identity changed over a restart: %s then %s", oldID, b.n.ID())
	}
	waitFor(t, 10*time.Second, "r-b's machine up again", func() bool { return a.machine("r-b/m1").State == ledger.MachineUp })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := b.n.Status(ctx)
	if err != nil || st.Leader == "" || len(st.Peers) != 3 {
		t.Fatalf("status after restart: %+v %v", st, err)
	}
	// 100 GFLOPS × 10 s of simulated work: about 0.25 s at compression 40,
	// on r-b's machine, the most efficient one.
	resp, err := b.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 1_000_000}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]
	waitFor(t, 20*time.Second, id+" done", func() bool { return b.task(id).State == ledger.TaskDone })
	if s := b.task(id).Segments; len(s) != 1 || s[0].Source != ledger.EnergySimulated || s[0].EnergyMilliJ != 1_000_000 {
		// 100 W × 10 simulated seconds = 1000 J.
		t.Fatalf("segments %+v", s)
	}
}

// TestCrashedPeerTasksRunElsewhere: a peer running a task dies; after the
// heartbeat timeout the leader declares its machine lost, the task is
// queued again and finishes on another organisation's machine. The peer
// then comes back from its data directory and its orphaned state is
// cleaned up.
func TestCrashedPeerTasksRunElsewhere(t *testing.T) {
	// c's machine is the most efficient, so the task goes there first;
	// b's is next.
	peers := federation(t, "sim", []string{"k-a", "k-b", "k-c"}, map[string]string{
		"k-a": simMachine("m1", 10, 100),
		"k-b": simMachine("m1", 100, 100),
		"k-c": simMachine("m1", 200, 100),
	}, nil)
	a, c := peers[0], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 12,000 GFlop: 60 s simulated on k-c (1.5 s real), 120 s on k-b (3 s).
	resp, err := a.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 12_000_000}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]
	waitFor(t, 20*time.Second, id+" running on k-c", func() bool {
		tk := a.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "k-c/m1"
	})
	c.crash()

	waitFor(t, 20*time.Second, "k-c's machine lost", func() bool { return a.machine("k-c/m1").State == ledger.MachineLost })
	waitFor(t, 30*time.Second, id+" done elsewhere", func() bool { return a.task(id).State == ledger.TaskDone })
	segs := a.task(id).Segments
	if len(segs) != 2 || segs[0].Machine != "k-c/m1" || segs[0].Outcome != ledger.OutcomeLost || segs[0].Source != ledger.EnergyDeclared ||
		segs[1].Machine == "k-c/m1" || segs[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", segs)
	}

	// k-c comes back: its machine is up again.
	c.start()
	waitFor(t, 20*time.Second, "k-c's machine up again", func() bool { return a.machine("k-c/m1").State == ledger.MachineUp })
}

// TestRestartCleansOrphans: a peer killed while its machine runs a task
// finds, at restart, the ledger saying the task runs there; it declares
// the machine lost (the task is queued again and runs) and brings it back.
func TestRestartCleansOrphans(t *testing.T) {
	// One peer alone: nobody else declares its machine lost, the restart
	// reconciliation must.
	solo := newTNode(t, "o-a", "", simMachine("m1", 100, 100), testConfig("sim"))
	solo.start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 60 s simulated: 1.5 s real.
	resp, err := solo.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 6_000_000}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]
	waitFor(t, 20*time.Second, id+" running", func() bool { return solo.task(id).State == ledger.TaskRunning })
	solo.crash()
	solo.start()
	waitFor(t, 30*time.Second, id+" done after the restart", func() bool { return solo.task(id).State == ledger.TaskDone })
	segs := solo.task(id).Segments
	if len(segs) != 2 || segs[0].Outcome != ledger.OutcomeLost || segs[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", segs)
	}
	if m := solo.machine("o-a/m1"); m.State != ledger.MachineUp {
		t.Fatalf("machine %+v", m)
	}
	// A single member cannot leave its own federation.
	if err := solo.n.Leave(ctx); apiCode(err) != api.CodeConflict {
		t.Fatalf("leave of the only member: %v", err)
	}
}

// TestSecondFederationNeverByAccident: a peer initialised to join, started
// with no bootstrap address and no known peers, refuses to start rather
// than bootstrap a federation of its own.
func TestSecondFederationNeverByAccident(t *testing.T) {
	first := newTNode(t, "f-a", "", "", testConfig("sim"))
	joiner := newTNode(t, "f-b", first.secret(), "", testConfig("sim"))
	_, err := Start(context.Background(), Options{DataDir: joiner.dir, Logger: testLogger("f-b")})
	if !errors.Is(err, ErrNoWayToJoin) {
		t.Fatalf("start without a way to join: %v", err)
	}
}
