// Command benchtable turns `go test -bench` output (stdin) into the
// markdown tables of docs/BENCHMARKS.md: one table per package, one row per
// benchmark, with ns/op and every custom metric the benchmark reports
// (decisions/s, ns/decision, …). The machine line (goos, goarch, cpu) heads
// the output so a table never travels without the machine it was measured
// on. Columns keep the order the benchmarks print their units in. `make
// bench` runs it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

type row struct {
	name    string
	units   []string // in the order the benchmark printed them
	metrics map[string]string
}

type pkg struct {
	name  string
	units []string
	rows  []row
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var (
		machine []string
		pkgs    []*pkg
		cur     *pkg
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "goos:"), strings.HasPrefix(line, "goarch:"), strings.HasPrefix(line, "cpu:"):
			if !contains(machine, line) {
				machine = append(machine, line)
			}
		case strings.HasPrefix(line, "pkg:"):
			cur = &pkg{name: strings.TrimSpace(strings.TrimPrefix(line, "pkg:"))}
			pkgs = append(pkgs, cur)
		case strings.HasPrefix(line, "Benchmark") && cur != nil:
			if r, ok := parseRow(line); ok {
				for _, u := range r.units {
					if !contains(cur.units, u) {
						cur.units = append(cur.units, u)
					}
				}
				cur.rows = append(cur.rows, r)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintf(out, "Measured on: %s\n", strings.Join(machine, ", "))
	for _, p := range pkgs {
		if len(p.rows) == 0 {
			continue
		}
		fmt.Fprintf(out, "\n### %s\n\n| benchmark | %s |\n|---|%s\n", p.name,
			strings.Join(p.units, " | "), strings.Repeat("---|", len(p.units)))
		for _, r := range p.rows {
			cells := make([]string, len(p.units))
			for i, u := range p.units {
				cells[i] = r.metrics[u]
			}
			fmt.Fprintf(out, "| %s | %s |\n", r.name, strings.Join(cells, " | "))
		}
	}
	return nil
}

// parseRow reads "BenchmarkX-2  N  v1 unit1  v2 unit2 …".
func parseRow(line string) (row, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return row{}, false
	}
	r := row{name: strings.TrimPrefix(f[0], "Benchmark"), metrics: map[string]string{}}
	for i := 2; i+1 < len(f); i += 2 {
		r.units = append(r.units, f[i+1])
		r.metrics[f[i+1]] = f[i]
	}
	return r, true
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
