package scenario

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
	"github.com/coopgrid/coopgrid/policy"
)

// one is a minimal valid scenario; tests replace parts of it.
const one = `orgs:
  - name: U1
    machines:
      - {count: 2, gflops: 10, watts: 100}
`

func mustParse(t *testing.T, src string) *Scenario {
	t.Helper()
	s, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse:\n%s\nerror: %v", src, err)
	}
	return s
}

// TestExactDecimals: decimal GFLOPS, watts and GFlop become integers in
// thousandths exactly, whatever their float64 rounding.
func TestExactDecimals(t *testing.T) {
	cases := []struct {
		gflops, watts, size string
		mflops, milliW      int64
		sizeMFlop           int64
	}{
		{"133.47", "113.5", "36606", 133470, 113500, 36606000},
		{"0.001", "0.001", "0.001", 1, 1, 1},
		{"84.53", "99", "109818.5", 84530, 99000, 109818500},
		{"1e3", "2.5E1", "1.5e2", 1000000, 25000, 150000},
		{"0x10", "0o17", "7", 16000, 15000, 7000}, // YAML integer spellings
		{"+95.49", "220.000", "0.3", 95490, 220000, 300},
		{"1000000000", "1000000", "1000000000000", 1e12, 1e9, 1e15}, // the maxima
	}
	for _, c := range cases {
		src := "orgs:\n  - name: U1\n    machines:\n      - {gflops: " + c.gflops + ", watts: " + c.watts + "}\n" +
			"tasks:\n  - {id: t, org: U1, gflop: " + c.size + "}\n"
		in := instance(t, mustParse(t, src), Options{}, 1)
		m := in.Machines[0]
		if m.MFLOPS != c.mflops || m.BusyMilliW != c.milliW || in.Tasks[0].SizeMFlop != c.sizeMFlop {
			t.Errorf("gflops %s watts %s size %s: got %d MFLOPS, %d mW, %d MFlop; want %d, %d, %d",
				c.gflops, c.watts, c.size, m.MFLOPS, m.BusyMilliW, in.Tasks[0].SizeMFlop, c.mflops, c.milliW, c.sizeMFlop)
		}
	}
}

// TestLimits resolves every limit syntax, and the --limit / --limit-all
// precedence.
func TestLimits(t *testing.T) {
	// U1: 2 x 100.5 W = 201 W; U2: 1 x 50 W; system 251 W.
	src := `orgs:
  - name: U1
    limit: %s
    machines: [{count: 2, gflops: 10, watts: 100.5}]
  - name: U2
    machines: [{gflops: 5, watts: 50}]
`
	file := []struct {
		limit string
		want  int64
	}{
		{"system", 251000},
		{"SYSTEM", 251000},
		{"80%", 160800},
		{"80 %", 160800},
		{"100%", 201000},
		{"182.09%", 366001}, // 201000 mW x 1.8209 = 366000.9 mW
		{"0.0002%", 0},      // 0.402 mW rounds to 0
		{"0.00025%", 1},     // 0.5025 mW rounds to 1
		{"4000W", 4000000},
		{"4000 W", 4000000},
		{"4000.0004W", 4000000}, // rounded to the nearest mW
		{"4000.0005W", 4000001},
		{"4kW", 4000000},
		{"0W", 0},
		{"0%", 0},
	}
	for _, c := range file {
		s := mustParse(t, strings.Replace(src, "%s", `"`+c.limit+`"`, 1))
		in := instance(t, s, Options{}, 1)
		if in.Orgs[0].LimitMilliW != c.want {
			t.Errorf("limit %q: %d mW, want %d", c.limit, in.Orgs[0].LimitMilliW, c.want)
		}
		if in.Orgs[1].LimitMilliW != 251000 {
			t.Errorf("limit %q: U2 (default system) got %d mW", c.limit, in.Orgs[1].LimitMilliW)
		}
	}

	s := mustParse(t, strings.Replace(src, "%s", `"50%"`, 1))
	opts := []struct {
		name   string
		opts   Options
		u1, u2 int64
	}{
		{"as written", Options{}, 100500, 251000},
		{"--limit reaches the late one only", Options{Late: "U2", LateLimit: "80%"}, 100500, 40000},
		{"--limit-all reaches everyone", Options{AllLimit: "100%"}, 201000, 50000},
		{"--limit-all reaches the late one too", Options{Late: "U1", AllLimit: "1W"}, 1000, 1000},
		{"--limit beats --limit-all for the late one", Options{Late: "U1", LateLimit: "system", AllLimit: "80%"}, 251000, 40000},
		{"late alone keeps the limits", Options{Late: "U1"}, 100500, 251000},
	}
	for _, c := range opts {
		in := instance(t, s, c.opts, 1)
		if in.Orgs[0].LimitMilliW != c.u1 || in.Orgs[1].LimitMilliW != c.u2 {
			t.Errorf("%s: U1 %d mW, U2 %d mW; want %d, %d", c.name, in.Orgs[0].LimitMilliW, in.Orgs[1].LimitMilliW, c.u1, c.u2)
		}
	}
}

