package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
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
