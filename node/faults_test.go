package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/coopgrid/coopgrid/config"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
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

	// r-c leaves: the federation goes on with two members, r-c's machine
	// is released, and its node stops by itself.
	c := peers[2]
	if err := c.n.Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	select {
	case <-c.n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not stop after leaving")
	}
	if c.n.Err() != nil {
		t.Fatalf("stopped with %v", c.n.Err())
	}
	waitFor(t, 10*time.Second, "two members", func() bool {
		st, err := a.n.Status(ctx)
		return err == nil && len(st.Peers) == 2 && st.Leader != ""
	})
	if m := a.machine("r-c/m1"); m.State != ledger.MachineLost {
		t.Fatalf("machine of the peer that left: %+v", m)
	}
}

// TestCrashedPeerTasksRunElsewhere: a peer running a task dies; after the
// heartbeat timeout the leader declares its machine lost, the task is
// queued again and finishes on another organisation's machine. The peer
// then comes back from its data directory and its orphaned state is
// cleaned up.
func TestCrashedPeerTasksRunElsewhere(t *testing.T) {
	waitsMostly(t)
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

// TestPreemptionStopsAndReports: uni-a's task runs on uni-b's machine;
// uni-b submits work, and EHOSEP gives uni-b its machine back by
// preempting uni-a's task. uni-b's peer stops the run and reports the
// stop with its energy; uni-a's task runs again elsewhere and finishes.
func TestPreemptionStopsAndReports(t *testing.T) {
	// p-a's machine draws more than p-b's limit (100 W), so p-b cannot take
	// it: the policy must preempt on p-b's own machine.
	peers := federation(t, "sim", []string{"p-a", "p-b"}, map[string]string{
		"p-a": simMachine("m1", 50, 150),
		"p-b": simMachine("m1", 100, 100),
	}, nil)
	a, b := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 40,000 GFlop: 400 s simulated on p-b/m1 (10 s real), 800 s on p-a/m1.
	ra, err := a.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 40_000_000}}})
	if err != nil {
		t.Fatal(err)
	}
	ta := ra.TaskIDs[0]
	waitFor(t, 20*time.Second, ta+" running on p-b/m1", func() bool {
		tk := a.task(ta)
		return tk.State == ledger.TaskRunning && tk.Machine == "p-b/m1"
	})
	rb, err := b.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 100_000}}})
	if err != nil {
		t.Fatal(err)
	}
	tb := rb.TaskIDs[0]
	waitFor(t, 20*time.Second, tb+" done", func() bool { return b.task(tb).State == ledger.TaskDone })
	if s := b.task(tb).Segments; len(s) != 1 || s[0].Machine != "p-b/m1" {
		t.Fatalf("p-b's task ran %+v", s)
	}
	waitFor(t, 10*time.Second, ta+"'s preempted run reported", func() bool {
		s := a.task(ta).Segments
		return len(s) >= 1 && s[0].Outcome == ledger.OutcomePreempted
	})
	first := a.task(ta).Segments[0]
	if first.Machine != "p-b/m1" || first.Source != ledger.EnergySimulated || first.EnergyMilliJ <= 0 {
		t.Fatalf("preempted segment %+v", first)
	}
	if tk := a.task(ta); tk.State != ledger.TaskRunning && tk.State != ledger.TaskAssigned && tk.State != ledger.TaskDone {
		t.Fatalf("preempted task is %s", tk.State)
	}
}

