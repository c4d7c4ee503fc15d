package node

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestDeadlineTaskFinishesElsewhereWhenOwnerReturns is issue 20's
// "owner comes back" test with real peers: a checkpointable soft-deadline
// task of d-own runs on its opportunistic machine y1 (100 GFLOPS: 800 s
// of work, which the simulated executor runs 40 times faster); its owner
// comes back (peer machines reclaim y1), the task is checkpointed and
// evicted, resumes from its checkpoint on d-far's z1 (50 GFLOPS, simulated
// 400 times faster), and is done before its deadline (30 min after
// submission, which z1 alone would meet from the start too: 1,600 s with
// the 10 % margin is 1,760 s) with less than the whole work left to do
// there.
func TestDeadlineTaskFinishesElsewhereWhenOwnerReturns(t *testing.T) {
	waitsMostly(t)
	own := newTNode(t, "d-own", "", simMachine("y1", 100, 100)+"    opportunistic: true\n",
		func(c *config.Config) { testConfig("sim")(c); ckConfig(c); c.Limit = "system" })
	own.start()
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	const y1, z1 = "d-own/y1", "d-far/z1"
	resp, err := own.n.Submit(ctx, api.SubmitRequest{Job: "owner-back", Tasks: []api.SubmitTask{{Name: "soft",
		SizeMFlop: 80_000_000, Checkpointable: true, Class: ledger.ClassSoftDeadline, DeadlineInMs: 30 * 60_000}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]
	waitFor(t, 20*time.Second, id+" running on y1", func() bool {
		tk := own.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == y1
	})
	// The other organisation arrives while it runs, so that y1 was the one
	// machine to choose.
	// d-far's simulated executor runs 10 times faster than d-own's: the
	// rest of the work takes a few seconds on z1, not half a minute, while
	// y1's whole run (20 s) still outlasts the reclaim by far. The policy's
	// estimates are in GFLOPS, not in the executor's compression.
	far := newTNode(t, "d-far", own.secret(), simMachine("z1", 50, 150), func(c *config.Config) {
		testConfig("sim")(c)
		ckConfig(c)
		c.Executor.SimCompression = 400
	})
	far.start(own.addr())
	waitFor(t, 20*time.Second, "d-far's machine registered", func() bool { return own.machine(z1).State == ledger.MachineUp })
	time.Sleep(time.Second) // some progress to checkpoint

	if _, err := own.n.ReclaimMachine(ctx, api.ReclaimRequest{Machine: "y1", Reclaimed: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, id+" done", func() bool {
		tk := own.task(id)
		if tk.State == ledger.TaskFailed || tk.State == ledger.TaskCancelled {
			t.Fatalf("%s ended %s: %s", id, tk.State, tk.Reason)
		}
		return tk.State == ledger.TaskDone
	})
	waitFor(t, 10*time.Second, "d-far's ledger has "+id+" done", func() bool { return far.task(id).State == ledger.TaskDone })
	tk := far.task(id)
	if tk.EndedMs == 0 || tk.EndedMs > tk.Spec.DeadlineMs {
		t.Fatalf("%s ended at %d, its deadline %d", id, tk.EndedMs, tk.Spec.DeadlineMs)
	}
	segs := tk.Segments
	if len(segs) != 2 || segs[0].Machine != y1 || segs[0].Outcome != ledger.OutcomePreempted ||
		segs[1].Machine != z1 || segs[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v, want preempted on y1 then done on z1", segs)
	}
	if segs[1].FromMFlop <= 0 || segs[1].FromMFlop >= tk.SizeMFlop {
		t.Fatalf("resumed on z1 from %d MFlop of %d: not from y1's checkpoint", segs[1].FromMFlop, tk.SizeMFlop)
	}
	if m := far.machine(y1); !m.Reclaimed || m.Reclaims != 1 {
		t.Fatalf("d-far's ledger: y1 %+v", m)
	}
}
