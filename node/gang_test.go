package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// gangPeers is the federation of the gang tests, of real peers on the
// process executor: g offers two 4-CPU machines (g0, g1) that run
// /bin/sh; h offers none and registers the whole system's power as its
// limit (100% of its own machines would be nothing).
func gangPeers(t *testing.T) (g, h *tnode) {
	t.Helper()
	peers := federation(t, "process", []string{"g", "h"}, map[string]string{
		"g": machinesFile("g", 2, 10, 100, "    cpus: 4\n", "  allow: [/bin/sh]\n"),
	}, map[string]func(*config.Config){"h": func(c *config.Config) { c.Limit = "system" }})
	return peers[0], peers[1]
}

// TestGangOnRealPeers is issue 21's real-peer scenario for parallel jobs,
// with real processes: organisation g offers two 4-CPU machines, h none.
// h's job of nodes: 2, cpus: 4 waits behind g's task holding one machine
// and starts once both are free; both parts see both hosts in
// COOPGRID_HOSTS and the hostfile. g's new task then preempts one part
// (EHOSEP: h uses g's machines beyond its share): the other part stops
// too. Once the gang runs again, g declares one part's machine lost: the
// other part stops too.
func TestGangOnRealPeers(t *testing.T) {
	waitsMostly(t)
	g, h := gangPeers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	task := func(name, script string, nodes int) api.SubmitTask {
		return api.SubmitTask{Name: name, Argv: []string{"/bin/sh", "-c", script}, Env: map[string]string{"OUT": out},
			SizeMFlop: 1000, WallLimitMs: 600_000, CPUs: 4, Nodes: nodes}
	}
	submit := func(tn *tnode, st api.SubmitTask) []string {
		t.Helper()
		resp, err := tn.n.Submit(ctx, api.SubmitRequest{Job: st.Name, Tasks: []api.SubmitTask{st}})
		if err != nil {
			t.Fatalf("%s submits %s: %v", tn.org, st.Name, err)
		}
		return resp.TaskIDs
	}
	running := func(id string) bool { return g.task(id).State == ledger.TaskRunning }

	blocker := submit(g, task("blocker", "sleep 4", 0))[0]
	waitFor(t, 60*time.Second, blocker+" running", func() bool { return running(blocker) })
	gang := submit(h, task("mpi", `env > "$OUT/env-$COOPGRID_GANG_RANK-$COOPGRID_ATTEMPT"; cat "$COOPGRID_HOSTFILE" > "$OUT/hostfile-$COOPGRID_GANG_RANK"; exec sleep 300`, 2))
	if len(gang) != 2 {
		t.Fatalf("a job of 2 nodes got task IDs %v", gang)
	}
	p0, p1 := gang[0], gang[1]
	waitFor(t, 90*time.Second, "the gang running", func() bool { return running(p0) && running(p1) })
	b := g.task(blocker)
	if b.State != ledger.TaskDone {
		t.Fatalf("the gang started while %s is %s", blocker, b.State)
	}
	for _, id := range gang {
		if tk := g.task(id); tk.Segments[0].StartMs < b.EndedMs || len(tk.Segments) != 1 {
			t.Fatalf("%s started at %d, before %s ended at %d (segments %+v)", id, tk.Segments[0].StartMs, blocker, b.EndedMs, tk.Segments)
		}
	}
	machines := map[string]bool{g.task(p0).Machine: true, g.task(p1).Machine: true}
	if len(machines) != 2 {
		t.Fatalf("both parts on %v", machines)
	}
	// Each part wrote its environment and the hostfile.
	for rank, id := range gang {
		env := readWhenThere(t, filepath.Join(out, fmt.Sprintf("env-%d-1", rank)))
		want := []string{"COOPGRID_HOSTS=g0,g1", fmt.Sprintf("COOPGRID_GANG_RANK=%d", rank), "COOPGRID_GANG_SIZE=2", "COOPGRID_TASK_ID=" + id}
		for _, w := range want {
			if !strings.Contains(env, w+"\n") {
				t.Errorf("part %d's environment lacks %s:\n%s", rank, w, env)
			}
		}
		if hf := readWhenThere(t, filepath.Join(out, fmt.Sprintf("hostfile-%d", rank))); hf != "g0 slots=4\ng1 slots=4\n" {
			t.Errorf("part %d's hostfile %q", rank, hf)
		}
	}

	// g's own task takes one of its machines back: one part is preempted,
	// and the other stops with it.
	reclaim := submit(g, task("reclaim", "sleep 3", 0))[0]
	stopped := func(id string, attempt int) bool {
		tk := g.task(id)
		return len(tk.Segments) >= attempt && !tk.Segments[attempt-1].Outcome.Open()
	}
	waitFor(t, 60*time.Second, "both parts' first runs stopped", func() bool { return stopped(p0, 1) && stopped(p1, 1) })
	for _, id := range gang {
		if o := g.task(id).Segments[0].Outcome; o != ledger.OutcomePreempted {
			t.Fatalf("%s's first run ended %s, want preempted", id, o)
		}
	}
	waitFor(t, 60*time.Second, reclaim+" done", func() bool { return g.task(reclaim).State == ledger.TaskDone })
	waitFor(t, 90*time.Second, "the gang running again", func() bool {
		return running(p0) && running(p1) && len(g.task(p0).Segments) == 2 && len(g.task(p1).Segments) == 2
	})

	// g declares the machine of part 0 lost: part 1 stops too.
	lostMachine := g.task(p0).Machine
	if err := g.n.declareLost(ctx, lostMachine); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "both parts' second runs stopped", func() bool { return stopped(p0, 2) && stopped(p1, 2) })
	if o := g.task(p0).Segments[1].Outcome; o != ledger.OutcomeLost {
		t.Fatalf("part 0's run on the lost machine ended %s", o)
	}
	if o := g.task(p1).Segments[1].Outcome; o != ledger.OutcomePreempted {
		t.Fatalf("part 1's run ended %s, want preempted (stopped with its gang)", o)
	}
	// Cancelling one part cancels the job.
	if err := h.n.Cancel(ctx, p1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the gang cancelled", func() bool {
		return g.task(p0).State == ledger.TaskCancelled && g.task(p1).State == ledger.TaskCancelled
	})
	if v := g.task(p0); v.Spec.Gang == nil || v.Spec.Gang.ID != p0 || v.Spec.Gang.Rank != 0 || v.Spec.Gang.Size != 2 {
		t.Fatalf("part 0's gang %+v", v.Spec.Gang)
	}
}

