package main

import (
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// TestTimeLeft: a soft-deadline task's time to its deadline, before and
// after it, and whether an ended task met it.
func TestTimeLeft(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	for _, tc := range []struct {
		t    api.TaskView
		want string
	}{
		{api.TaskView{}, "-"},
		{api.TaskView{DeadlineMs: 10_000_000 + 7_500_000}, "2h5m0s left"},
		{api.TaskView{DeadlineMs: 10_000_000 - 90_000}, "late by 1m30s"},
		{api.TaskView{DeadlineMs: 9_000_000, EndedMs: 8_000_000}, "met"},
		{api.TaskView{DeadlineMs: 9_000_000, EndedMs: 9_060_000}, "missed by 1m0s"},
	} {
		if got := timeLeft(tc.t, now); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.t, got, tc.want)
		}
	}
}

// TestPrintTasksClasses: the class columns appear only when a listed task
// has a class.
func TestPrintTasksClasses(t *testing.T) {
	plain := []api.TaskView{{ID: "a-1", Org: "a", State: "queued"}}
	var b strings.Builder
	if err := printTasks(&b, plain); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "CLASS") {
		t.Fatalf("class columns without classes:\n%s", b.String())
	}
	b.Reset()
	classed := append(plain, api.TaskView{ID: "a-2", Org: "a", State: "running", Class: "soft-deadline",
		DeadlineMs: time.Now().Add(3 * time.Hour).UnixMilli(), PredictedFinishMs: 1_800_000_000_000})
	if err := printTasks(&b, classed); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"CLASS", "DEADLINE", "PREDICTED FINISH", "soft-deadline", "left", "2027-01-15 08:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("listing lacks %q:\n%s", want, out)
		}
	}
}