// TestRestartReconcilesMachines: the machines file changes between two
// runs; at the restart the ledger follows (a machine removed, one added,
// one whose figures changed replaced).
func TestRestartReconcilesMachines(t *testing.T) {
	tn := newTNode(t, "mc-a", "", "machines:\n  - {name: keep, gflops: 10, busy_watts: 100}\n  - {name: gone, gflops: 10, busy_watts: 100}\n  - {name: tuned, gflops: 10, busy_watts: 100}\n", testConfig("sim"))
	tn.start()
	tn.close()
	if err := os.WriteFile(filepath.Join(tn.dir, config.MachinesFile), []byte("machines:\n  - {name: keep, gflops: 10, busy_watts: 100}\n  - {name: tuned, gflops: 20, busy_watts: 120, idle_watts: 30}\n  - {name: new, gflops: 5, busy_watts: 50}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tn.start()
	var got []string
	tn.n.cons.View(func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			got = append(got, fmt.Sprintf("%s:%d:%d:%d", m.ID, m.MFLOPS, m.BusyMilliW, m.IdleMilliW))
		}
	})
	want := []string{"mc-a/keep:10000:100000:0", "mc-a/new:5000:50000:0", "mc-a/tuned:20000:120000:30000"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("machines after restart %v, want %v", got, want)
	}
	waitFor(t, 10*time.Second, "every machine up", func() bool {
		for _, id := range []string{"mc-a/keep", "mc-a/new", "mc-a/tuned"} {
			if tn.machine(id).State != ledger.MachineUp {
				return false
			}
		}
		return true
	})
}

// TestRestartRedeclaresProtection: a peer whose owner opts in to tasks
// running as the peer's own user registers its machine unprotected; once
// the owner sets a run_as user instead, the next start registers it again,
// protected, so the ledger never shows a machine safer than it is, nor
// keeps a stale warning (issue 16).
func TestRestartRedeclaresProtection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: not root, the opt-in gives the Landlock sandbox where the kernel has it, so nothing runs unprotected")
	}
	if _, err := user.Lookup("coopgrid-task"); err != nil {
		t.Skipf("needs the run_as user coopgrid-task: %v", err)
	}
	const machine = "machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\npolicy:\n  allow: [/bin/true]\n"
	tn := newTNode(t, "pr-a", "", machine+"  unsafe_run_as_peer_user: true\n", testConfig("process"))
	unprotected := func() bool {
		var u bool
		tn.n.cons.View(func(l *ledger.Ledger) {
			m, ok := l.Machine("pr-a/m1")
			u = ok && m.Unprotected
		})
		return u
	}
	tn.start()
	if !unprotected() {
		t.Fatal("the opt-in's machine is registered protected")
	}
	tn.close()
	if err := os.WriteFile(filepath.Join(tn.dir, config.MachinesFile), []byte(machine+"  run_as: coopgrid-task\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tn.start()
	if unprotected() {
		t.Fatal("with run_as the machine is still registered unprotected")
	}
}

// TestRestartedPeerFindsAMovedLeader: two peers stop and come back on new
// ports (listen is tcp/0), the first of them leading when the second
// returns. Each knows only the other's old address, so the returning peer
// must announce its new one before it is ready, or the leader never
// reaches it and it never catches up (CI's e2e.TestNoQuorum: the restarted
// old leader waited 90 s in pre-vote, dialling the new leader's old port).
func TestRestartedPeerFindsAMovedLeader(t *testing.T) {
	waitsMostly(t)
	peers := federation(t, "sim", []string{"mv-a", "mv-b", "mv-c"}, map[string]string{
		"mv-a": simMachine("m1", 10, 100),
		"mv-b": simMachine("m1", 10, 100),
		"mv-c": simMachine("m1", 10, 100),
	}, nil)
	a, b, c := peers[0], peers[1], peers[2]
	c.crash()
	b.close()
	b.start() // a new port; b and a are a majority
	waitFor(t, 20*time.Second, "a leader among mv-a and mv-b", func() bool {
		return a.n.cons.IsLeader() || b.n.cons.IsLeader()
	})
	if a.n.cons.IsLeader() {
		id := raft.ServerID(b.n.ID().String())
		if err := a.n.cons.Raft().LeadershipTransferToServer(id, raft.ServerAddress(id)).Error(); err != nil {
			t.Fatalf("hand the lead to mv-b: %v", err)
		}
	}
	waitFor(t, 20*time.Second, "mv-b leads", func() bool { return b.n.cons.IsLeader() })
	// Something mv-c has not seen, so that mv-a refuses its pre-vote.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 1000}}}); err != nil {
		t.Fatal(err)
	}
	c.start() // a new port, no bootstrap address: startWith fails unless ready
	waitFor(t, 20*time.Second, "mv-b reaches mv-c", func() bool {
		return b.n.host.Network().Connectedness(c.n.ID()) == network.Connected
	})
}
