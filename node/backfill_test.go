package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// TestLiveBackfillOnRealPeers: one real peer, one 8-CPU machine, real
// processes. A 4-CPU blocker with a 10-minute wall_clock_limit runs (held
// by a gate file); a wide 8-CPU task waits for it; behind the wide one
// come narrow 4-CPU tasks with an hour's limit (each would still hold the
// room when the blocker's limit runs out, delaying the wide task) and one
// with a minute's limit (it ends before then).
//
// Under easy: the wide task holds a reservation, so no long narrow task
// starts while the blocker runs, however many are queued, while the short
// one is backfilled and runs; once the blocker ends, the wide task starts
// before any long narrow one. Under ehosep (the default) the same
// workload behaves as before: a long narrow task takes the free half of
// the machine at once, ahead of the wide one.
func TestLiveBackfillOnRealPeers(t *testing.T) {
	waitsMostly(t)
	for _, job := range []string{"easy", "ehosep"} {
		t.Run(job, func(t *testing.T) { liveBackfillScenario(t, job) })
	}
}

func liveBackfillScenario(t *testing.T, job string) {
	u := shellPeer(t, "bf", 1, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if job != ledger.DefaultJobPolicy {
		v, err := u.n.VoteJobPolicy(ctx, api.JobPolicyRequest{Policy: job})
		if err != nil || v.Policy != job {
			t.Fatalf("vote for %s: %+v, %v", job, v, err)
		}
	}
	gate := newGate(t)
	blocker := u.submitShell(ctx, "blocker", 4, 10*time.Minute, gate.wait())
	waitFor(t, 30*time.Second, "the blocker running", func() bool { return u.task(blocker).State == ledger.TaskRunning })
	wide := u.submitShell(ctx, "wide", 8, time.Minute, "sleep 0.3")
	var long []string
	for i := range 2 {
		long = append(long, u.submitShell(ctx, fmt.Sprintf("long-%d", i), 4, time.Hour, "sleep 0.3"))
	}
	short := u.submitShell(ctx, "short", 4, time.Minute, "sleep 0.3")

	started := func(id string) bool { return len(u.task(id).Segments) > 0 }
	if job == ledger.DefaultJobPolicy {
		// EHOSEP: a narrow task takes the free half of the machine while
		// the wide one waits for the blocker.
		waitFor(t, 30*time.Second, "a long narrow task started ahead of the wide one", func() bool { return started(long[0]) })
		if started(wide) {
			t.Fatalf("the wide task started beside the blocker: %+v", u.task(wide))
		}
		gate.open(t)
		waitFor(t, 60*time.Second, "every task done", func() bool { return u.task(wide).State == ledger.TaskDone })
		return
	}

	// easy: the short task is backfilled and ends; the long ones wait.
	waitFor(t, 30*time.Second, "the short task backfilled and done", func() bool { return u.task(short).State == ledger.TaskDone })
	// A stream of long narrow tasks while the blocker runs: none starts.
	for i := 2; i < 5; i++ {
		long = append(long, u.submitShell(ctx, fmt.Sprintf("long-%d", i), 4, time.Hour, "sleep 0.3"))
		time.Sleep(400 * time.Millisecond) // more than a scheduling interval
	}
	for _, id := range append(long, wide) {
		if tk := u.task(id); tk.State != ledger.TaskQueued || started(id) {
			t.Fatalf("%s task %s left the queue while the blocker runs under easy: %+v", tk.State, id, tk.Segments)
		}
	}
	views, err := u.n.Tasks(ctx, api.TaskQuery{States: []string{"queued"}})
	if err != nil || len(views) != len(long)+1 {
		t.Fatalf("queued tasks: %d, %v; want %d", len(views), err, len(long)+1)
	}
	// The API says why: the long ones have room but wait their turn.
	for _, v := range views {
		want := policy.PendingJobPolicy
		if v.ID == wide {
			want = policy.PendingNoResources
		}
		if v.Pending != want {
			t.Fatalf("%s waits with %q (%s), want %s", v.ID, v.Pending, v.PendingDetail, want)
		}
	}

	gate.open(t)
	waitFor(t, 30*time.Second, "the wide task started", func() bool { return started(wide) })
	wideStart := u.task(wide).Segments[0].StartMs
	for _, id := range long {
		u.waitDone(t, 60*time.Second, id+" done", id)
		if s := u.task(id).Segments[0].StartMs; s < wideStart {
			t.Fatalf("%s started at %d, before the wide task (%d)", id, s, wideStart)
		}
	}
}
