package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo runs `peer demo` in full, as CI's scale: four real peers on
// loopback with Raft and the simulated executor, U1 late at 80 %, the
// leader killed half way. It checks the final result as the command
// reports it (the table on stdout, demo.json in --out, or the JSON on
// stdout): every task done, a fail-over to another peer, the limits
// respected in every committed state, satisfaction and energy for every
// organisation, the three plots written, and the data directories removed
// (or kept with --keep).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a four-peer federation for about ten seconds")
	}
	cases := []struct {
		name string
		json bool
		keep bool
	}{
		{name: "table", json: false, keep: false},
		{name: "json and keep", json: true, keep: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The demo's temporary root goes under TMPDIR: a test directory,
			// so that what the demo leaves behind can be checked.
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			out := filepath.Join(t.TempDir(), "out")
			args := []string{"demo", "--scale", "0.05", "--compression", "2000", "--out", out}
			if tc.json {
				args = append(args, "--json")
			}
			if tc.keep {
				args = append(args, "--keep")
			}
			code, stdout, stderr := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("peer demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			file, err := os.ReadFile(filepath.Join(out, "demo.json"))
			if err != nil {
				t.Fatal(err)
			}
			var rep demoReportJSON
			if err := json.Unmarshal(file, &rep); err != nil {
				t.Fatalf("demo.json: %v\n%s", err, file)
			}
			checkDemoReport(t, &rep)

			progress := stdout
			if tc.json {
				// stdout is exactly the report; the progress went to stderr.
				if strings.TrimSpace(stdout) != strings.TrimSpace(string(file)) {
					t.Fatalf("--json printed\n%s\nbut demo.json holds\n%s", stdout, file)
				}
				progress = stderr
			} else {
				for _, want := range []string{
					"limits: PI ≤ Lim held in every committed state",
					"fail-over: " + rep.LeaderBefore + " led and was killed",
					"plots: " + rep.Plots.Satisfaction,
				} {
					if !strings.Contains(stdout, want) {
						t.Errorf("the table output lacks %q:\n%s", want, stdout)
					}
				}
				for _, o := range rep.Orgs {
					if !strings.Contains(stdout, o.Name) {
						t.Errorf("the table output has no line for %s", o.Name)
					}
				}
			}
			for _, want := range []string{"arrives late: limit 80%", "killing the leader, " + rep.LeaderBefore, rep.LeaderAfter + " leads after", "declared lost"} {
				if !strings.Contains(progress, want) {
					t.Errorf("the progress lacks %q:\n%s", want, progress)
				}
			}

			left, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			if tc.keep {
				if rep.DataDir == "" {
					t.Fatal("--keep: no data_dir in the report")
				}
				for _, o := range rep.Orgs {
					for _, f := range []string{"config.yaml", "raft/raft.db", "identity.key"} {
						if _, err := os.Stat(filepath.Join(rep.DataDir, o.Name, f)); err != nil {
							t.Errorf("--keep: %v", err)
						}
					}
				}
			} else if len(left) != 0 || rep.DataDir != "" {
				t.Errorf("without --keep the data directories stay: %v, data_dir %q", left, rep.DataDir)
			}
		})
	}
}

// demoReportJSON decodes demo.json with pointers, so that a missing or
// null figure is seen as such.
type demoReportJSON struct {
	TasksTotal      int      `json:"tasks_total"`
	TasksDone       int      `json:"tasks_done"`
	TasksFailed     int      `json:"tasks_failed"`
	LeaderBefore    string   `json:"leader_before"`
	LeaderAfter     string   `json:"leader_after"`
	FailoverMs      int64    `json:"failover_ms"`
	MachinesLostMs  int64    `json:"machines_lost_ms"`
	LimitsRespected bool     `json:"limits_respected"`
	LimitSamples    int      `json:"limit_samples"`
	EntriesChecked  uint64   `json:"entries_checked"`
	Problems        []string `json:"problems"`
	MakespanS       *float64 `json:"makespan_s"`
	DataDir         string   `json:"data_dir"`
	Plots           struct {
		Satisfaction, Energy, Turnaround string
	} `json:"plots"`
	Orgs []struct {
		Name         string   `json:"name"`
		Late         bool     `json:"late"`
		Killed       bool     `json:"killed"`
		Tasks        int      `json:"tasks"`
		Done         int      `json:"done"`
		LimitW       float64  `json:"limit_w"`
		PowerQuotaW  float64  `json:"power_quota_w"`
		MaxPIW       float64  `json:"max_pi_w"`
		Satisfaction *float64 `json:"satisfaction"`
		EnergyUserJ  *float64 `json:"energy_user_j"`
		EnergyOwnerJ *float64 `json:"energy_owner_j"`
		TurnaroundS  *float64 `json:"turnaround_s"`
	} `json:"orgs"`
}

