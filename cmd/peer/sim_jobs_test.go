package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const smallSWF = "../../lab/sim/testdata/small.swf"

// The small SWF trace compared under both backfilling variants through the
// CLI: the shares worked out by hand in lab/sim's TestSimulateSmallSWFByHand.
func TestSimJobsCompareSmallSWF(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	code, out, errs := runCLI(t, "sim", "--swf", smallSWF, "--compare", "conservative,easy", "--json", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Workload struct {
			Procs   int64          `json:"procs"`
			Jobs    int            `json:"jobs"`
			Skipped map[string]int `json:"skipped"`
		} `json:"workload"`
		Policies map[string]struct {
			Jobs   int `json:"jobs"`
			Killed int `json:"killed"`
		} `json:"policies"`
		Relative struct {
			A       string  `json:"a"`
			ABetter float64 `json:"a_better"`
			Tie     float64 `json:"tie"`
			BBetter float64 `json:"b_better"`
		} `json:"relative_performance"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if rep.Workload.Procs != 8 || rep.Workload.Jobs != 11 || rep.Workload.Skipped["cancelled"] != 1 {
		t.Errorf("workload %+v", rep.Workload)
	}
	if rep.Policies["easy"].Killed != 1 || rep.Policies["conservative"].Jobs != 11 {
		t.Errorf("policies %+v", rep.Policies)
	}
	r := rep.Relative
	if r.A != "conservative" || r.ABetter != 5.0/11 || r.Tie != 4.0/11 || r.BBetter != 2.0/11 {
		t.Errorf("relative performance %+v, want conservative 5/11, tie 4/11, easy 2/11", r)
	}
	for _, f := range []string{"jobs-conservative.csv", "jobs-easy.csv", "summary.json", "relperf-conservative-easy.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("--out %s: %v", f, err)
		}
	}
	// The table names the policies and the shares.
	code, out, errs = runCLI(t, "sim", "--swf", smallSWF, "--compare", "conservative,easy")
	if code != 0 || !strings.Contains(out, "conservative faster for 45.5 %, equal for 36.4 %, easy faster for 18.2 %") {
		t.Errorf("table: exit %d\n%s%s", code, out, errs)
	}
	// One policy: the default is EASY.
	code, out, _ = runCLI(t, "sim", "--swf", smallSWF, "--json")
	if code != 0 || !strings.Contains(out, `"policy_order": [
    "easy"
  ]`) {
		t.Errorf("default policy: exit %d\n%s", code, out)
	}
}

func TestSimJobsUsageErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.swf")
	if err := os.WriteFile(bad, []byte("; MaxProcs: 4\n1 0 -1 5 2 -1 -1 2 ten -1 1 1 1 -1 1 -1 -1 -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--swf", bad}, `bad.swf:2: field 9 (requested time): "ten"`},
		{[]string{"--swf", "/nonexistent.swf"}, "--swf"},
		{[]string{"--swf", smallSWF, "--policy", "ehosep"}, `job policy "ehosep"`},
		{[]string{"--swf", smallSWF, "--compare", "easy"}, "want two different job policies"},
		{[]string{"--swf", smallSWF, "--synthetic", "10"}, "give one workload"},
		{[]string{"--swf", smallSWF, "--scenario", tinyScenario}, "give one workload"},
		{[]string{"--compare", "easy,conservative", "--scenario", tinyScenario}, "--compare needs a job workload"},
		{[]string{"--synthetic", "10", "--load", "5"}, "load 5"},
		{[]string{"--synthetic", "10", "--estimate-factor", "0.5"}, "estimate factor 0.5"},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, append([]string{"sim"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q (stdout %q), want 2 and %q", c.args, code, errs, out, c.want)
		}
	}
}

func TestSimJobsSynthetic(t *testing.T) {
	code, out, errs := runCLI(t, "sim", "--synthetic", "300", "--procs", "64", "--compare", "easy,fcfs", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Workload struct {
			Source string `json:"source"`
			Model  struct {
				Procs int64 `json:"procs"`
				Jobs  int   `json:"jobs"`
			} `json:"model"`
		} `json:"workload"`
		Policies map[string]struct {
			MeanWait float64 `json:"mean_wait_s"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Workload.Source != "lublin-feitelson-2003" || rep.Workload.Model.Procs != 64 || rep.Workload.Model.Jobs != 300 {
		t.Errorf("workload %+v", rep.Workload)
	}
	// On this workload (seed 1, load 0.7) EASY's backfilling cuts the mean
	// wait FCFS leaves behind blocked wide jobs.
	if !(rep.Policies["easy"].MeanWait < rep.Policies["fcfs"].MeanWait) {
		t.Errorf("mean wait EASY %v, FCFS %v", rep.Policies["easy"].MeanWait, rep.Policies["fcfs"].MeanWait)
	}
}

// SA through the CLI: sa_s and sa_i make the workload moldable and run
// conservative backfilling with SA at submission or embedded.
func TestSimJobsSA(t *testing.T) {
	code, out, errs := runCLI(t, "sim", "--synthetic", "400", "--procs", "64", "--compare", "sa_i,sa_s", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Workload struct {
			Moldable bool `json:"moldable"`
		} `json:"workload"`
		Policies map[string]struct {
			Jobs int `json:"jobs"`
		} `json:"policies"`
		Relative struct {
			A, B    string
			ABetter float64 `json:"a_better"`
			Tie     float64 `json:"tie"`
			BBetter float64 `json:"b_better"`
		} `json:"relative_performance"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Workload.Moldable || rep.Policies["sa_i"].Jobs != 400 || rep.Policies["sa_s"].Jobs != 400 {
		t.Errorf("report %+v", rep)
	}
	if r := rep.Relative; r.ABetter+r.Tie+r.BBetter < 0.999 || r.Tie == 1 {
		t.Errorf("relative performance %+v: the two SA modes never differ", r)
	}
	code, _, errs = runCLI(t, "sim", "--synthetic", "10", "--policy", "conservative-sai")
	if code != 2 || !strings.Contains(errs, "use sa_i") {
		t.Errorf("conservative-sai on the command line: exit %d, %q", code, errs)
	}
}

// Seed 002's chapter 5 through the CLI: the three whole-workload runs and
// the targets in each, as JSON; bad combinations are usage errors.
func TestSimSATargets(t *testing.T) {
	code, out, errs := runCLI(t, "sim", "--synthetic", "400", "--procs", "64", "--load", "0.8", "--sa-targets", "20", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	type share struct {
		ABetter float64 `json:"a_better"`
		Tie     float64 `json:"tie"`
		BBetter float64 `json:"b_better"`
	}
	var rep struct {
		Workload struct {
			MaxSerial float64 `json:"moldable_max_serial"`
		} `json:"workload"`
		Targets int `json:"targets"`
		Whole   map[string]struct {
			Jobs  int     `json:"jobs"`
			Wider float64 `json:"wider"`
		} `json:"whole_workload"`
		WholeRelative share `json:"whole_relative_sa_s_sa_i"`
		Widest        struct {
			Jobs int `json:"jobs"`
		} `json:"widest_linear"`
		WidestRelative share `json:"widest_relative_widest_static"`
		Scenarios      []struct {
			Workload string `json:"workload"`
			Target   map[string]struct {
				Targets int     `json:"targets"`
				GeoMean float64 `json:"geometric_mean_turnaround_s"`
			} `json:"target"`
			VsStatic []share `json:"vs_static"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Targets != 20 || len(rep.Scenarios) != 3 || len(rep.Whole) != 3 || rep.Workload.MaxSerial != 0.1 {
		t.Fatalf("report %+v", rep)
	}
	for m, w := range rep.Whole {
		if w.Jobs != 400 || (w.Wider == 0) != (m == "static") {
			t.Errorf("whole workload %s: %+v", m, w)
		}
	}
	sum := func(s share) float64 { return s.ABetter + s.Tie + s.BBetter }
	if s := sum(rep.WholeRelative); s < 0.999 || s > 1.001 {
		t.Errorf("table 39 shares sum to %v", s)
	}
	if s := sum(rep.WidestRelative); rep.Widest.Jobs != 400 || s < 0.999 || s > 1.001 {
		t.Errorf("tables 40-41: %d jobs, shares sum to %v", rep.Widest.Jobs, s)
	}
	for k, sc := range rep.Scenarios {
		if want := []string{"static", "sa_s", "sa_i"}[k]; sc.Workload != want {
			t.Errorf("scenario %d is %q, want %q", k, sc.Workload, want)
		}
		for m, tm := range sc.Target {
			if tm.Targets != 20 || tm.GeoMean <= 0 {
				t.Errorf("%s workload, %s target: %+v", sc.Workload, m, tm)
			}
		}
		if len(sc.VsStatic) != 2 || sum(sc.VsStatic[0]) < 0.999 || sc.VsStatic[1].Tie == 1 {
			t.Errorf("%s workload: %+v", sc.Workload, sc.VsStatic)
		}
	}
	// An SWF trace's jobs are made moldable the same way.
	code, out, errs = runCLI(t, "sim", "--swf", smallSWF, "--sa-targets", "3", "--moldable-serial", "0")
	if code != 0 || !strings.Contains(out, "11 moldable jobs on 8 processors") || !strings.Contains(out, "target in a sa_i workload (tables 35-37)") {
		t.Errorf("SWF trace: exit %d: %s%s", code, out, errs)
	}
	for _, bad := range [][]string{
		{"sim", "--synthetic", "400", "--sa-targets", "5", "--policy", "easy"},
		{"sim", "--synthetic", "400", "--sa-targets", "5", "--compare", "easy,fcfs"},
		{"sim", "--synthetic", "40", "--sa-targets", "33"},
		{"sim", "--synthetic", "40", "--sa-targets", "-1"},
		{"sim", "--synthetic", "40", "--sa-targets", "5", "--moldable-serial", "1.5"},
		{"sim", "--synthetic", "40", "--compare", "easy,conservative", "--moldable-serial", "0"},
	} {
		if code, _, errs := runCLI(t, bad...); code != 2 || !strings.Contains(errs, bad[len(bad)-2]) {
			t.Errorf("%v: exit %d, %q", bad, code, errs)
		}
	}
}
