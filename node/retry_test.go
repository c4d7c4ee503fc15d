package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestMachineFailuresRunElsewhere is issue 14's item 6 with real peers and
// real processes. Organisation a offers the most efficient machine, whose
// registered owner policy allows /bin/sh (so the scheduler places there)
// but whose executor refuses every run: its policy runs tasks as a user
// that does not exist (run_as_unavailable). b's tasks refused there go
// back to the queue, avoid a's machine and end done on b's; a task that
// exits non-zero fails for good, and one with retries runs again.
func TestMachineFailuresRunElsewhere(t *testing.T) {
	peers := federation(t, "process", []string{"a", "b"}, map[string]string{
		"a": "machines:\n  - name: a0\n    gflops: 100\n    busy_watts: 10\npolicy:\n  run_as: coopgrid-no-such-user\n  allow: [/bin/sh]\n",
		"b": machinesFile("b", 2, 10, 100, "", "  allow: [/bin/sh]\n"),
	}, nil)
	b := peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	flag := t.TempDir() + "/failed-once"
	req := api.SubmitRequest{Job: "mixed"}
	for i := range 4 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Name: fmt.Sprintf("ok-%d", i), Argv: []string{"/bin/sh", "-c", "sleep 0.2"}, SizeMFlop: 1000})
	}
	req.Tasks = append(req.Tasks,
		api.SubmitTask{Name: "exit3", Argv: []string{"/bin/sh", "-c", "exit 3"}, SizeMFlop: 1000, MaxAttempts: 5},
		api.SubmitTask{Name: "flaky", Argv: []string{"/bin/sh", "-c", fmt.Sprintf("[ -e %s ] && exit 0; : > %s; exit 4", flag, flag)}, SizeMFlop: 1000, MaxAttempts: 5, Retries: 1})
	resp, err := b.n.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ids := resp.TaskIDs
	ended := func(id string) ledger.Task {
		var tk ledger.Task
		waitFor(t, 60*time.Second, id+" ended", func() bool {
			tk = b.task(id)
			return tk.State.Terminal()
		})
		return tk
	}
	refused := 0
	for _, id := range append(ids[:4:4], ids[5]) {
		tk := ended(id)
		if tk.State != ledger.TaskDone {
			t.Fatalf("%s is %s (%s), want done", id, tk.State, tk.Reason)
		}
		for _, s := range tk.Segments {
			if s.MachineOrg == "a" {
				refused++
				if s.Outcome != ledger.OutcomeFailed || tk.MachineFailures != 1 || !slices.Equal(tk.Avoid, []string{"a/a0"}) {
					t.Fatalf("%s ran on a's machine (%s), machine failures %d, avoids %v", id, s.Outcome, tk.MachineFailures, tk.Avoid)
				}
			}
		}
		if last := tk.Segments[len(tk.Segments)-1]; last.MachineOrg != "b" {
			t.Fatalf("%s ended on %s", id, last.Machine)
		}
	}
	if refused == 0 {
		t.Fatal("no task was ever placed on a's machine: the test proves nothing")
	}
	if tk := ended(ids[4]); tk.State != ledger.TaskFailed || ledger.ReasonCode(tk.Reason) != "exit_nonzero" || tk.Failures != 0 {
		t.Fatalf("exit 3: %s, reason %q, failures %d; want failed for good", tk.State, tk.Reason, tk.Failures)
	}
	if tk := b.task(ids[5]); tk.Failures != 1 {
		t.Fatalf("flaky: %d retries used, want 1", tk.Failures)
	}

	// The job's tasks by name, and retry by the owner only.
	views, err := b.n.Tasks(ctx, api.TaskQuery{Job: "mixed"})
	if err != nil || len(views) != len(ids) {
		t.Fatalf("tasks of job mixed: %d (%v), want %d", len(views), err, len(ids))
	}
	a := peers[0]
	var ae *api.Error
	if err := a.n.Retry(ctx, ids[4]); !errorsAs(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("a retrying b's task: %v, want forbidden", err)
	}
	if s := b.task(ids[4]).State; s != ledger.TaskFailed {
		t.Fatalf("after a refused retry the task is %s", s)
	}
	if err := b.n.Retry(ctx, ids[4]); err != nil {
		t.Fatal(err)
	}
	tk := ended(ids[4])
	if tk.State != ledger.TaskFailed || !strings.HasPrefix(tk.Reason, "exit_nonzero") || tk.Attempts < 2 {
		t.Fatalf("the retried exit-3 task: %s %q after %d runs", tk.State, tk.Reason, tk.Attempts)
	}
}

