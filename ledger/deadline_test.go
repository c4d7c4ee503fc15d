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
