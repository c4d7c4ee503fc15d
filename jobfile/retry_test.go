package jobfile

import (
	"strings"
	"testing"
)

// TestParseRetries: max_attempts and retries are read, inherited from
// defaults and overridden per task; unset they are 0 (the ledger's
// defaults).
func TestParseRetries(t *testing.T) {
	src := `defaults:
  wall_clock_limit: 1m
  size: 1
  max_attempts: 5
tasks:
  - argv: [/bin/sh, a.sh]
  - argv: [/bin/sh, b.sh]
    max_attempts: 1
    retries: 2
`
	job, err := Parse("r.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a := job.Tasks[0]; a.MaxAttempts != 5 || a.Retries != 0 {
		t.Errorf("inherited: %+v", a)
	}
	if b := job.Tasks[1]; b.MaxAttempts != 1 || b.Retries != 2 {
		t.Errorf("overridden: %+v", b)
	}
	plain, err := Parse("p.yaml", []byte("tasks:\n  - {argv: [x], size: 1, wall_clock_limit: 1m}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p := plain.Tasks[0]; p.MaxAttempts != 0 || p.Retries != 0 {
		t.Errorf("unset: %+v", p)
	}
}

// TestParseBadRetries: every mistake names the line, column and field,
// and nothing is returned.
func TestParseBadRetries(t *testing.T) {
	const ok = "argv: [x]\n    size: 1\n    wall_clock_limit: 1m"
	for _, c := range []struct{ name, src, want string }{
		{"zero max_attempts", "tasks:\n  - " + ok + "\n    max_attempts: 0\n", "r.yaml:5:19: tasks[0].max_attempts: must be between 1 and 100, got 0"},
		{"too many retries", "tasks:\n  - " + ok + "\n    retries: 101\n", "r.yaml:5:14: tasks[0].retries: must be between 0 and 100, got 101"},
		{"fractional retries", "tasks:\n  - " + ok + "\n    retries: 1.5\n", "r.yaml:5:14: tasks[0].retries: must be a whole number"},
		{"string max_attempts in defaults", "defaults:\n  max_attempts: three\ntasks:\n  - " + ok + "\n", "r.yaml:2:17: defaults.max_attempts:"},
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
