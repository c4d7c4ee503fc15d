package ledger

import (
	"strings"
	"testing"
)

// TestDeadlineSpecRejects: a class or deadline that does not fit is
// refused with a message naming the field, and changes nothing.
func TestDeadlineSpecRejects(t *testing.T) {
	submit := func(v int, s Spec) Command {
		c := goldenEnv()
		c.V = v
		s.Argv = []string{"/bin/sh"}
		c.SubmitTasks = &SubmitTasks{Tasks: []TaskSpec{{SizeMFlop: 1000, Spec: s}}}
		return c
	}
	for _, tc := range []struct {
		name string
		cmd  Command
		code Code
		msg  string
	}{
		{"unknown class", submit(3, Spec{Class: "urgent"}), CodeMalformed, `class "urgent"`},
		{"soft without deadline", submit(3, Spec{Class: ClassSoftDeadline}), CodeMalformed, "needs a deadline"},
		{"soft with a negative deadline", submit(3, Spec{Class: ClassSoftDeadline, DeadlineMs: -1}), CodeMalformed, "needs a deadline"},
		{"nice with a deadline", submit(3, Spec{Class: ClassNice, DeadlineMs: 5}), CodeMalformed, "only a soft-deadline task has a deadline"},
		{"no class with a deadline", submit(3, Spec{DeadlineMs: 5}), CodeMalformed, "only a soft-deadline task has a deadline"},
		{"class in a version-2 command", submit(2, Spec{Class: ClassNice}), CodeBadVersion, "submit_tasks.tasks[0].spec.class, of version 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncodeCommand(tc.cmd)
			if CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %s containing %q", err, tc.code, tc.msg)
			}
			f := assignedFixture(t)
			before := f.l.Hash()
			if r := f.apply(tc.cmd); r.Err == nil || r.Err.Code != tc.code {
				t.Fatalf("applied: %+v", r)
			}
			if f.l.Hash() != before {
				t.Fatal("a refused submission changed the state")
			}
		})
	}
}

// TestScheduleTriggerPreemptsNiceForADeadline: on a federation whose peers
// compute the pass, a schedule trigger applies the pass's preemption of a
// nice task for a soft-deadline task (docs/POLICY.md §9, "Preemption and
// reservations in the pass"): the nice task on the only machine fast
// enough goes back to the queue, the soft task takes its machine, and the
// ledger accepts the decision as any preemption.
func TestScheduleTriggerPreemptsNiceForADeadline(t *testing.T) {
	f := newFed(t)
	f.must(registerRules("uni-a", 300_000, schedRules("ehosep", 0), mspec("fast", 10_000, 150_000), mspec("slow", 1000, 100_000)))
	nice := TaskSpec{SizeMFlop: 36_000_000, Spec: Spec{Argv: []string{"/bin/sh"}, Class: ClassNice}}
	f.must(submitSpecs("uni-a", 2000, nice, nice))
	r := f.must(trigger("uni-a", 2500))
	if r.AcceptedDecisions() != 2 {
		t.Fatalf("the nice tasks: %+v", decisionsOf(r))
	}
	var onFast string
	for _, d := range decisionsOf(r) {
		f.must(started("uni-a", d.Task, d.Machine, 3000))
		if d.Machine == "uni-a/fast" {
			onFast = d.Task
		}
	}
	// 3 600 000 MFlop: 396 s with the margin on fast, 3960 s on slow; due
	// 1000 s after submission: only fast meets it.
	soft := TaskSpec{SizeMFlop: 3_600_000, Spec: Spec{Argv: []string{"/bin/sh"}, Class: ClassSoftDeadline, DeadlineMs: 4000 + 1_000_000}}
	id := f.must(submitSpecs("uni-a", 4000, soft)).TaskIDs[0]
	r = f.must(trigger("uni-a", 5000))
	want := []Decision{{Kind: DecidePreempt, Task: id, Machine: "uni-a/fast", Victim: onFast}}
	if got := decisionsOf(r); len(got) != 1 || got[0].Kind != want[0].Kind || got[0].Task != id || got[0].Machine != "uni-a/fast" || got[0].Victim != onFast || r.AcceptedDecisions() != 1 {
		t.Fatalf("trigger decided %+v (%d accepted), want %+v", got, r.AcceptedDecisions(), want)
	}
	if tk, _ := f.l.Task(id); tk.State != TaskAssigned || tk.Machine != "uni-a/fast" {
		t.Fatalf("soft task %s on %q", tk.State, tk.Machine)
	}
	if v, _ := f.l.Task(onFast); v.State != TaskQueued || v.Segments[len(v.Segments)-1].Outcome != OutcomePreempting {
		t.Fatalf("nice victim %s, last run %+v", v.State, v.Segments)
	}
	// The victim reserves behind the other nice task: a pass that only
	// reserves decides nothing, so the leader appends no trigger for it.
	if _, placeable, err := f.l.Placeable(6000); err != nil || placeable {
		t.Fatalf("Placeable %v, %v: a pass that only reserves decides nothing", placeable, err)
	}
}