// TestOptionErrors: bad options are rejected with the file named, and
// nothing is returned.
func TestOptionErrors(t *testing.T) {
	s := mustParse(t, one)
	neg, nan := -1.0, math.NaN()
	ten := 10.0
	cases := []struct {
		opts Options
		want string
	}{
		{Options{Late: "U9"}, `t.yaml: late organisation "U9": no such organisation (have U1)`},
		{Options{LateLimit: "80%"}, "t.yaml: a limit for the late organisation needs a late organisation"},
		{Options{Late: "none", LateLimit: "80%"}, "needs a late organisation"},
		{Options{Late: "U1", LateLimit: "-5%"}, `t.yaml: limit for the late organisation: "-5%": a limit must be >= 0`},
		{Options{Late: "U1", LateLimit: "80"}, `"80": want a percentage`},
		{Options{AllLimit: "lots"}, `t.yaml: limit for all organisations: "lots": want a percentage`},
		{Options{AllLimit: "1e999%"}, "resolved limit too large"},
		{Options{Late: "U1", LateDelaySeconds: &neg}, "t.yaml: late delay -1 s"},
		{Options{Late: "U1", LateDelaySeconds: &nan}, "t.yaml: late delay NaN s"},
		{Options{LateDelaySeconds: &ten}, "a late delay needs a late organisation"},
	}
	for _, c := range cases {
		in, err := s.Instance(c.opts, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) || in != nil {
			t.Errorf("%+v: got %v, want error containing %q", c.opts, err, c.want)
		}
	}
	if _, err := (&Scenario{File: "x.yaml"}).Instance(Options{}, 1); err == nil || !strings.HasPrefix(err.Error(), "x.yaml: ") {
		t.Errorf("empty scenario: %v", err)
	}
}

// TestLateAndExplicitTasks: the late organisation's delay replaces its own,
// explicit submit times are relative to their organisation's start, and the
// order is by submit time, then generated before explicit, in file order.
func TestLateAndExplicitTasks(t *testing.T) {
	src := `late: {delay: 10m}
types:
  - {name: A, gflop: [1, 1]}
orgs:
  - name: U1
    delay: 30
    machines: [{gflops: 1, watts: 1}]
    mix: {A: 2}
  - name: U2
    machines: [{gflops: 1, watts: 1}]
    mix: {A: 1}
tasks:
  - {id: x, org: U2, gflop: 2, submit: 30s}
  - {id: y, org: U1, gflop: 3}
  - {id: z, org: U2, gflop: 4, submit: 1.5}
`
	s := mustParse(t, src)
	type row struct {
		id string
		at float64
	}
	got := func(opts Options) []row {
		var out []row
		for _, tk := range instance(t, s, opts, 1).Tasks {
			out = append(out, row{tk.ID, tk.SubmitSeconds})
		}
		return out
	}
	cases := []struct {
		name string
		opts Options
		want []row
	}{
		{"as written", Options{}, []row{{"U2-1", 0}, {"z", 1.5}, {"U1-1", 30}, {"U1-2", 30}, {"x", 30}, {"y", 30}}},
		{"U1 late", Options{Late: "U1"}, []row{{"U2-1", 0}, {"z", 1.5}, {"x", 30}, {"U1-1", 600}, {"U1-2", 600}, {"y", 600}}},
		{"U2 late by 5 s", Options{Late: "U2", LateDelaySeconds: ptr(5.0)}, []row{{"U2-1", 5}, {"z", 6.5}, {"U1-1", 30}, {"U1-2", 30}, {"y", 30}, {"x", 35}}},
		{"nobody late", Options{Late: "none"}, []row{{"U2-1", 0}, {"z", 1.5}, {"U1-1", 30}, {"U1-2", 30}, {"x", 30}, {"y", 30}}},
	}
	for _, c := range cases {
		if g := got(c.opts); !reflect.DeepEqual(g, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, g, c.want)
		}
	}
	in := instance(t, s, Options{}, 1)
	for _, tk := range in.Tasks {
		wantSize := map[string]int64{"x": 2000, "y": 3000, "z": 4000}[tk.ID]
		if wantSize == 0 {
			wantSize = 1000
		}
		if tk.SizeMFlop != wantSize {
			t.Errorf("%s size %d, want %d", tk.ID, tk.SizeMFlop, wantSize)
		}
	}

	// The scenario's own late.org applies by default; "none" switches it off.
	s = mustParse(t, src+"\n")
	s.LateOrg = "U2"
	if at := instance(t, s, Options{}, 1).Tasks; at[len(at)-1].SubmitSeconds != 600+30 {
		t.Errorf("late.org default not applied: last task at %v", at[len(at)-1].SubmitSeconds)
	}
}

