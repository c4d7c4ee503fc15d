package node

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestSAChoosesOnRealPeers: SA_s at submission on a real peer with two
// 4-CPU machines and real processes. The moldable job lists a wide
// request (2 nodes × 4 cpus for 1 minute) first and a narrow one (1 node
// × 4 cpus for 2 minutes) second. On an idle federation the wide one ends
// first and is chosen: the job runs as a gang of two parts. With one
// machine held by a blocker whose limit is 10 minutes, the wide one could
// only start then, and the narrow one, started at once on the free
// machine, ends long before: it is chosen, queued as one task, and runs
// while the blocker still does. Both choices are recorded in the ledger
// and shown by the task's detail.
func TestSAChoosesOnRealPeers(t *testing.T) {
	u := shellPeer(t, "sa", 2, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	gate := newGate(t)
	wide := api.SubmitAlternative{Nodes: 2, CPUs: 4, WallLimitMs: 60_000}
	narrow := api.SubmitAlternative{Nodes: 1, CPUs: 4, WallLimitMs: 120_000}
	moldable := func(name string) api.SubmitResponse {
		t.Helper()
		resp, err := u.n.Submit(ctx, api.SubmitRequest{Job: name, Tasks: []api.SubmitTask{{Name: name, SizeMFlop: 1000,
			CPUs: 4, Nodes: 2, WallLimitMs: 60_000, Argv: []string{"/bin/sh", "-c", "sleep 0.5"},
			Alternatives: []api.SubmitAlternative{wide, narrow}}}})
		if err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		if len(resp.Moldable) != 1 || resp.Moldable[0].Task != 0 || len(resp.Moldable[0].Alternatives) != 2 {
			t.Fatalf("%s: the answer's choices %+v", name, resp.Moldable)
		}
		return resp
	}
	ended := func(ids []string) bool {
		for _, id := range ids {
			if u.task(id).State != ledger.TaskDone {
				return false
			}
		}
		return true
	}

	// Idle: wide ends at +1 min, narrow at +2 min.
	idle := moldable("idle")
	c := idle.Moldable[0]
	w, n := c.Alternatives[0], c.Alternatives[1]
	if c.Chosen != 0 || w.PredictedEndMs == 0 || n.PredictedEndMs == 0 || w.PredictedEndMs-w.PredictedStartMs != 60_000 || w.PredictedEndMs >= n.PredictedEndMs {
		t.Fatalf("idle federation: chose %d of %+v, want the wide one, ending first", c.Chosen, c.Alternatives)
	}
	if len(idle.TaskIDs) != 2 {
		t.Fatalf("idle federation: the wide choice queued %v, want two parts", idle.TaskIDs)
	}
	for _, id := range idle.TaskIDs {
		tk := u.task(id)
		if tk.Spec.Gang == nil || tk.Spec.Gang.Size != 2 || tk.Spec.WallLimitMs != 60_000 || tk.Spec.Moldable == nil || tk.Spec.Moldable.Chosen != 0 {
			t.Fatalf("idle federation: part %s's spec %+v", id, tk.Spec)
		}
	}
	waitFor(t, 60*time.Second, "the wide job done", func() bool { return ended(idle.TaskIDs) })

	// Busy: a blocker holds one machine for up to 10 minutes.
	blocker := u.submitShell(ctx, "blocker", 4, 10*time.Minute, gate.wait())
	waitFor(t, 30*time.Second, "the blocker running", func() bool { return u.task(blocker).State == ledger.TaskRunning })
	busy := moldable("busy")
	c = busy.Moldable[0]
	w, n = c.Alternatives[0], c.Alternatives[1]
	if c.Chosen != 1 || n.PredictedEndMs == 0 || n.PredictedEndMs >= w.PredictedEndMs || w.PredictedStartMs-n.PredictedStartMs < 500_000 {
		t.Fatalf("busy federation: chose %d of %+v, want the narrow one, the wide one waiting for the blocker", c.Chosen, c.Alternatives)
	}
	if len(busy.TaskIDs) != 1 {
		t.Fatalf("busy federation: the narrow choice queued %v, want one task", busy.TaskIDs)
	}
	id := busy.TaskIDs[0]
	if tk := u.task(id); tk.Spec.Gang != nil || tk.Spec.CPUs != 4 || tk.Spec.WallLimitMs != 120_000 {
		t.Fatalf("busy federation: the task's spec %+v, want the narrow request", tk.Spec)
	}
	waitFor(t, 60*time.Second, "the narrow job done", func() bool { return ended(busy.TaskIDs) })
	if st := u.task(blocker).State; st != ledger.TaskRunning {
		t.Fatalf("the narrow job ended, the blocker is %s: it did not run beside it", st)
	}
	d, err := u.n.Task(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Moldable == nil || d.Moldable.Chosen != 1 || len(d.Moldable.Alternatives) != 2 || d.Moldable.Alternatives[1].PredictedEndMs != n.PredictedEndMs {
		t.Fatalf("the task's detail shows %+v, want the submission's choice", d.Moldable)
	}
	gate.open(t)
	waitFor(t, 30*time.Second, "the blocker done", func() bool { return ended([]string{blocker}) })
}
