package jobfile

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// TestParseAlternatives: a key an alternative leaves out takes the task's
// value (after the defaults); the task's request is the first
// alternative's; a template's tasks each get the list.
func TestParseAlternatives(t *testing.T) {
	src := `defaults:
  size: 1
  cpus: 4
  wall_clock_limit: 3h
tasks:
  - name: solver
    argv: [mpirun, ./solver]
    alternatives:
      - {nodes: 2, wall_clock_limit: 1h}
      - {nodes: 1, wall_clock_limit: 1h50m}
      - {cpus: 2}
  - name: plain
    argv: [./post]
`
	job, err := Parse("m.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Alternative{{2, 4, time.Hour}, {1, 4, 110 * time.Minute}, {1, 2, 3 * time.Hour}}
	s := job.Tasks[0]
	if !reflect.DeepEqual(s.Alternatives, want) {
		t.Fatalf("alternatives %+v, want %+v", s.Alternatives, want)
	}
	if s.Nodes != 2 || s.CPUs != 4 || s.WallClockLimit != time.Hour {
		t.Fatalf("the task's request %d×%d for %s, want the first alternative's", s.Nodes, s.CPUs, s.WallClockLimit)
	}
	if p := job.Tasks[1]; p.Alternatives != nil || p.WallClockLimit != 3*time.Hour {
		t.Fatalf("plain task: %+v", p)
	}

	// Every alternative gives a limit: the task needs none; a first
	// alternative of one node leaves Nodes at 0 (one machine).
	tmpl := `template:
  count: 3
  argv: [./x]
  size: 1
  alternatives:
    - {nodes: 1, cpus: 8, wall_clock_limit: 2h}
    - {nodes: 4, cpus: 8, wall_clock_limit: 40m}
`
	job, err = Parse("t.yaml", []byte(tmpl), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range job.Tasks {
		if len(tk.Alternatives) != 2 || tk.Nodes != 0 || tk.CPUs != 8 || tk.WallClockLimit != 2*time.Hour {
			t.Fatalf("task %+v", tk)
		}
	}
}

// TestParseBadAlternatives: every mistake names line, column and field,
// and nothing is returned.
func TestParseBadAlternatives(t *testing.T) {
	const task = "tasks:\n  - argv: [x]\n    size: 1\n"
	many := "    alternatives:\n"
	for i := range MaxAlternatives + 1 {
		many += fmt.Sprintf("      - {nodes: 1, wall_clock_limit: %dm}\n", i+1)
	}
	manyTasks := "template:\n  count: 101\n  argv: [x]\n  size: 1\n  alternatives:\n    - {nodes: 1, wall_clock_limit: 1h}\n    - {nodes: 2, wall_clock_limit: 1h}\n"
	for _, c := range []struct{ name, src, want string }{
		{"one", task + "    alternatives:\n      - {nodes: 2, wall_clock_limit: 1h}\n",
			"m.yaml:5:7: tasks[0].alternatives: 1 alternatives: want 2 to 16"},
		{"too many", task + many, "m.yaml:5:7: tasks[0].alternatives: 17 alternatives: want 2 to 16"},
		{"not a list", task + "    alternatives: {nodes: 2}\n", "m.yaml:4:19: tasks[0].alternatives:"},
		{"unknown key", task + "    alternatives:\n      - {nodes: 2, wall_clock_limit: 1h}\n      - {gpus: 1, wall_clock_limit: 1h}\n",
			"m.yaml:6:10: tasks[0].alternatives[1].gpus:"},
		{"zero nodes", task + "    alternatives:\n      - {nodes: 0, wall_clock_limit: 1h}\n      - {nodes: 2, wall_clock_limit: 1h}\n",
			"m.yaml:5:17: tasks[0].alternatives[0].nodes: must be between 1 and 1024, got 0"},
		{"bad limit", task + "    alternatives:\n      - {nodes: 1, wall_clock_limit: 1h}\n      - {nodes: 2, wall_clock_limit: soon}\n",
			"m.yaml:6:38: tasks[0].alternatives[1].wall_clock_limit: must be a duration"},
		{"no limit", task + "    alternatives:\n      - {nodes: 1, wall_clock_limit: 1h}\n      - {nodes: 2}\n",
			"m.yaml:6:9: tasks[0].alternatives[1]: missing wall_clock_limit"},
		{"empty", task + "    wall_clock_limit: 1h\n    alternatives:\n      - {nodes: 2}\n      - {}\n",
			"m.yaml:7:9: tasks[0].alternatives[1]: empty"},
		{"duplicate", task + "    wall_clock_limit: 1h\n    cpus: 1\n    alternatives:\n      - {nodes: 2}\n      - {nodes: 2, cpus: 1}\n",
			"m.yaml:8:9: tasks[0].alternatives[1]: the same request as alternative 0"},
		{"class", task + "    class: nice\n    alternatives:\n      - {nodes: 1, wall_clock_limit: 1h}\n      - {nodes: 2, wall_clock_limit: 1h}\n",
			"m.yaml:6:7: tasks[0].alternatives: a task with alternatives has no class"},
		{"too many tasks", manyTasks, "m.yaml:6:5: template.alternatives: 101 tasks with alternatives in one job, at most 100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			job, err := Parse("m.yaml", []byte(c.src), Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if job != nil {
				t.Fatal("a job came back with the error")
			}
		})
	}
}

// TestAlternativeLimitsMatch: this package's bounds are the API's, the
// ledger's and the policy's.
func TestAlternativeLimitsMatch(t *testing.T) {
	for _, b := range []struct{ ours, theirs int }{
		{MaxAlternatives, api.MaxAlternatives}, {MaxAlternatives, ledger.MaxAlternatives},
		{MaxAlternatives, policy.MaxSAAlternatives}, {MaxMoldableTasks, api.MaxMoldablePerSubmit},
	} {
		if b.ours != b.theirs {
			t.Errorf("bound %d, elsewhere %d", b.ours, b.theirs)
		}
	}
}

func TestExampleMoldable(t *testing.T) {
	job := loadExample(t, "moldable.yaml")
	if tk := job.Tasks[0]; len(tk.Alternatives) != 2 || tk.Nodes != 2 || tk.WallClockLimit != time.Hour {
		t.Fatalf("task %+v", tk)
	}
}
