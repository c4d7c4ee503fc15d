package ledger

import (
	"slices"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

func TestMachineFault(t *testing.T) {
	for reason, want := range map[string]bool{
		"not_allowed: /bin/sh is not allowed by the machine owner's policy": true,
		"start_failed: fork/exec: no such file":                             true,
		"run_as_unavailable":                                                true,
		"input_unavailable: fetch: connection refused":                      true,
		"input_too_large; outputs not delivered":                            true,
		"exit_nonzero: exit status 1":                                       false,
		"killed_timeout":                                                    false,
		"exit status 2":                                                     false,
		"":                                                                  false,
		"not_allowedx":                                                      false,
	} {
		if got := MachineFault(reason); got != want {
			t.Errorf("MachineFault(%q) = %v, want %v", reason, got, want)
		}
	}
}

// submitRetry submits one task of uni-a with the given retry settings.
func submitRetry(at int64, maxAttempts, retries int) Command {
	c := act("uni-a", at)
	c.SubmitTasks = &SubmitTasks{Tasks: []TaskSpec{{SizeMFlop: 1000, Spec: Spec{Argv: []string{"/bin/sh"}, Job: "sweep", MaxAttempts: maxAttempts, Retries: retries}}}}
	return c
}

func failedWith(org, task, machine string, at int64, reason string) Command {
	c := act(org, at)
	c.TaskEnded = &TaskEnded{Task: task, Machine: machine, Failed: true, ExitCode: -1, Reason: reason, Source: EnergySimulated}
	return c
}

func retryCmd(org, task string, at int64) Command {
	c := act(org, at)
	c.RetryTask = &RetryTask{Task: task}
	return c
}

// runOnce places task on machine (owned by owner), starts it and reports
// it failed with reason.
func runOnce(f *fed, owner, task, machine string, at int64, reason string) Result {
	f.t.Helper()
	if r := f.must(decide("uni-b", at, alloc(task, machine))); r.AcceptedDecisions() != 1 {
		f.t.Fatalf("placing %s on %s: %+v", task, machine, r.Decisions)
	}
	f.must(started(owner, task, machine, at+1))
	return f.must(failedWith(owner, task, machine, at+2, reason))
}

func TestMachineFailuresRequeueUpToMaxAttempts(t *testing.T) {
	f := base(t)
	f.must(submitRetry(2500, DefaultMaxAttempts, 0)) // uni-a-4, the 3 attempts the API writes in by default
	const id = "uni-a-4"
	runOnce(f, "uni-a", id, "uni-a/m1", 3000, "not_allowed: /bin/sh")
	tk, _ := f.l.Task(id)
	if tk.State != TaskQueued || tk.MachineFailures != 1 || !slices.Equal(tk.Avoid, []string{"uni-a/m1"}) || tk.Failures != 0 {
		t.Fatalf("after a refusal: %s, machine failures %d, avoid %v, failures %d", tk.State, tk.MachineFailures, tk.Avoid, tk.Failures)
	}
	// The ledger refuses to place it on the machine that refused it, and
	// the pending reason and the policy view say so.
	if r := f.apply(decide("uni-b", 3100, alloc(id, "uni-a/m1"))); r.AcceptedDecisions() != 0 || r.Decisions[0].Err == nil || r.Decisions[0].Err.Code != CodeNoMatch {
		t.Fatalf("placing on an avoided machine: %+v", r.Decisions)
	}
	st, _ := f.l.PolicyView(3100, 0)
	for _, q := range st.Queued {
		if q.ID == id && !slices.Equal(q.Avoid, []string{"uni-a/m1"}) {
			t.Fatalf("policy view avoids %v", q.Avoid)
		}
	}
	runOnce(f, "uni-a", id, "uni-a/m2", 3200, "start_failed: exec format error")
	if p := f.l.Pending()[id]; p.Code != "next_pass" {
		t.Fatalf("uni-b/x1 is still open to it: pending %+v", p)
	}
	r := runOnce(f, "uni-b", id, "uni-b/x1", 3400, "not_allowed: /bin/sh")
	tk, _ = f.l.Task(id)
	if tk.State != TaskFailed || tk.MachineFailures != 3 || !strings.HasPrefix(tk.Reason, "max_attempts: 3 runs failed") {
		t.Fatalf("after the third refusal: %s, machine failures %d, reason %q", tk.State, tk.MachineFailures, tk.Reason)
	}
	if got := r.Transitions[len(r.Transitions)-1]; got.To != TaskFailed {
		t.Fatalf("last transition %+v", got)
	}
}

// TestMachineFailureFinalWithoutMaxAttempts: a task whose spec has no
// max_attempts (queued before the field existed) keeps the rule it was
// queued under: its machine's failure is final, with the reported reason
// and no count, so that an old log replays to the state it always did.
func TestMachineFailureFinalWithoutMaxAttempts(t *testing.T) {
	f := base(t)
	f.must(submitRetry(2500, 0, 0))
	const id = "uni-a-4"
	runOnce(f, "uni-a", id, "uni-a/m1", 3000, "not_allowed: /bin/sh")
	tk, _ := f.l.Task(id)
	if tk.State != TaskFailed || tk.Reason != "not_allowed: /bin/sh" || tk.MachineFailures != 0 || len(tk.Avoid) != 0 {
		t.Fatalf("old-rule task after its machine refused it: %s %q, machine failures %d, avoid %v", tk.State, tk.Reason, tk.MachineFailures, tk.Avoid)
	}
}

func TestOwnFailureIsFinalUnlessRetries(t *testing.T) {
	for _, retries := range []int{0, 2} {
		f := base(t)
		f.must(submitRetry(2500, 0, retries))
		const id = "uni-a-4"
		for k := 0; k < retries; k++ {
			r := runOnce(f, "uni-a", id, "uni-a/m1", 3000+int64(k)*100, "exit_nonzero: exit status 1")
			tk, _ := f.l.Task(id)
			if tk.State != TaskQueued || tk.Failures != k+1 || len(tk.Avoid) != 0 || tk.MachineFailures != 0 {
				t.Fatalf("retries %d, failure %d: %s, failures %d, avoid %v", retries, k+1, tk.State, tk.Failures, tk.Avoid)
			}
			if tr := r.Transitions[len(r.Transitions)-1]; tr.Reason != "retry" {
				t.Fatalf("transition %+v", tr)
			}
		}
		runOnce(f, "uni-a", id, "uni-a/m1", 4000, "exit_nonzero: exit status 1")
		tk, _ := f.l.Task(id)
		if tk.State != TaskFailed || tk.Reason != "exit_nonzero: exit status 1" || tk.Failures != retries {
			t.Fatalf("retries %d: final %s %q, failures %d", retries, tk.State, tk.Reason, tk.Failures)
		}
	}
}

// TestLostMachineCountsAnAttempt: a machine lost under a run is a failure
// of the machine: the run counts against max_attempts (not retries), the
// task avoids the machine while another may run it, goes back to it when
// every machine it matches is avoided, and fails for good at the last
// attempt. A task only assigned, or one queued without max_attempts (an
// old log), counts nothing.
func TestLostMachineCountsAnAttempt(t *testing.T) {
	f := base(t)
	f.must(submitRetry(2500, DefaultMaxAttempts, 2))
	const id = "uni-a-4"
	runLost := func(owner, machine string, at int64) Result {
		t.Helper()
		if r := f.must(decide("uni-b", at, alloc(id, machine))); r.AcceptedDecisions() != 1 {
			t.Fatalf("placing %s on %s: %+v", id, machine, r.Decisions[0].Err)
		}
		f.must(started(owner, id, machine, at+1))
		r := f.must(lost(owner, machine, at+2))
		f.must(heartbeat(owner, machine, at+3))
		return r
	}
	refused := func(machine string, at int64) {
		t.Helper()
		h := f.l.Hash()
		if r := f.apply(decide("uni-b", at, alloc(id, machine))); r.AcceptedDecisions() != 0 || r.Decisions[0].Err.Code != CodeNoMatch {
			t.Fatalf("placing %s on %s, which it avoids: %+v", id, machine, r.Decisions)
		}
		if f.l.Hash() != h {
			t.Fatal("a refused decision changed the state")
		}
	}
	r := runLost("uni-a", "uni-a/m1", 3000)
	tk, _ := f.l.Task(id)
	if tk.State != TaskQueued || tk.MachineFailures != 1 || tk.Failures != 0 || !slices.Equal(tk.Avoid, []string{"uni-a/m1"}) {
		t.Fatalf("after a lost machine: %s, machine failures %d, failures %d, avoid %v", tk.State, tk.MachineFailures, tk.Failures, tk.Avoid)
	}
	if tr := r.Transitions[0]; tr.Task != id || tr.To != TaskQueued || tr.Reason != "lost" {
		t.Fatalf("transition %+v", tr)
	}
	refused("uni-a/m1", 3100) // uni-a/m2 and uni-b/x1 may run it
	sameRule(t, f.l, id)
	runLost("uni-a", "uni-a/m2", 3200)
	refused("uni-a/m1", 3300)
	refused("uni-a/m2", 3300)
	sameRule(t, f.l, id)
	// uni-b/x1 is lost too: every machine left avoids it, so it may go back.
	f.must(lost("uni-b", "uni-b/x1", 3400))
	sameRule(t, f.l, id)
	if p := f.l.Pending()[id]; p.Code != "next_pass" {
		t.Fatalf("every machine up is avoided: pending %+v, want next_pass", p)
	}
	r = runLost("uni-a", "uni-a/m1", 3500)
	tk, _ = f.l.Task(id)
	if tk.State != TaskFailed || tk.MachineFailures != 3 || tk.Failures != 0 || tk.EndedMs != 3502 ||
		tk.Reason != "max_attempts: 3 runs failed by their machines; last on uni-a/m1: machine lost" {
		t.Fatalf("after the third lost run: %s %q ended %d, machine failures %d, failures %d", tk.State, tk.Reason, tk.EndedMs, tk.MachineFailures, tk.Failures)
	}
	if tr := r.Transitions[0]; tr.To != TaskFailed {
		t.Fatalf("transition %+v", tr)
	}
	// It can be retried, and then counts from zero.
	f.must(retryCmd("uni-a", id, 3600))

	// Assigned but never started: no attempt.
	f.must(decide("uni-b", 3700, alloc(id, "uni-a/m2")))
	f.must(lost("uni-a", "uni-a/m2", 3701))
	if tk, _ := f.l.Task(id); tk.State != TaskQueued || tk.MachineFailures != 0 || len(tk.Avoid) != 0 {
		t.Fatalf("lost before it started: %s, machine failures %d, avoid %v", tk.State, tk.MachineFailures, tk.Avoid)
	}
}

// sameRule checks that the ledger lets task id onto exactly the machines
// of its policy view that policy.Eligible allows it (the policy and the
// ledger's check of a decision apply one rule).
func sameRule(t *testing.T, l *Ledger, id string) {
	t.Helper()
	st, vm := l.PolicyView(0, 0)
	for _, q := range st.Queued {
		if q.ID != id {
			continue
		}
		tk := l.tasks[id]
		for j, ok := range policy.Eligible(st.Machines, q, st.Orgs) {
			m := l.machines[vm.Machines[j]]
			if ledgerOK := l.mismatch(m, tk) == "" && l.avoidHolds(m, tk) == ""; ledgerOK != ok {
				t.Fatalf("%s on %s: policy eligible %v, ledger %v (avoids %v)", id, m.ID, ok, ledgerOK, tk.Avoid)
			}
		}
		return
	}
	t.Fatalf("%s is not queued in the policy view", id)
}

// TestLostMachineOldRuleWithoutMaxAttempts: a task whose spec has no
// max_attempts (an old log) keeps the old rule for a lost machine: back
// to the queue, counted in nothing, no machine avoided.
func TestLostMachineOldRuleWithoutMaxAttempts(t *testing.T) {
	f := base(t)
	f.must(submitRetry(2500, 0, 0))
	const id = "uni-a-4"
	for k, m := range []string{"uni-a/m1", "uni-a/m1", "uni-a/m2"} {
		at := 3000 + int64(k)*100
		f.must(decide("uni-b", at, alloc(id, m)))
		f.must(started("uni-a", id, m, at+1))
		f.must(lost("uni-a", m, at+2))
		f.must(heartbeat("uni-a", m, at+3))
	}
	tk, _ := f.l.Task(id)
	if tk.State != TaskQueued || tk.MachineFailures != 0 || tk.Failures != 0 || len(tk.Avoid) != 0 {
		t.Fatalf("after lost machines: %s, machine failures %d, failures %d, avoid %v", tk.State, tk.MachineFailures, tk.Failures, tk.Avoid)
	}
}

func TestRetryTask(t *testing.T) {
	f := base(t)
	f.must(submitRetry(2500, 1, 0))
	const id = "uni-a-4"
	runOnce(f, "uni-a", id, "uni-a/m1", 3000, "not_allowed: /bin/sh")
	if tk, _ := f.l.Task(id); tk.State != TaskFailed {
		t.Fatalf("max_attempts 1: %s", tk.State)
	}
	cases := []struct {
		name string
		cmd  Command
		code Code
	}{
		{"another organisation", retryCmd("uni-b", id, 3100), CodeNotOwner},
		{"another organisation's peer acting for the owner", func() Command { c := retryCmd("uni-a", id, 3100); c.Peer = peerOf("uni-b"); return c }(), CodeNotOwner},
		{"a queued task", retryCmd("uni-a", "uni-a-2", 3100), CodeBadState},
		{"an unknown task", retryCmd("uni-a", "uni-a-99", 3100), CodeUnknownTask},
		{"a malformed ID", retryCmd("uni-a", "", 3100), CodeMalformed},
	}
	for _, tc := range cases {
		h := f.l.Hash()
		r := f.apply(tc.cmd)
		if r.Applied() || r.Err.Code != tc.code {
			t.Errorf("%s: %+v, want %s", tc.name, r.Err, tc.code)
		}
		if f.l.Hash() != h {
			t.Errorf("%s: the state changed", tc.name)
		}
	}
	r := f.must(retryCmd("uni-a", id, 3200))
	tk, _ := f.l.Task(id)
	if tk.State != TaskQueued || tk.MachineFailures != 0 || len(tk.Avoid) != 0 || tk.Reason != "" || tk.EndedMs != 0 {
		t.Fatalf("retried: %+v", tk)
	}
	if tr := r.Transitions[0]; tr.From != TaskFailed || tr.To != TaskQueued {
		t.Fatalf("transition %+v", tr)
	}
	// A cancelled task too; and it may be placed on the machine again.
	f.must(cancel("uni-a", "uni-a-3", 3300))
	f.must(retryCmd("uni-a", "uni-a-3", 3400))
	if r := f.must(decide("uni-b", 3500, alloc(id, "uni-a/m1"))); r.AcceptedDecisions() != 1 {
		t.Fatalf("placing the retried task where it failed: %+v", r.Decisions)
	}
}

func TestRetrySpecBounds(t *testing.T) {
	for _, s := range []Spec{{MaxAttempts: -1}, {MaxAttempts: MaxMaxAttempts + 1}, {Retries: -1}, {Retries: MaxRetries + 1}, {Job: "../x"}, {Job: strings.Repeat("j", MaxNameLen+1)}} {
		if err := s.validate(); err == nil || err.Code != CodeMalformed {
			t.Errorf("%+v: %v", s, err)
		}
	}
	if err := (&Spec{Job: "sweep-1", MaxAttempts: MaxMaxAttempts, Retries: MaxRetries}).validate(); err != nil {
		t.Errorf("at the bounds: %v", err)
	}
}
