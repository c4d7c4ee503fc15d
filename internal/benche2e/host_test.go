package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRunHostRunsEveryProcessWithinTheParallelism: each of n real
// processes runs once, never more than parallel at a time (each one
// counts the others alive while it sleeps a little).
func TestRunHostRunsEveryProcessWithinTheParallelism(t *testing.T) {
	dir := t.TempDir()
	slots, log := filepath.Join(dir, "slots"), filepath.Join(dir, "log")
	if err := os.Mkdir(slots, 0o755); err != nil {
		t.Fatal(err)
	}
	script := `touch ` + slots + `/$$; ls ` + slots + ` | wc -l >> ` + log + `; sleep 0.05; rm ` + slots + `/$$`
	for _, tc := range []struct{ n, parallel int }{{30, 3}, {5, 8}, {12, 1}} {
		if err := os.WriteFile(log, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := runHost(context.Background(), []string{"/bin/sh", "-c", script}, tc.n, tc.parallel); err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		counts := strings.Fields(string(data))
		if len(counts) != tc.n {
			t.Fatalf("%+v: %d processes ran, want %d", tc, len(counts), tc.n)
		}
		for _, c := range counts {
			if k, _ := strconv.Atoi(c); k < 1 || k > tc.parallel {
				t.Fatalf("%+v: a process saw %d alive, want 1 to %d", tc, k, tc.parallel)
			}
		}
	}
}

// TestRunHostFails: a failing process fails the run, naming it; bad
// arguments are refused before anything runs.
func TestRunHostFails(t *testing.T) {
	_, err := runHost(context.Background(), []string{"/bin/sh", "-c", "exit 3"}, 10, 2)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "of 10") {
		t.Fatalf("a failing process: %v", err)
	}
	for _, tc := range []struct {
		argv        []string
		n, parallel int
	}{{nil, 1, 1}, {[]string{"true"}, 0, 1}, {[]string{"true"}, 1, 0}} {
		if _, err := runHost(context.Background(), tc.argv, tc.n, tc.parallel); err == nil {
			t.Errorf("%+v accepted", tc)
		}
	}
}

// TestHostCommandPrintsAResultLine: `benche2e host` prints the line
// run.sh's results file takes, which the table reads back.
func TestHostCommandPrintsAResultLine(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"host", "--tasks", "20", "--parallel", "4"}, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	f := strings.Fields(out.String())
	if len(f) != 7 || f[0] != "RESULT" || f[1] != "host" || f[2] != "20" {
		t.Fatalf("output %q", out.String())
	}
	if s, err := strconv.ParseFloat(f[3], 64); err != nil || s <= 0 {
		t.Fatalf("elapsed %q", f[3])
	}
	if err := run(context.Background(), []string{"host", "--tasks", "0"}, &out, &errb); err == nil {
		t.Error("--tasks 0 accepted")
	}
}

// The fraction of a pair is coopgrid's rate over the host's of the same
// size and repeat.
func TestTableHostFractions(t *testing.T) {
	in := header +
		"host\t1000\t1\t1\t0\t0\t1.0\n" + // 1000/s
		"coopgrid-A\t1000\t1\t1.25\t0\t0\t1.0\n" + // 800/s: 0.8
		"coopgrid-B\t1000\t1\t2\t0\t0\t1.0\n" + // 500/s: 0.5
		"host\t1000\t2\t0.5\t0\t0\t1.0\n" + // 2000/s
		"coopgrid-A\t1000\t2\t1\t0\t0\t1.0\n" + // 1000/s: 0.5
		"coopgrid-A\t1000\t3\t1\t0\t0\t1.0\n" // no host run in repeat 3: no pair
	rows, err := parseResults(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if fs := hostFractions(rows, "coopgrid-A", 1000); len(fs) != 2 || fs[0] != 0.8 || fs[1] != 0.5 {
		t.Fatalf("fractions %v, want [0.8 0.5]", fs)
	}
	var b strings.Builder
	if err := writeTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 1000 | this host alone: the same `true` processes, 64 at a time (`benche2e host`) | 2 | 1500.0 | 1000.0-2000.0 |",
		"| 1000 | coopgrid-A | 2 | 0.65 | 0.50-0.80 | ≥ 0.80: no |",
		"| 1000 | coopgrid-B | 1 | 0.50 | 0.50-0.50 | ≥ 0.60: no |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
