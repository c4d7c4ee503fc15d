package jobfile

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseRequests: cpus, memory with units, gpus and requirements are
// read, inherited from defaults and overridden per task.
func TestParseRequests(t *testing.T) {
	src := `defaults:
  wall_clock_limit: 1m
  size: 1
  cpus: 4
  memory: 2GiB
  requirements:
    - {attribute: os, operator: "=", value: linux}
tasks:
  - argv: [/bin/sh, a.sh]
  - argv: [/bin/sh, b.sh]
    cpus: 1
    memory: 1000000
    gpus: 1
    requirements:
      - {attribute: label.matlab, operator: is_set}
      - {attribute: label.cuda, operator: version, value: ">= 11.0, < 13"}
      - {attribute: arch, operator: in, value: "amd64, arm64"}
  - argv: [/bin/true]
    requirements: []
`
	job, err := Parse("r.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := job.Tasks[0], job.Tasks[1], job.Tasks[2]
	if a.CPUs != 4 || a.MemoryBytes != 2<<30 || a.GPUs != 0 || !reflect.DeepEqual(a.Requirements, []Requirement{{"os", "=", "linux"}}) {
		t.Errorf("inherited: %+v", a)
	}
	want := []Requirement{{"label.matlab", "is_set", ""}, {"label.cuda", "version", ">= 11.0, < 13"}, {"arch", "in", "amd64, arm64"}}
	if b.CPUs != 1 || b.MemoryBytes != 1_000_000 || b.GPUs != 1 || !reflect.DeepEqual(b.Requirements, want) {
		t.Errorf("overridden: %+v", b)
	}
	if c.CPUs != 4 || len(c.Requirements) != 0 {
		t.Errorf("emptied requirements: %+v", c)
	}
}

// TestParseBadRequests: every mistake names the line, column and field.
func TestParseBadRequests(t *testing.T) {
	const ok = "argv: [x]\n    size: 1\n    wall_clock_limit: 1m"
	for _, c := range []struct{ name, src, want string }{
		{"zero cpus", "tasks:\n  - " + ok + "\n    cpus: 0\n", "r.yaml:5:11: tasks[0].cpus: must be between 1 and 65536, got 0"},
		{"fractional cpus", "tasks:\n  - " + ok + "\n    cpus: 1.5\n", "r.yaml:5:11: tasks[0].cpus: must be a whole number"},
		{"bad memory", "tasks:\n  - " + ok + "\n    memory: lots\n", `r.yaml:5:13: tasks[0].memory: want a size such as 512MiB or 16GiB (or a number of bytes), got "lots"`},
		{"negative gpus", "tasks:\n  - " + ok + "\n    gpus: -1\n", "r.yaml:5:11: tasks[0].gpus:"},
		{"unknown attribute", "tasks:\n  - " + ok + "\n    requirements:\n      - {attribute: colour, operator: \"=\", value: red}\n", `r.yaml:6:21: tasks[0].requirements[0].attribute: "colour": want os, arch or label.NAME`},
		{"unknown operator", "tasks:\n  - " + ok + "\n    requirements:\n      - {attribute: os, operator: \"~\", value: linux}\n", `r.yaml:6:35: tasks[0].requirements[0].operator: "~": want one of =, !=, in, not_in, version, is_set, is_not_set`},
		{"bad version", "tasks:\n  - " + ok + "\n    requirements:\n      - {attribute: label.cuda, operator: version, value: \"soon\"}\n", `r.yaml:6:59: tasks[0].requirements[0].value: "soon": want version constraints`},
		{"is_set with a value", "tasks:\n  - " + ok + "\n    requirements:\n      - {attribute: os, operator: is_set, value: x}\n", "tasks[0].requirements[0].value: operator is_set takes no value"},
		{"missing operator", "tasks:\n  - " + ok + "\n    requirements:\n      - {attribute: os}\n", "r.yaml:6:9: tasks[0].requirements[0]: missing operator"},
		{"unknown requirement key", "tasks:\n  - " + ok + "\n    requirements:\n      - {attribute: os, operator: \"=\", value: linux, op: x}\n", "tasks[0].requirements[0].op: unknown key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(c.src), Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