func checkDemoReport(t *testing.T, rep *demoReportJSON) {
	t.Helper()
	if rep.TasksTotal == 0 || rep.TasksDone != rep.TasksTotal || rep.TasksFailed != 0 {
		t.Errorf("tasks: %d done, %d failed, of %d", rep.TasksDone, rep.TasksFailed, rep.TasksTotal)
	}
	if rep.LeaderBefore == "" || rep.LeaderAfter == "" || rep.LeaderAfter == rep.LeaderBefore {
		t.Errorf("no fail-over: leader before %q, after %q", rep.LeaderBefore, rep.LeaderAfter)
	}
	if rep.FailoverMs <= 0 || rep.MachinesLostMs <= 0 {
		t.Errorf("fail-over %d ms, machines lost after %d ms", rep.FailoverMs, rep.MachinesLostMs)
	}
	if !rep.LimitsRespected || len(rep.Problems) != 0 || rep.LimitSamples == 0 || rep.EntriesChecked == 0 {
		t.Errorf("limits respected %v after %d entries and %d samples; problems %v", rep.LimitsRespected, rep.EntriesChecked, rep.LimitSamples, rep.Problems)
	}
	if rep.MakespanS == nil || *rep.MakespanS <= 0 {
		t.Errorf("makespan %v", rep.MakespanS)
	}
	if len(rep.Orgs) != 4 {
		t.Fatalf("%d organisations, want 4", len(rep.Orgs))
	}
	killed := 0
	for _, o := range rep.Orgs {
		if o.Killed {
			killed++
			if o.Name != rep.LeaderBefore {
				t.Errorf("%s marked killed, but %s led", o.Name, rep.LeaderBefore)
			}
		}
		if o.Done != o.Tasks || o.Tasks == 0 {
			t.Errorf("%s: %d of %d tasks done", o.Name, o.Done, o.Tasks)
		}
		for what, v := range map[string]*float64{"satisfaction": o.Satisfaction, "user energy": o.EnergyUserJ, "owner energy": o.EnergyOwnerJ, "turnaround": o.TurnaroundS} {
			if v == nil || *v <= 0 || math.IsNaN(*v) {
				t.Errorf("%s: %s %v", o.Name, what, v)
			}
		}
		if o.MaxPIW > o.LimitW || o.MaxPIW <= 0 {
			t.Errorf("%s: max PI %v W against its limit %v W", o.Name, o.MaxPIW, o.LimitW)
		}
		// The late organisation's limit is 80 % of its power quota, and
		// binds: it is well below the federation's power, the others' limit.
		if o.Late && math.Abs(o.LimitW-0.8*o.PowerQuotaW) > 0.001 {
			t.Errorf("%s (late): limit %v W, want 80%% of %v W", o.Name, o.LimitW, o.PowerQuotaW)
		}
	}
	if killed != 1 {
		t.Errorf("%d organisations marked killed", killed)
	}
	for _, p := range []string{rep.Plots.Satisfaction, rep.Plots.Energy, rep.Plots.Turnaround} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("plot: %v", err)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("plot %s is not a PNG", p)
		}
	}
}

// TestDemoBadFlags: bad flags are usage errors (exit 2) before anything is
// started or written.
func TestDemoBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--orgs", "2"}, "--orgs 2"},
		{[]string{"--orgs", "17"}, "--orgs 17"},
		{[]string{"--scale", "0"}, "--scale 0"},
		{[]string{"--scale", "1.5"}, "--scale 1.5"},
		{[]string{"--scale", "NaN"}, "--scale NaN"},
		{[]string{"--compression", "0.5"}, "--compression 0.5"},
		{[]string{"--compression", "1e9"}, "--compression 1e+09"},
		{[]string{"--orgs", "four"}, "invalid argument"},
		{[]string{"extra"}, "unknown command"},
	}
	for _, c := range cases {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		out := filepath.Join(t.TempDir(), "out")
		code, _, stderr := runCLI(t, append(append([]string{"demo"}, c.args...), "--out", out)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("peer demo %v: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, stderr, c.want)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("peer demo %v left %v in TMPDIR", c.args, left)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("peer demo %v created --out", c.args)
		}
	}
}