// TestLostMachineRunElsewhereAvoidingIt is issue 14's "machine lost
// mid-run" with real peers: l-c's machine, the most efficient, runs task
// T when l-c's peer is killed. T goes back to the queue with one attempt
// counted (not a retry) and l-c's machine on its avoid list; once l-c is
// back, its free machine is not chosen for T while l-b's (busy) may run
// it, so T waits with the pending reason "avoided", while another task
// does run on l-c's machine; when l-b's machine frees, T runs there and
// is done. Everything is read through the API backend.
func TestLostMachineRunElsewhereAvoidingIt(t *testing.T) {
	peers := federation(t, "sim", []string{"l-a", "l-b", "l-c"}, map[string]string{
		"l-a": simMachine("m1", 10, 100),
		"l-b": simMachine("m1", 150, 100),
		"l-c": simMachine("m1", 200, 100),
	}, map[string]func(*config.Config){"l-a": func(c *config.Config) { c.Limit = "system" }}) // a runs on three machines
	a, c := peers[0], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// Smallest first (EHOSEP's queue order), onto the most efficient
	// machine: T (60,000 GFlop: 300 s simulated on l-c, 7.5 s real; 10 s
	// on l-b) on l-c, the two long ones on l-b and l-a.
	resp, err := a.n.Submit(ctx, api.SubmitRequest{Job: "lost", Tasks: []api.SubmitTask{
		{Name: "t", SizeMFlop: 60_000_000}, {Name: "long-b", SizeMFlop: 1 << 40}, {Name: "long-a", SizeMFlop: 1 << 41}}})
	if err != nil {
		t.Fatal(err)
	}
	id, longB, longA := resp.TaskIDs[0], resp.TaskIDs[1], resp.TaskIDs[2]
	view := func(id string) api.TaskDetail {
		t.Helper()
		d, err := a.n.Task(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	waitFor(t, 20*time.Second, "t on l-c, the long ones on l-b and l-a", func() bool {
		return view(id).State == "running" && view(id).Machine == "l-c/m1" &&
			view(longB).State == "running" && view(longB).Machine == "l-b/m1" && view(longA).State == "running"
	})
	c.crash()
	waitFor(t, 20*time.Second, "l-c's machine lost", func() bool { return a.machine("l-c/m1").State == ledger.MachineLost })
	if d := view(id); d.State != "queued" || d.MachineFailures != 1 || d.Failures != 0 || !slices.Equal(d.Avoid, []string{"l-c/m1"}) {
		t.Fatalf("after l-c was lost: %s, machine failures %d, failures %d, avoid %v", d.State, d.MachineFailures, d.Failures, d.Avoid)
	}

	c.start()
	waitFor(t, 30*time.Second, "l-c's machine up again", func() bool { return a.machine("l-c/m1").State == ledger.MachineUp })
	waitFor(t, 10*time.Second, "t waiting for an avoided machine", func() bool { return view(id).Pending == "avoided" })
	if d := view(id); d.State != "queued" || !strings.Contains(d.PendingDetail, "l-c/m1") {
		t.Fatalf("t is %s, pending %s: %s", d.State, d.Pending, d.PendingDetail)
	}
	// l-c's machine is still offered to other tasks.
	other, err := a.n.Submit(ctx, api.SubmitRequest{Job: "lost", Tasks: []api.SubmitTask{{Name: "other", SizeMFlop: 100_000}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the other task done", func() bool { return view(other.TaskIDs[0]).State == "done" })
	if d := view(other.TaskIDs[0]); d.Machine != "l-c/m1" {
		t.Fatalf("the other task ran on %s, want l-c/m1", d.Machine)
	}
	if d := view(id); d.State != "queued" || d.Pending != "avoided" {
		t.Fatalf("t is %s (%s) while l-b's machine is busy", d.State, d.Pending)
	}

	if err := a.n.Cancel(ctx, longB); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 40*time.Second, "t done", func() bool { return view(id).State == "done" })
	d := view(id)
	segs := d.Segments
	if len(segs) != 2 || segs[0].Machine != "l-c/m1" || segs[0].Outcome != string(ledger.OutcomeLost) ||
		segs[1].Machine != "l-b/m1" || segs[1].Outcome != string(ledger.OutcomeDone) {
		t.Fatalf("t's runs: %+v", segs)
	}
	if d.MachineFailures != 1 || d.Failures != 0 || !slices.Equal(d.Avoid, []string{"l-c/m1"}) {
		t.Fatalf("t done with machine failures %d, failures %d, avoid %v", d.MachineFailures, d.Failures, d.Avoid)
	}
	if err := a.n.Cancel(ctx, longA); err != nil {
		t.Fatal(err)
	}
}
