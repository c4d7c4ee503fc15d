package main

import (
	"strings"
	"testing"
)

const header = "system\ttasks\trepeat\telapsed_s\tsubmit_s\tresolution_s\tload1\n"

func TestParseResultsRejects(t *testing.T) {
	for _, tc := range []struct {
		name, line, want string
	}{
		{"fields", "slurm-wrap\t1000\t1\t40", "4 fields"},
		{"system", "pbs\t1000\t1\t40\t1\t0.2\t1.0", `system "pbs"`},
		{"tasks", "slurm-wrap\t0\t1\t40\t1\t0.2\t1.0", `tasks "0"`},
		{"repeat", "slurm-wrap\t1000\tx\t40\t1\t0.2\t1.0", `repeat "x"`},
		{"elapsed zero", "slurm-wrap\t1000\t1\t0\t1\t0.2\t1.0", `elapsed "0"`},
		{"negative", "slurm-wrap\t1000\t1\t40\t-1\t0.2\t1.0", `"-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseResults(strings.NewReader(header + tc.line + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "line 2") {
				t.Fatalf("error %v, want one naming line 2 and %q", err, tc.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// The ratio of a pair is against the faster Slurm variant of the same size
// and repeat, whichever it is.
func TestTableRatios(t *testing.T) {
	in := header +
		"slurm-wrap\t1000\t1\t40\t7\t0.2\t1.0\n" + // 25/s
		"slurm-array\t1000\t1\t50\t0\t0.2\t1.0\n" + // 20/s
		"coopgrid-A\t1000\t1\t4\t0\t0.2\t1.0\n" + // 250/s: 10×
		"coopgrid-B\t1000\t1\t8\t0\t0.2\t1.0\n" + // 125/s: 5×
		"slurm-wrap\t1000\t2\t50\t7\t0.2\t2.0\n" + // 20/s
		"slurm-array\t1000\t2\t25\t0\t0.2\t2.0\n" + // 40/s
		"coopgrid-A\t1000\t2\t2\t0\t0.2\t2.0\n" + // 500/s: 12.5×
		"coopgrid-A\t1000\t3\t2\t0\t0.2\t2.0\n" // no Slurm in repeat 3: no pair
	rows, err := parseResults(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	rs := ratioPairs(rows, "coopgrid-A", 1000)
	if len(rs) != 2 || rs[0] != 10 || rs[1] != 12.5 {
		t.Fatalf("ratios %v, want [10 12.5]", rs)
	}
	var b strings.Builder
	if err := writeTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 1000 | coopgrid A: 1 org × 64 machines, 1 peer | 3 | 500.0 | 250.0-500.0 | 2.00 | 1.0 2.0 2.0 |",
		"| 1000 | Slurm, one `sbatch --wrap true` per job | 2 | 22.5 | 20.0-25.0 | 45.00 | 1.0 2.0 |",
		"| 1000 | coopgrid-A | 2 | 11.25 | 10.00-12.50 | yes |",
		"| 1000 | coopgrid-B | 1 | 5.00 | 5.00-5.00 | no |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
