package jobfile

import (
	"strings"
	"testing"
)

// TestParseNodes: nodes is read, inherited from defaults and overridden
// per task; unset it is 0 (one machine).
func TestParseNodes(t *testing.T) {
	src := `defaults:
  wall_clock_limit: 1h
  size: 1
  cpus: 4
  nodes: 2
tasks:
  - name: mpi
    argv: [mpirun, ./solver]
  - name: wide
    argv: [mpirun, ./solver]
    nodes: 8
    cpus: 16
  - name: serial
    argv: [./post]
    nodes: 1
`
	job, err := Parse("n.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		nodes int
		cpus  int64
	}{{2, 4}, {8, 16}, {1, 4}} {
		if got := job.Tasks[i]; got.Nodes != want.nodes || got.CPUs != want.cpus {
			t.Errorf("task %d: nodes %d cpus %d, want %d and %d", i, got.Nodes, got.CPUs, want.nodes, want.cpus)
		}
	}
	plain, err := Parse("p.yaml", []byte("tasks:\n  - {argv: [x], size: 1, wall_clock_limit: 1m}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := plain.Tasks[0].Nodes; n != 0 {
		t.Errorf("unset: nodes %d", n)
	}
}

// TestParseBadNodes: every mistake names the line, column and field, and
// nothing is returned.
func TestParseBadNodes(t *testing.T) {
	const ok = "argv: [x]\n    size: 1\n    wall_clock_limit: 1m"
	for _, c := range []struct{ name, src, want string }{
		{"zero", "tasks:\n  - " + ok + "\n    nodes: 0\n", "n.yaml:5:12: tasks[0].nodes: must be between 1 and 1024, got 0"},
		{"above the bound", "tasks:\n  - " + ok + "\n    nodes: 1025\n", "n.yaml:5:12: tasks[0].nodes: must be between 1 and 1024, got 1025"},
		{"fractional", "tasks:\n  - " + ok + "\n    nodes: 1.5\n", "n.yaml:5:12: tasks[0].nodes: must be a whole number"},
		{"text in defaults", "defaults:\n  nodes: two\ntasks:\n  - " + ok + "\n", "n.yaml:2:10: defaults.nodes:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			job, err := Parse("n.yaml", []byte(c.src), Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if job != nil {
				t.Fatal("a job came back with the error")
			}
		})
	}
}

func TestExampleMPI(t *testing.T) {
	job := loadExample(t, "mpi.yaml")
	if job.Name != "mpi-hello" || len(job.Tasks) != 1 {
		t.Fatalf("job %q with %d tasks", job.Name, len(job.Tasks))
	}
	if tk := job.Tasks[0]; tk.Nodes != 2 || tk.CPUs != 4 || tk.Argv[0] != "/bin/sh" {
		t.Fatalf("task %+v", tk)
	}
}