func ptr[T any](v T) *T { return &v }

// TestMinutesTypes converts run times on the reference machine exactly.
func TestMinutesTypes(t *testing.T) {
	// Machines of 10, 20 and 20 GFLOPS: mean 50/3 GFLOPS, best 20.
	src := `types:
  - {name: M, minutes: [1, 1]}
  - {name: E, minutes: [1, 1], on: mean}
  - {name: B, minutes: [0.5, 0.5], on: best}
  - {name: G, minutes: [2, 2], on: 7.5}
  - {name: R, minutes: [10, 20], on: best}
orgs:
  - name: U1
    machines: [{gflops: 10, watts: 1}, {count: 2, mflops: 20000, watts: 1}]
    mix: {M: 1, E: 1, B: 1, G: 1, R: 200}
`
	in := instance(t, mustParse(t, src), Options{}, 9)
	want := map[string]int64{
		"U1-1": 1000000, // 60 s x 16666.67 MFLOPS
		"U1-2": 1000000,
		"U1-3": 600000, // 30 s x 20000
		"U1-4": 900000, // 120 s x 7500
	}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, tk := range in.Tasks {
		if w, ok := want[tk.ID]; ok {
			if tk.SizeMFlop != w {
				t.Errorf("%s: %d MFlop, want %d", tk.ID, tk.SizeMFlop, w)
			}
			continue
		}
		if tk.SizeMFlop < 12000000 || tk.SizeMFlop > 24000000 {
			t.Errorf("%s: %d MFlop outside [12e6, 24e6]", tk.ID, tk.SizeMFlop)
		}
		lo, hi = min(lo, tk.SizeMFlop), max(hi, tk.SizeMFlop)
	}
	// 200 uniform draws cover most of the range (fixed seed: not flaky).
	if lo > 12500000 || hi < 23500000 {
		t.Errorf("200 draws span only [%d, %d] of [12e6, 24e6]", lo, hi)
	}
	if got := in.MeanMachineMFLOPS(); got != 50000.0/3 {
		t.Errorf("mean %v", got)
	}
}

// TestUniform: the mean of many draws is near the middle of the range
// (fixed seed, so this is a check of the mapping, not a flaky statistic).
func TestUniform(t *testing.T) {
	src := "types: [{name: A, gflop: [1000, 2000]}]\n" +
		"orgs: [{name: U1, machines: [{gflops: 1, watts: 1}], mix: {A: 20000}}]\n"
	in := instance(t, mustParse(t, src), Options{}, 123)
	var sum float64
	for _, tk := range in.Tasks {
		sum += float64(tk.SizeMFlop)
	}
	if mean := sum / float64(len(in.Tasks)); math.Abs(mean-1.5e6) > 0.01*1.5e6 {
		t.Errorf("mean of 20000 draws %v, want about 1.5e6", mean)
	}
}

// TestSimDefaults reads the sim block.
func TestSimDefaults(t *testing.T) {
	cases := []struct {
		sim        string
		ckpt, tick float64
	}{
		{"", 300, 30},
		{"sim: {checkpoint: off}\n", 0, 30},
		{"sim: {checkpoint: OFF, tick: off}\n", 0, 0},
		{"sim: {checkpoint: 2m30s, tick: 10}\n", 150, 10},
		{"sim: {checkpoint: 0.5, tick: 1h}\n", 0.5, 3600},
	}
	for _, c := range cases {
		s := mustParse(t, c.sim+one)
		if s.CheckpointSeconds != c.ckpt || s.TickSeconds != c.tick {
			t.Errorf("%q: checkpoint %v tick %v, want %v %v", c.sim, s.CheckpointSeconds, s.TickSeconds, c.ckpt, c.tick)
		}
	}
	s := mustParse(t, "name: other\ndescription: hello\n"+one)
	if s.Name != "other" || s.Description != "hello" {
		t.Errorf("name %q description %q", s.Name, s.Description)
	}
	if s := mustParse(t, one); s.Name != "t" {
		t.Errorf("default name %q, want t (from t.yaml)", s.Name)
	}
}

