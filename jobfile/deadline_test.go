package jobfile

import (
	"strings"
	"testing"
	"time"
)

// TestParseDeadlines: class, deadline (relative or absolute) and on_miss
// are read, inherited from defaults and overridden per task; a task that
// gives none has no class.
func TestParseDeadlines(t *testing.T) {
	src := `defaults:
  wall_clock_limit: 1m
  size: 1
  class: soft-deadline
  deadline: 6h
tasks:
  - argv: [a]
  - argv: [b]
    deadline: "2026-11-26T18:00:00Z"
    on_miss: nice
  - argv: [c]
    class: nice
    deadline: 1h
`
	_, err := Parse("d.yaml", []byte(src), Options{})
	if err == nil || !strings.Contains(err.Error(), "d.yaml:13:15: tasks[2].deadline: a deadline needs class: soft-deadline") {
		t.Fatalf("nice with a deadline: got %v", err)
	}
	src = strings.Replace(src, "    deadline: 1h\n", "", 1)
	job, err := Parse("d.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	want := []struct {
		class  string
		dl     Deadline
		onMiss string
	}{
		{ClassSoftDeadline, Deadline{In: 6 * time.Hour}, ""},
		{ClassSoftDeadline, Deadline{At: at}, OnMissNice},
		{ClassNice, Deadline{}, ""},
	}
	for i, w := range want {
		g := job.Tasks[i]
		if g.Class != w.class || !g.Deadline.At.Equal(w.dl.At) || g.Deadline.In != w.dl.In || g.OnMiss != w.onMiss {
			t.Errorf("task %d: got class %q deadline %+v on_miss %q, want %+v", i, g.Class, g.Deadline, g.OnMiss, w)
		}
	}
	plain, err := Parse("p.yaml", []byte("tasks:\n  - {argv: [x], size: 1, wall_clock_limit: 1m}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p := plain.Tasks[0]; p.Class != "" || !p.Deadline.IsZero() || p.OnMiss != "" {
		t.Errorf("unset: %+v", p)
	}
}

// TestParseBadDeadlines: every mistake names the line, column and field,
// and nothing is returned.
func TestParseBadDeadlines(t *testing.T) {
	const ok = "argv: [x]\n    size: 1\n    wall_clock_limit: 1m"
	for _, c := range []struct{ name, src, want string }{
		{"unknown class", "tasks:\n  - " + ok + "\n    class: urgent\n", `r.yaml:5:12: tasks[0].class: must be nice or soft-deadline, got "urgent"`},
		{"soft without deadline", "tasks:\n  - " + ok + "\n    class: soft-deadline\n", "r.yaml:5:12: tasks[0].class: class soft-deadline needs a deadline"},
		{"deadline without class", "tasks:\n  - " + ok + "\n    deadline: 2h\n", "r.yaml:5:15: tasks[0].deadline: a deadline needs class: soft-deadline"},
		{"on_miss without class", "tasks:\n  - " + ok + "\n    on_miss: nice\n", "r.yaml:5:14: tasks[0].on_miss: on_miss needs class: soft-deadline"},
		{"bad on_miss", "tasks:\n  - " + ok + "\n    class: soft-deadline\n    deadline: 2h\n    on_miss: wait\n", `r.yaml:7:14: tasks[0].on_miss: must be refuse or nice, got "wait"`},
		{"bad deadline", "tasks:\n  - " + ok + "\n    class: soft-deadline\n    deadline: tomorrow\n", `r.yaml:6:15: tasks[0].deadline: must be a duration after submission like "6h" or an RFC 3339 time`},
		{"negative deadline", "tasks:\n  - " + ok + "\n    class: soft-deadline\n    deadline: -2h\n", `r.yaml:6:15: tasks[0].deadline: must be > 0 after submission, got "-2h"`},
		{"deadline in defaults, nice task", "defaults:\n  deadline: 1h\ntasks:\n  - " + ok + "\n", "r.yaml:2:13: defaults.deadline: a deadline needs class: soft-deadline"},
	} {
		t.Run(c.name, func(t *testing.T) {
			job, err := Parse("r.yaml", []byte(c.src), Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if job != nil {
				t.Fatal("a job came back with the error")
			}
		})
	}
}
