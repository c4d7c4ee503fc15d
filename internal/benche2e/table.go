package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// result is one measurement of the results file bench/e2e/run.sh writes:
// a tab-separated line "system tasks repeat elapsed_s submit_s
// resolution_s load1", after a header line starting with "system".
type result struct {
	System  string // host, slurm-wrap, slurm-array, coopgrid-A, coopgrid-B
	Tasks   int
	Repeat  int
	Elapsed float64 // seconds, submission start → all done (as polled)
	Submit  float64
	Res     float64
	Load    string
}

// Rate is tasks per second.
func (r result) Rate() float64 { return float64(r.Tasks) / r.Elapsed }

// systems in the order of the table.
var systems = []string{"host", "slurm-wrap", "slurm-array", "coopgrid-A", "coopgrid-B"}

var systemNames = map[string]string{
	"host":        "this host alone: the same `true` processes, 64 at a time (`benche2e host`)",
	"slurm-wrap":  "Slurm, one `sbatch --wrap true` per job",
	"slurm-array": "Slurm, job array (`sbatch --array`)",
	"coopgrid-A":  "coopgrid A: 1 org × 64 machines, 1 peer",
	"coopgrid-B":  "coopgrid B: 4 orgs × 16 machines, 4 peers",
}

func parseResults(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "system") || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Split(text, "\t")
		if len(f) != 7 {
			return nil, fmt.Errorf("line %d: %d fields, want 7 (system tasks repeat elapsed_s submit_s resolution_s load1)", line, len(f))
		}
		if !slices.Contains(systems, f[0]) {
			return nil, fmt.Errorf("line %d: system %q: want one of %s", line, f[0], strings.Join(systems, ", "))
		}
		var (
			x   result
			err error
		)
		x.System, x.Load = f[0], f[6]
		if x.Tasks, err = strconv.Atoi(f[1]); err != nil || x.Tasks <= 0 {
			return nil, fmt.Errorf("line %d: tasks %q: want a positive integer", line, f[1])
		}
		if x.Repeat, err = strconv.Atoi(f[2]); err != nil || x.Repeat <= 0 {
			return nil, fmt.Errorf("line %d: repeat %q: want a positive integer", line, f[2])
		}
		for i, p := range []*float64{&x.Elapsed, &x.Submit, &x.Res} {
			if *p, err = strconv.ParseFloat(f[3+i], 64); err != nil || *p < 0 {
				return nil, fmt.Errorf("line %d: field %d %q: want a non-negative number", line, 4+i, f[3+i])
			}
		}
		if x.Elapsed <= 0 {
			return nil, fmt.Errorf("line %d: elapsed %q: want a positive number", line, f[3])
		}
		out = append(out, x)
	}
	return out, sc.Err()
}

// median of xs (not empty), the mean of the two middle values for an even
// count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratioPairs pairs each coopgrid measurement of a variant with the faster
// Slurm variant of the same size and repeat, and returns coopgrid's rate
// over Slurm's for every repeat that has both.
func ratioPairs(rows []result, variant string, tasks int) []float64 {
	type key struct{ tasks, repeat int }
	slurm := map[key]float64{}
	for _, r := range rows {
		if r.Tasks == tasks && strings.HasPrefix(r.System, "slurm-") {
			k := key{r.Tasks, r.Repeat}
			slurm[k] = max(slurm[k], r.Rate())
		}
	}
	var out []float64
	for _, r := range rows {
		if r.Tasks != tasks || r.System != variant {
			continue
		}
		if s, ok := slurm[key{r.Tasks, r.Repeat}]; ok && s > 0 {
			out = append(out, r.Rate()/s)
		}
	}
	return out
}

// hostFractions pairs each coopgrid measurement of a variant with the
// host's own run of the same size and repeat, and returns coopgrid's rate
// as a fraction of the host's for every repeat that has both.
func hostFractions(rows []result, variant string, tasks int) []float64 {
	host := map[int]float64{}
	for _, r := range rows {
		if r.Tasks == tasks && r.System == "host" {
			host[r.Repeat] = r.Rate()
		}
	}
	var out []float64
	for _, r := range rows {
		if r.Tasks == tasks && r.System == variant {
			if h, ok := host[r.Repeat]; ok && h > 0 {
				out = append(out, r.Rate()/h)
			}
		}
	}
	return out
}

// hostGoal is the fraction of the host's rate issue 22 sets each variant.
var hostGoal = map[string]float64{"coopgrid-A": 0.8, "coopgrid-B": 0.6}

// writeTable prints, per size, tasks/s of every system (median and range
// over the repeats), then coopgrid/Slurm per pair.
func writeTable(w io.Writer, rows []result) error {
	if len(rows) == 0 {
		return fmt.Errorf("no measurements")
	}
	var sizes []int
	for _, r := range rows {
		if !slices.Contains(sizes, r.Tasks) {
			sizes = append(sizes, r.Tasks)
		}
	}
	slices.Sort(sizes)
	fmt.Fprintln(w, "| tasks | system | runs | tasks/s median | tasks/s range | seconds median | load (1 min) at start |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, n := range sizes {
		for _, s := range systems {
			var rates, secs []float64
			var loads []string
			for _, r := range rows {
				if r.Tasks == n && r.System == s {
					rates = append(rates, r.Rate())
					secs = append(secs, r.Elapsed)
					loads = append(loads, r.Load)
				}
			}
			if len(rates) == 0 {
				continue
			}
			fmt.Fprintf(w, "| %d | %s | %d | %.1f | %.1f-%.1f | %.2f | %s |\n", n, systemNames[s], len(rates),
				median(rates), slices.Min(rates), slices.Max(rates), median(secs), strings.Join(loads, " "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratio coopgrid/Slurm per pair: each coopgrid run over the faster Slurm variant of the same size and repeat.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| tasks | coopgrid variant | pairs | ratio median | ratio range | goal ≥ 10 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, n := range sizes {
		for _, v := range []string{"coopgrid-A", "coopgrid-B"} {
			rs := ratioPairs(rows, v, n)
			if len(rs) == 0 {
				continue
			}
			goal := "no"
			if median(rs) >= 10 {
				goal = "yes"
			}
			fmt.Fprintf(w, "| %d | %s | %d | %.2f | %.2f-%.2f | %s |\n", n, v, len(rs), median(rs), slices.Min(rs), slices.Max(rs), goal)
		}
	}
	writeHostFractions(w, rows, sizes)
	return nil
}

// writeHostFractions prints coopgrid's rate as a fraction of the host's,
// per pair, when the results have host runs.
func writeHostFractions(w io.Writer, rows []result, sizes []int) {
	if !slices.ContainsFunc(rows, func(r result) bool { return r.System == "host" }) {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Fraction of the host's raw rate per pair: each coopgrid run's tasks/s over the host's own run of the same size in the same repeat.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| tasks | coopgrid variant | pairs | fraction median | fraction range | goal |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, n := range sizes {
		for _, v := range []string{"coopgrid-A", "coopgrid-B"} {
			fs := hostFractions(rows, v, n)
			if len(fs) == 0 {
				continue
			}
			goal := "no"
			if median(fs) >= hostGoal[v] {
				goal = "yes"
			}
			fmt.Fprintf(w, "| %d | %s | %d | %.2f | %.2f-%.2f | ≥ %.2f: %s |\n", n, v, len(fs), median(fs), slices.Min(fs), slices.Max(fs), hostGoal[v], goal)
		}
	}
}