// TestParseErrors: every kind of bad input gives an error naming file,
// line, column and field.
func TestParseErrors(t *testing.T) {
	org := func(body string) string { return "orgs:\n  - name: U1\n" + body }
	mach := func(group string) string { return org("    machines:\n      - " + group + "\n") }
	typed := func(typ string) string {
		return "types:\n  - " + typ + "\n" + mach("{gflops: 10, watts: 1}")
	}
	task := func(tk string) string { return one + "tasks:\n  - " + tk + "\n" }
	cases := []struct {
		name, src, want string
	}{
		{"unknown top key", "org: []\n" + one, `t.yaml:1:1: org: unknown key (want one of: name, description, sim, late, types, orgs, tasks)`},
		{"unknown org key", org("    wats: 3\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:5: orgs[0].wats: unknown key`},
		{"unknown machine key", mach("{gflops: 1, watts: 1, cores: 4}"), `t.yaml:4:31: orgs[0].machines[0].cores: unknown key`},
		{"negative watts", mach("{gflops: 1, watts: -3}"), `t.yaml:4:28: orgs[0].machines[0].watts: must be > 0, got -3`},
		{"zero watts", mach("{gflops: 1, watts: 0}"), `t.yaml:4:28: orgs[0].machines[0].watts: must be > 0, got 0`},
		{"NaN gflops", mach("{gflops: .nan, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].gflops: must be a finite number, got .nan`},
		{"Inf gflops", mach("{gflops: -.inf, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].gflops: must be a finite number, got -.inf`},
		{"string gflops", mach("{gflops: fast, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].gflops: must be a number, got the string "fast"`},
		{"quoted number", mach(`{gflops: "12", watts: 1}`), `t.yaml:4:18: orgs[0].machines[0].gflops: must be a number, got the string "12"`},
		{"null gflops", mach("{gflops: , watts: 1}"), `orgs[0].machines[0].gflops: must be a number, got nothing (null)`},
		{"too precise", mach("{gflops: 133.4705, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].gflops: at most 3 decimal places (1/1000 of the unit), got 133.4705`},
		{"too large", mach("{gflops: 1e10, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].gflops: must be <= 1000000000, got 1e10`},
		{"huge exponent", mach("{gflops: 1e99999, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].gflops: must be a number, got the string "1e99999"`},
		{"huge integer", mach("{mflops: 99999999999999999999, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].mflops: must be between 1 and 1000000000000, got 99999999999999999999`},
		{"gflops and mflops", mach("{gflops: 1, mflops: 1000, watts: 1}"), `t.yaml:4:21: orgs[0].machines[0].mflops: give gflops or mflops, not both`},
		{"no power", mach("{watts: 1}"), `t.yaml:4:9: orgs[0].machines[0]: missing required key "gflops" (or "mflops")`},
		{"no watts", mach("{gflops: 1}"), `t.yaml:4:9: orgs[0].machines[0]: missing required key "watts"`},
		{"fractional mflops", mach("{mflops: 1.5, watts: 1}"), `t.yaml:4:18: orgs[0].machines[0].mflops: must be a whole number, got 1.5`},
		{"negative count", mach("{count: -1, gflops: 1, watts: 1}"), `t.yaml:4:17: orgs[0].machines[0].count: must be >= 0, got -1`},
		{"fractional count", mach("{count: 1.5, gflops: 1, watts: 1}"), `t.yaml:4:17: orgs[0].machines[0].count: must be a whole number, got 1.5`},
		{"idle above busy", mach("{gflops: 1, watts: 10, idle_watts: 11}"), `t.yaml:4:44: orgs[0].machines[0].idle_watts: must be <= watts (10), got 11`},
		{"negative idle", mach("{gflops: 1, watts: 10, idle_watts: -1}"), `orgs[0].machines[0].idle_watts: must be >= 0, got -1`},
		{"no machines (empty)", org("    machines: []\n"), `t.yaml:3:15: orgs[0].machines: organisation "U1" has no machines`},
		{"no machines (count 0)", mach("{count: 0, gflops: 1, watts: 1}"), `t.yaml:4:7: orgs[0].machines: organisation "U1" has no machines`},
		{"machines missing", org("    limit: 80%\n"), `t.yaml:2:5: orgs[0]: missing required key "machines"`},
		{"machines not a list", org("    machines: {gflops: 1, watts: 1}\n"), `t.yaml:3:15: orgs[0].machines: must be a list, got a mapping`},
		{"negative percent", org("    limit: -5%\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:12: orgs[0].limit: "-5%": a limit must be >= 0`},
		{"negative watts limit", org("    limit: -10W\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:12: orgs[0].limit: "-10W": a limit must be >= 0`},
		{"unparseable limit", org("    limit: lots\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:12: orgs[0].limit: "lots": want a percentage`},
		{"bare number limit", org("    limit: 80\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:12: orgs[0].limit: a bare number is ambiguous`},
		{"limit too large", org("    limit: 1e300%\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:12: orgs[0].limit: resolved limit too large`},
		{"negative delay", org("    delay: -5s\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:12: orgs[0].delay: must be >= 0, got -5s`},
		{"bad delay", org("    delay: soon\n    machines: [{gflops: 1, watts: 1}]\n"), `t.yaml:3:12: orgs[0].delay: must be a number of seconds or a duration like "10m", got "soon"`},
		{"duplicate org", one + "  - name: U1\n    machines: [{gflops: 1, watts: 1}]\n", `t.yaml:5:11: orgs[1].name: duplicate organisation "U1" (first at line 2)`},
		{"reserved org name", "orgs:\n  - name: None\n    machines: [{gflops: 1, watts: 1}]\n", `t.yaml:2:11: orgs[0].name: "None" is reserved`},
		{"bad org name", "orgs:\n  - name: U 1\n    machines: [{gflops: 1, watts: 1}]\n", `t.yaml:2:11: orgs[0].name: must be 1-64 letters`},
		{"org without name", "orgs:\n  - machines: [{gflops: 1, watts: 1}]\n", `t.yaml:2:5: orgs[0]: missing required key "name"`},
		{"no orgs", "name: x\n", `t.yaml:1:1: missing required key "orgs"`},
		{"empty orgs", "orgs: []\n", `t.yaml:1:7: orgs: at least one organisation is needed`},
		{"orgs not a list", "orgs: {U1: 1}\n", `t.yaml:1:7: orgs: must be a list, got a mapping`},
		{"not a mapping", "- 1\n- 2\n", `t.yaml:1:1: must be a mapping (key: value lines), got a list`},
		{"task unknown org", task("{id: t1, org: U2, gflop: 1}"), `t.yaml:6:19: tasks[0].org: unknown organisation "U2" (have U1)`},
		{"duplicate task id", task("{id: t1, org: U1, gflop: 1}\n  - {id: t1, org: U1, gflop: 2}"), `t.yaml:7:10: tasks[1].id: duplicate task id "t1" (first at line 6)`},
		{"task id of a generated task", "types: [{name: A, gflop: [1, 2]}]\n" + org("    machines: [{gflops: 1, watts: 1}]\n    mix: {A: 3}\n") + "tasks:\n  - {id: U1-3, org: U1, gflop: 1}\n",
			`t.yaml:7:10: tasks[0].id: task id "U1-3" is also the id of a generated task`},
		{"negative task size", task("{id: t1, org: U1, gflop: -1}"), `t.yaml:6:30: tasks[0].gflop: must be > 0, got -1`},
		{"zero task size", task("{id: t1, org: U1, gflop: 0}"), `t.yaml:6:30: tasks[0].gflop: must be > 0, got 0`},
		{"NaN task size", task("{id: t1, org: U1, gflop: .NaN}"), `t.yaml:6:30: tasks[0].gflop: must be a finite number, got .NaN`},
		{"task size missing", task("{id: t1, org: U1}"), `t.yaml:6:5: tasks[0]: missing required key "gflop"`},
		{"negative submit", task("{id: t1, org: U1, gflop: 1, submit: -1}"), `t.yaml:6:41: tasks[0].submit: must be >= 0, got -1`},
		{"submit too late", task("{id: t1, org: U1, gflop: 1, submit: 1e10}"), `t.yaml:6:41: tasks[0].submit: must be <= 1e+09 seconds, got 1e10`},
		{"unknown task key", task("{id: t1, org: U1, gflop: 1, owner: U1}"), `t.yaml:6:33: tasks[0].owner: unknown key (want one of: id, org, gflop, submit, cpus, memory, gpus, requirements, executable)`},
		{"mix unknown type", "types: [{name: A, gflop: [1, 2]}]\n" + org("    machines: [{gflops: 1, watts: 1}]\n    mix: {D: 3}\n"), `t.yaml:5:11: orgs[0].mix.D: unknown task type "D" (have A)`},
		{"mix without types", org("    machines: [{gflops: 1, watts: 1}]\n    mix: {A: 3}\n"), `t.yaml:4:11: orgs[0].mix.A: unknown task type "A" (the scenario declares no types)`},
		{"mix negative count", "types: [{name: A, gflop: [1, 2]}]\n" + org("    machines: [{gflops: 1, watts: 1}]\n    mix: {A: -3}\n"), `t.yaml:5:14: orgs[0].mix.A: must be >= 0, got -3`},
		{"mix too many", "types: [{name: A, gflop: [1, 2]}]\n" + org("    machines: [{gflops: 1, watts: 1}]\n    mix: {A: 2000000}\n"), `t.yaml:5:14: orgs[0].mix.A: must be between 0 and 1000000, got 2000000`},
		{"type min above max", typed("{name: A, gflop: [20, 10]}"), `t.yaml:2:22: types[0].gflop: min is larger than max`},
		{"type negative size", typed("{name: A, gflop: [-1, 10]}"), `t.yaml:2:23: types[0].gflop[0]: must be > 0, got -1`},
		{"type NaN minutes", typed("{name: A, minutes: [.nan, 10]}"), `t.yaml:2:25: types[0].minutes[0]: must be a finite number, got .nan`},
		{"type not a range", typed("{name: A, gflop: 10}"), `t.yaml:2:22: types[0].gflop: must be a range [min, max], got the number 10`},
		{"type gflop and minutes", typed("{name: A, gflop: [1, 2], minutes: [1, 2]}"), `t.yaml:2:30: types[0].minutes: give gflop or minutes, not both`},
		{"type without size", typed("{name: A}"), `t.yaml:2:5: types[0]: missing required key "gflop" (or "minutes")`},
		{"on with gflop", typed("{name: A, gflop: [1, 2], on: best}"), `t.yaml:2:30: types[0].on: only meaningful with minutes`},
		{"bad on", typed("{name: A, minutes: [1, 2], on: fastest}"), `t.yaml:2:36: types[0].on: must be "mean", "best" or a number of GFLOPS, got "fastest"`},
		{"negative on", typed("{name: A, minutes: [1, 2], on: -5}"), `t.yaml:2:36: types[0].on: must be > 0, got -5`},
		{"minutes too small", typed("{name: A, minutes: [0.0000001, 1], on: best}"), `t.yaml:2:25: types[0].minutes[0]: task size rounds to 0 MFlop`},
		{"duplicate type", "types:\n  - {name: A, gflop: [1, 2]}\n  - {name: A, gflop: [1, 2]}\n" + one, `t.yaml:3:12: types[1].name: duplicate task type "A" (first at line 2)`},
		{"duplicate key", "orgs:\n  - name: U1\n    name: U2\n    machines: [{gflops: 1, watts: 1}]\n", `t.yaml:3:5: orgs[0].name: duplicate key (first at line 2)`},
		{"alias", "orgs:\n  - name: U1\n    machines: &m [{gflops: 1, watts: 1}]\n  - name: U2\n    machines: *m\n", `t.yaml:5:15: aliases (*m) are not supported`},
		{"merge key", "x: &x {gflops: 1, watts: 1}\norgs:\n  - name: U1\n    machines: [{<<: *x}]\n", `t.yaml:4:17: merge keys (<<) are not supported`},
		{"zero checkpoint", "sim: {checkpoint: 0}\n" + one, `t.yaml:1:19: sim.checkpoint: must be > 0, got 0 (write "off" to disable)`},
		{"bad tick", "sim: {tick: soon}\n" + one, `t.yaml:1:13: sim.tick: must be a number of seconds or a duration like "10m" or "off", got "soon"`},
		{"unknown sim key", "sim: {ticks: 30s}\n" + one, `t.yaml:1:7: sim.ticks: unknown key (want one of: checkpoint, tick, engine)`},
		{"late unknown org", "late: {org: U7}\n" + one, `t.yaml:1:13: late.org: unknown organisation "U7" (have U1)`},
		{"late negative delay", "late: {delay: -1m}\n" + one, `t.yaml:1:15: late.delay: must be >= 0, got -1m`},
		{"description not text", "description: {a: 1}\n" + one, `t.yaml:1:14: description: must be a string, got a mapping`},
		{"syntax error", "orgs:\n  - name: U1\n   machines: [\n", `t.yaml:1: YAML syntax: did not find expected '-' indicator`},
		{"tab indentation", "orgs:\n\t- name: U1\n", `t.yaml:2: YAML syntax: found character that cannot start any token`},
		{"two documents", one + "---\nname: b\n", `t.yaml:5:1: only one YAML document is allowed`},
		{"too many machines", mach("{count: 1000000, gflops: 1, watts: 1}\n      - {gflops: 1, watts: 1}"), `t.yaml:2:3: orgs: 1000001 machines in all, more than 1000000`},
		{"too many tasks", "types: [{name: A, gflop: [1, 2]}]\n" + org("    machines: [{gflops: 1, watts: 1}]\n    mix: {A: 1000000}\n") + "tasks:\n  - {id: t, org: U1, gflop: 1}\n", `t.yaml:7:3: tasks: 1000001 tasks in all (generated and explicit), more than 1000000`},
		{"empty file", "", `t.yaml: empty file`},
		{"comment only", "# nothing\n", `t.yaml: empty file`},
		{"machine cpus zero", mach("{gflops: 1, watts: 1, cpus: 0}"), `t.yaml:4:37: orgs[0].machines[0].cpus: must be between 1 and 65536, got 0`},
		{"machine bad memory", mach("{gflops: 1, watts: 1, memory: 12 parsecs}"), `t.yaml:4:39: orgs[0].machines[0].memory: want a size such as 16GiB or 512MiB (or a number of bytes), got "12 parsecs"`},
		{"machine gpus negative", mach("{gflops: 1, watts: 1, gpus: -1}"), `t.yaml:4:37: orgs[0].machines[0].gpus: must be >= 0, got -1`},
		{"bad label", mach("{gflops: 1, watts: 1, labels: [\"a b\"]}"), `t.yaml:4:40: orgs[0].machines[0].labels[0]: "a b": want name or name=value`},
		{"duplicate label", mach("{gflops: 1, watts: 1, labels: [cuda=12, cuda]}"), `t.yaml:4:49: orgs[0].machines[0].labels[1]: label "cuda" declared twice`},
		{"type memory too big", typed("{name: A, gflop: [1, 2], memory: 2EiB}"), `t.yaml:2:38: types[0].memory: must be between 1 byte and 1 EiB, got "2EiB"`},
		{"task cpus not a number", one + "tasks:\n  - {id: t1, org: U1, gflop: 1, cpus: many}\n", `t.yaml:6:39: tasks[0].cpus: must be a number, got the string "many"`},
		{"bad operator", typed("{name: A, gflop: [1, 2], requirements: [{attribute: os, operator: like, value: linux}]}"), `t.yaml:2:71: types[0].requirements[0].operator: operator "like": want one of`},
		{"bad attribute", typed("{name: A, gflop: [1, 2], requirements: [{attribute: colour, operator: is_set}]}"), `t.yaml:2:57: types[0].requirements[0].attribute: attribute "colour": want os, arch or label.NAME`},
		{"bad version", typed("{name: A, gflop: [1, 2], requirements: [{attribute: label.cuda, operator: version, value: soon}]}"), `t.yaml:2:95: types[0].requirements[0].value: operator version: value "soon"`},
		{"requirement without operator", typed("{name: A, gflop: [1, 2], requirements: [{attribute: os}]}"), `t.yaml:2:45: types[0].requirements[0]: missing required key "operator"`},
		{"request larger than every machine", "types:\n  - {name: A, gflop: [1, 2], cpus: 8}\n" + org("    machines: [{gflops: 1, watts: 1, cpus: 4}]\n    mix: {A: 1}\n"), `t.yaml:2:5: types[0]: no machine of the scenario can ever run it (first machine group: cpus larger than orgs[0].machines[0]'s)`},
		{"requirement nobody meets", one + "tasks:\n  - {id: t1, org: U1, gflop: 1, requirements: [{attribute: label.matlab, operator: is_set}]}\n", `t.yaml:6:5: tasks[0]: no machine of the scenario can ever run it (first machine group: requirement label.matlab is_set unmet)`},
		{"ispd with multi-core", "sim: {engine: ispd}\n" + mach("{gflops: 1, watts: 1, cpus: 4}"), `t.yaml:1:15: sim.engine: the iSPD engine places one task per machine`},
		{"ispd with requests", "sim: {engine: ispd}\ntypes: [{name: A, gflop: [1, 2], memory: 1GiB, gpus: 1}]\n" + org("    machines: [{gflops: 1, watts: 1, gpus: 1}]\n    mix: {A: 1}\n"), `t.yaml:1:15: sim.engine: the iSPD engine`},
		{"owner policy unknown key", mach("{gflops: 1, watts: 1, policy: {allowed: [sh]}}"), `orgs[0].machines[0].policy.allowed: unknown key (want one of: allow, allow_any, orgs)`},
		{"owner policy unknown org", mach("{gflops: 1, watts: 1, policy: {allow_any: true, orgs: [U9]}}"), `t.yaml:4:64: orgs[0].machines[0].policy.orgs: unknown organisation "U9"`},
		{"owner policy allow_any not a bool", mach("{gflops: 1, watts: 1, policy: {allow_any: maybe}}"), `orgs[0].machines[0].policy.allow_any: must be true or false, got the string "maybe"`},
		{"owner policy relative executable", mach("{gflops: 1, watts: 1, policy: {allow: [bin/sh]}}"), `orgs[0].machines[0].policy.allow[0]: "bin/sh": want an absolute path or a bare name`},
		{"executable nobody allows", "types: [{name: A, gflop: [1, 2], executable: /bin/sh}]\n" + org("    machines: [{gflops: 1, watts: 1, policy: {allow: [python3]}}]\n    mix: {A: 1}\n"), `types[0]: no machine of the scenario can ever run it (first machine group: owner of orgs[0].machines[0] refuses executable /bin/sh)`},
		{"ispd with an owner policy", "sim: {engine: ispd}\n" + mach("{gflops: 1, watts: 1, policy: {allow: [sh]}}"), `sim.engine: the iSPD engine places one task per machine: it cannot run machines with cpus, memory, gpus or an owner policy`},
		{"deep nesting", "name: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n" + one, `t.yaml:1:`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("t.yaml", []byte(c.src))
			if err == nil {
				t.Fatalf("no error for:\n%s", c.src)
			}
			if s != nil {
				t.Errorf("got a scenario with the error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error\n  %v\nwant it to contain\n  %s\ninput:\n%s", err, c.want, c.src)
			}
			var e *yamlfile.Error
			if !errors.As(err, &e) || e.File != "t.yaml" {
				t.Errorf("error %v is not an *yamlfile.Error naming t.yaml", err)
			}
		})
	}
}

// TestSeveralErrors: the problems of a file are reported together, each
// with its own position, up to a limit.
func TestSeveralErrors(t *testing.T) {
	src := "orgs:\n  - name: U1\n    machines: [{gflops: -1, watts: 1}]\n  - name: U2\n    machines: [{gflops: 1, watts: .inf}]\n"
	_, err := Parse("t.yaml", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"t.yaml:3:25: orgs[0].machines[0].gflops: must be > 0, got -1",
		"t.yaml:5:35: orgs[1].machines[0].watts: must be a finite number, got .inf",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\nlacks %q", err, want)
		}
	}
	var b strings.Builder
	b.WriteString("orgs:\n")
	for i := range 30 {
		b.WriteString("  - {name: U" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ", machines: [{gflops: 0, watts: 1}]}\n")
	}
	_, err = Parse("t.yaml", []byte(b.String()))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != yamlfile.MaxErrors+1 || lines[yamlfile.MaxErrors] != "t.yaml: 10 more errors not shown" {
		t.Errorf("%d lines, last %q; want %d and the count of the rest", len(lines), lines[len(lines)-1], yamlfile.MaxErrors+1)
	}
}

// TestLoad reads from disk, refuses big files, and names the file.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	data := []byte(one + "# " + strings.Repeat("x", MaxFileBytes) + "\n")
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.HasPrefix(err.Error(), big+": file is larger than") {
		t.Errorf("big file: %v", err)
	}
	if _, err := Parse("big.yaml", data); err == nil || !strings.HasPrefix(err.Error(), "big.yaml: file is larger than") {
		t.Errorf("big data: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("orgs: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":1:7: orgs:") {
		t.Errorf("bad file: %v", err)
	}
}

// TestExplicitTaskRequest: an explicit task carries its request and
// requirements into the Instance; memory reads units as go-humanize does.
func TestExplicitTaskRequest(t *testing.T) {
	src := `orgs:
  - name: U1
    machines:
      - {gflops: 10, watts: 100, cpus: 8, memory: 16 GiB, gpus: 1, labels: [matlab, cuda=12.2]}
tasks:
  - {id: t1, org: U1, gflop: 1, cpus: 2, memory: 1.5GB, gpus: 1, requirements: [{attribute: label.cuda, operator: in, value: "12.1, 12.2"}]}
  - {id: t2, org: U1, gflop: 1, memory: 1024}
`
	s, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.Instance(Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := in.Machines[0]
	if m.Capacity != (policy.Resources{CPUs: 8, MemoryBytes: 16 << 30, GPUs: 1}) || !reflect.DeepEqual(m.Attrs, map[string]string{"label.matlab": "", "label.cuda": "12.2"}) {
		t.Errorf("machine %+v", m)
	}
	want := []TaskSpec{
		{ID: "t1", SizeMFlop: 1000, Request: policy.Resources{CPUs: 2, MemoryBytes: 1_500_000_000, GPUs: 1},
			Requirements: []policy.Requirement{{Attribute: "label.cuda", Operator: "in", Value: "12.1, 12.2"}}},
		{ID: "t2", SizeMFlop: 1000, Request: policy.Resources{MemoryBytes: 1024}},
	}
	if !reflect.DeepEqual(in.Tasks, want) {
		t.Errorf("tasks %+v, want %+v", in.Tasks, want)
	}
	if in.OneSlot() {
		t.Error("a multi-core instance says it is one-slot")
	}
}