// readWhenThere waits for a file a task writes and returns its content.
func readWhenThere(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	waitFor(t, 30*time.Second, path, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && len(b) > 0
	})
	return string(b)
}

// TestGangHeldAgainstAStreamOfSmallTasks is issue 21's starvation case on
// real peers: g offers two 4-CPU machines, h none. h runs two 4-CPU tasks
// there, ending 3 s apart, then submits a job of nodes: 2, cpus: 4 and,
// right after it, four more 4-CPU tasks. When the first task ends, its
// machine is held for the gang (the head: policy.GangFirst) instead of
// going to the next small task; when the second ends the gang starts on
// both, and the small tasks submitted before it start only after it.
func TestGangHeldAgainstAStreamOfSmallTasks(t *testing.T) {
	waitsMostly(t)
	g, h := gangPeers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	submit := func(name, script string, nodes int) []string {
		t.Helper()
		st := api.SubmitTask{Name: name, Argv: []string{"/bin/sh", "-c", script}, SizeMFlop: 1000, WallLimitMs: 600_000, CPUs: 4, Nodes: nodes}
		resp, err := h.n.Submit(ctx, api.SubmitRequest{Job: name, Tasks: []api.SubmitTask{st}})
		if err != nil {
			t.Fatalf("h submits %s: %v", name, err)
		}
		return resp.TaskIDs
	}
	running := func(id string) bool { return g.task(id).State == ledger.TaskRunning }
	first := submit("first", "sleep 3", 0)[0]
	waitFor(t, 60*time.Second, first+" running", func() bool { return running(first) })
	second := submit("second", "sleep 9", 0)[0]
	waitFor(t, 60*time.Second, second+" running", func() bool { return running(second) })
	gang := submit("mpi", "sleep 2", 2)
	var stream []string
	for k := range 4 {
		stream = append(stream, submit(fmt.Sprintf("small-%d", k), "sleep 2", 0)[0])
	}
	if s := g.task(first).State; s != ledger.TaskRunning {
		// Under load a run may miss its start deadline and wait again:
		// then it waits behind the gang too, and what follows still holds.
		t.Logf("%s is %s when the stream was submitted", first, s)
	}
	waitFor(t, 60*time.Second, first+" done", func() bool { return g.task(first).State == ledger.TaskDone })
	// While the second runs, the freed machine waits for the gang.
	time.Sleep(2 * time.Second)
	for _, id := range stream {
		if s := g.task(id).State; s != ledger.TaskQueued {
			t.Fatalf("%s is %s while the gang waits for its second machine: the freed machine went to a small task", id, s)
		}
	}
	if d, err := g.n.Task(ctx, gang[0]); err != nil || d.Pending != "gang" || !strings.Contains(d.PendingDetail, "head gang") {
		t.Fatalf("the waiting part's reason %q %q (%v)", d.Pending, d.PendingDetail, err)
	}
	waitFor(t, 90*time.Second, "the gang done", func() bool {
		return g.task(gang[0]).State == ledger.TaskDone && g.task(gang[1]).State == ledger.TaskDone
	})
	sec := g.task(second)
	gangStart := g.task(gang[0]).Segments[0].StartMs
	if gangStart < sec.EndedMs {
		t.Fatalf("the gang started at %d, before %s ended at %d", gangStart, second, sec.EndedMs)
	}
	waitFor(t, 90*time.Second, "the stream done", func() bool {
		for _, id := range stream {
			if g.task(id).State != ledger.TaskDone {
				return false
			}
		}
		return true
	})
	for _, id := range stream {
		if st := g.task(id).Segments[0].StartMs; st < gangStart {
			t.Fatalf("%s started at %d, before the gang (%d), though submitted after it", id, st, gangStart)
		}
	}
}
