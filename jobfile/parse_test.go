package jobfile

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// testFS is the directory input files are read from in Parse tests.
var testFS = fstest.MapFS{
	"run.sh":          {Data: []byte("#!/bin/sh\necho run\n")},
	"data/part-0.csv": {Data: []byte("a,b\n0,0\n")},
	"data/part-1.csv": {Data: []byte("a,b\n1,1\n")},
	"big.bin":         {Data: make([]byte, 2000)},
	"mid.bin":         {Data: make([]byte, 600)},
	"dir/inner.txt":   {Data: []byte("x")},
}

func TestParseValid(t *testing.T) {
	run := []byte("#!/bin/sh\necho run\n")
	cases := []struct {
		name string
		file string // default "job.yaml"
		src  string
		opts Options
		want Job
	}{
		{
			name: "minimal list",
			src: `
tasks:
  - argv: [/bin/true]
    size: 1
    wall_clock_limit: 1m
`,
			want: Job{Name: "job", Tasks: []Task{{Name: "task-0", Argv: []string{"/bin/true"}, SizeMFlop: 1000, WallClockLimit: time.Minute}}},
		},
		{
			name: "exact sizes",
			file: "sizes.yaml",
			src: `
defaults: {argv: [x], wall_clock_limit: 1h}
tasks:
  - size: 0.001
  - size: 133.47
  - size: 0.1
  - size: 1e3
  - size: 2.5E-2
  - size: 0x10
  - size: 9007199254740.992
`,
			want: Job{Name: "sizes", Tasks: []Task{
				{Name: "task-0", Argv: []string{"x"}, SizeMFlop: 1, WallClockLimit: time.Hour},
				{Name: "task-1", Argv: []string{"x"}, SizeMFlop: 133470, WallClockLimit: time.Hour},
				{Name: "task-2", Argv: []string{"x"}, SizeMFlop: 100, WallClockLimit: time.Hour},
				{Name: "task-3", Argv: []string{"x"}, SizeMFlop: 1_000_000, WallClockLimit: time.Hour},
				{Name: "task-4", Argv: []string{"x"}, SizeMFlop: 25, WallClockLimit: time.Hour},
				{Name: "task-5", Argv: []string{"x"}, SizeMFlop: 16000, WallClockLimit: time.Hour},
				{Name: "task-6", Argv: []string{"x"}, SizeMFlop: 1 << 53, WallClockLimit: time.Hour},
			}},
		},
		{
			// MFlop = seconds × GFLOPS × 1000, rounded to the nearest MFlop,
			// halves up.
			name: "runtime conversion",
			file: "rt.yaml",
			src: `
defaults: {argv: [x], wall_clock_limit: 2d, reference_gflops: 0.001}
tasks:
  - runtime: 1s
  - runtime: 1500ms
  - runtime: 1499ms
  - runtime: 1h
    reference_gflops: 10
  - runtime: 1d12h
    reference_gflops: 1
  - runtime: 90m
    reference_gflops: 133.47
`,
			want: Job{Name: "rt", Tasks: []Task{
				{Name: "task-0", Argv: []string{"x"}, SizeMFlop: 1, WallClockLimit: 48 * time.Hour},
				{Name: "task-1", Argv: []string{"x"}, SizeMFlop: 2, WallClockLimit: 48 * time.Hour},
				{Name: "task-2", Argv: []string{"x"}, SizeMFlop: 1, WallClockLimit: 48 * time.Hour},
				{Name: "task-3", Argv: []string{"x"}, SizeMFlop: 36_000_000, WallClockLimit: 48 * time.Hour},
				{Name: "task-4", Argv: []string{"x"}, SizeMFlop: 129_600_000, WallClockLimit: 48 * time.Hour},
				{Name: "task-5", Argv: []string{"x"}, SizeMFlop: 720_738_000, WallClockLimit: 48 * time.Hour},
			}},
		},
		{
			name: "defaults inherited, merged and overridden",
			src: `
name: inherit
defaults:
  argv: [/bin/sh, run.sh]
  env: {A: "1", B: "2"}
  runtime: 10s
  reference_gflops: 2
  wall_clock_limit: 10m
  inputs: [run.sh]
  outputs: [out.txt, "logs/*.log"]
  checkpointable: true
tasks:
  - name: inherits
  - name: overrides
    argv: [/bin/echo, hi]
    env: {B: "20", C: "3"}
    size: 5
    wall_clock_limit: 1d
    inputs: []
    outputs: []
    checkpointable: false
`,
			opts: Options{InputFS: testFS},
			want: Job{Name: "inherit", Tasks: []Task{
				{Name: "inherits", Argv: []string{"/bin/sh", "run.sh"}, Env: map[string]string{"A": "1", "B": "2"}, SizeMFlop: 20_000,
					WallClockLimit: 10 * time.Minute, Inputs: []Input{{Name: "run.sh", Data: run}}, Outputs: []string{"out.txt", "logs/*.log"}, Checkpointable: true},
				{Name: "overrides", Argv: []string{"/bin/echo", "hi"}, Env: map[string]string{"A": "1", "B": "20", "C": "3"}, SizeMFlop: 5000,
					WallClockLimit: 24 * time.Hour},
			}},
		},
		{
			name: "template with count, index and count placeholders",
			src: `
template:
  count: 3
  argv: [/bin/sh, -c, "echo {{index}}/{{ count }} > out-{{index}}.txt"]
  env: {I: "{{index}}"}
  outputs: ["out-{{index}}.txt"]
  size: 1
  wall_clock_limit: 1m
`,
			want: Job{Name: "job", Tasks: []Task{
				{Name: "task-0", Argv: []string{"/bin/sh", "-c", "echo 0/3 > out-0.txt"}, Env: map[string]string{"I": "0"}, SizeMFlop: 1000, WallClockLimit: time.Minute, Outputs: []string{"out-0.txt"}},
				{Name: "task-1", Argv: []string{"/bin/sh", "-c", "echo 1/3 > out-1.txt"}, Env: map[string]string{"I": "1"}, SizeMFlop: 1000, WallClockLimit: time.Minute, Outputs: []string{"out-1.txt"}},
				{Name: "task-2", Argv: []string{"/bin/sh", "-c", "echo 2/3 > out-2.txt"}, Env: map[string]string{"I": "2"}, SizeMFlop: 1000, WallClockLimit: time.Minute, Outputs: []string{"out-2.txt"}},
			}},
		},
		{
			// count copies of each combination; the last parameter varies
			// fastest; values are substituted as written (0.10 stays 0.10).
			name: "sweep with count",
			src: `
template:
  count: 2
  params:
    a: [x, y]
    b: [0.10, 2]
  name: "{{param.a}}-{{param.b}}-{{index}}"
  argv: [run, "{{param.a}}", "{{param.b}}"]
  size: 1
  wall_clock_limit: 1m
`,
			want: Job{Name: "job", Tasks: func() []Task {
				var ts []Task
				for i, ab := range [][2]string{{"x", "0.10"}, {"x", "0.10"}, {"x", "2"}, {"x", "2"}, {"y", "0.10"}, {"y", "0.10"}, {"y", "2"}, {"y", "2"}} {
					ts = append(ts, Task{Name: ab[0] + "-" + ab[1] + "-" + string(rune('0'+i)), Argv: []string{"run", ab[0], ab[1]}, SizeMFlop: 1000, WallClockLimit: time.Minute})
				}
				return ts
			}()},
		},
		{
			name: "placeholders in a list and in defaults; per-task inputs",
			src: `
defaults:
  argv: [/bin/sh, run.sh, "{{index}}", "{{count}}"]
  outputs: ["result-{{index}}.txt"]
  inputs: [run.sh, "data/part-{{index}}.csv"]
  size: 1
  wall_clock_limit: 1m
tasks:
  - name: first
  - name: second
`,
			opts: Options{InputFS: testFS},
			want: Job{Name: "job", Tasks: []Task{
				{Name: "first", Argv: []string{"/bin/sh", "run.sh", "0", "2"}, SizeMFlop: 1000, WallClockLimit: time.Minute, Outputs: []string{"result-0.txt"},
					Inputs: []Input{{Name: "run.sh", Data: run}, {Name: "part-0.csv", Data: []byte("a,b\n0,0\n")}}},
				{Name: "second", Argv: []string{"/bin/sh", "run.sh", "1", "2"}, SizeMFlop: 1000, WallClockLimit: time.Minute, Outputs: []string{"result-1.txt"},
					Inputs: []Input{{Name: "run.sh", Data: run}, {Name: "part-1.csv", Data: []byte("a,b\n1,1\n")}}},
			}},
		},
		{
			name: "scalars as text, cleaned paths, input renamed",
			file: "my.job.yml",
			src: `
tasks:
  - argv: [sleep, 5, true, 0.50, 2024-01-31]
    env: {N: 4, EMPTY: ""}
    outputs: ["./out//x.txt", "a/../b/*"]
    inputs: [{path: ./data/part-0.csv, name: in/data.csv}]
    size: 1
    wall_clock_limit: 90s
`,
			opts: Options{InputFS: testFS},
			want: Job{Name: "my.job", Tasks: []Task{{Name: "task-0", Argv: []string{"sleep", "5", "true", "0.50", "2024-01-31"}, Env: map[string]string{"N": "4", "EMPTY": ""},
				Outputs: []string{"out/x.txt", "b/*"}, Inputs: []Input{{Name: "in/data.csv", Data: []byte("a,b\n0,0\n")}}, SizeMFlop: 1000, WallClockLimit: 90 * time.Second}}},
		},
		{
			name: "invalid file name gives the default job name",
			file: "dir/bad name.yaml",
			src:  "version: 1\ntasks: [{argv: [x], size: 1, wall_clock_limit: 7d}]\n",
			want: Job{Name: "job", Tasks: []Task{{Name: "task-0", Argv: []string{"x"}, SizeMFlop: 1000, WallClockLimit: 7 * 24 * time.Hour}}},
		},
		{
			name: "JSON",
			file: "j.JSON",
			src:  `{"name": "j", "tasks": [{"argv": ["x", 5], "size": 0.5, "wall_clock_limit": "1m", "env": {"K": "v"}, "checkpointable": true}]}`,
			want: Job{Name: "j", Tasks: []Task{{Name: "task-0", Argv: []string{"x", "5"}, Env: map[string]string{"K": "v"}, SizeMFlop: 500, WallClockLimit: time.Minute, Checkpointable: true}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := c.file
			if file == "" {
				file = "job.yaml"
			}
			got, err := Parse(file, []byte(c.src), c.opts)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(*got, c.want) {
				t.Errorf("got\n%+v\nwant\n%+v", *got, c.want)
			}
		})
	}
}

// TestParseInvalid: every rejected file gets exactly these messages: file,
// line, column, field path, what is wrong.
func TestParseInvalid(t *testing.T) {
	// ok is a valid task body to build on.
	const ok = "argv: [x]\n    size: 1\n    wall_clock_limit: 1m"
	long := strings.Repeat("a", 4000)
	cases := []struct {
		name string
		file string // default "j.yaml"
		src  string
		opts Options
		want string
	}{
		{"empty file", "", "", Options{}, "j.yaml: empty file: a job needs `tasks` or `template`"},
		{"comments only", "", "# nothing\n", Options{}, "j.yaml: empty file: a job needs `tasks` or `template`"},
		{"not a mapping", "", "- a\n- b\n", Options{}, "j.yaml:1:1: must be a mapping (key: value lines), got a list"},
		{"neither tasks nor template", "", "name: x\n", Options{}, "j.yaml:1:1: missing tasks (a list of tasks) or template (one task repeated with {{index}})"},
		{"both tasks and template", "", "tasks: []\ntemplate: {}\n", Options{}, "j.yaml:2:1: template: give either tasks or template, not both (tasks is at line 1)"},
		{"unknown top-level key", "", "tasks:\n  - " + ok + "\ntask: 1\n", Options{},
			"j.yaml:5:1: task: unknown key (want one of: version, name, defaults, tasks, template)"},
		{"unknown task key", "", "tasks:\n  - " + ok + "\n    walltime: 1h\n", Options{},
			"j.yaml:5:5: tasks[0].walltime: unknown key (want one of: name, argv, env, size, runtime, reference_gflops, wall_clock_limit, inputs, outputs, checkpointable, cpus, memory, gpus, requirements, max_attempts, retries, nodes, class, deadline, on_miss, alternatives)"},
		{"name in defaults", "", "defaults: {name: x}\ntasks:\n  - " + ok + "\n", Options{},
			"j.yaml:1:12: defaults.name: unknown key (want one of: argv, env, size, runtime, reference_gflops, wall_clock_limit, inputs, outputs, checkpointable, cpus, memory, gpus, requirements, max_attempts, retries, nodes, class, deadline, on_miss, alternatives)"},
		{"duplicate key", "", "tasks:\n  - " + ok + "\n    size: 2\n", Options{}, "j.yaml:5:5: tasks[0].size: duplicate key (first at line 3)"},
		{"version", "", "version: 2\ntasks:\n  - " + ok + "\n", Options{}, "j.yaml:1:10: version: unsupported version 2: this peer reads job files of version 1"},
		{"job name", "", "name: a/b\ntasks:\n  - " + ok + "\n", Options{}, `j.yaml:1:7: name: job name "a/b": want 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit`},
		{"tasks empty", "", "tasks: []\n", Options{}, "j.yaml:1:8: tasks: must not be empty"},
		{"tasks not a list", "", "tasks: {a: 1}\n", Options{}, "j.yaml:1:8: tasks: must be a list, got a mapping"},
		{"task not a mapping", "", "tasks: [x]\n", Options{}, `j.yaml:1:9: tasks[0]: must be a mapping (key: value lines), got the string "x"`},

		// argv
		{"argv missing", "", "tasks:\n  - size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:5: tasks[0]: missing argv (the command and its arguments) (set it here or in defaults)"},
		{"argv empty", "", "tasks:\n  - argv: []\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:11: tasks[0].argv: must not be empty: give the command and its arguments, e.g. [/bin/sh, run.sh]"},
		{"argv string", "", "tasks:\n  - argv: /bin/true\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			`j.yaml:2:11: tasks[0].argv: must be a list, got the string "/bin/true"`},
		{"argv[0] empty", "", "tasks:\n  - argv: [\"\", a]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:12: tasks[0].argv[0]: the command (argv[0]) must not be empty"},
		{"argv null element", "", "tasks:\n  - argv: [x, null]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:15: tasks[0].argv[1]: must be a string, got nothing (null)"},
		{"argv nested list", "", "tasks:\n  - argv: [x, [y]]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:15: tasks[0].argv[1]: must be a string, got a list"},
		{"argv NUL", "", "tasks:\n  - argv: [x, \"a\\0b\"]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:15: tasks[0].argv[1]: contains a NUL byte"},
		{"argv too long", "", "tasks:\n  - argv: [x, " + long + "a" + long + "]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:15: tasks[0].argv[1]: 8001 bytes long, more than 4096"},

		// sizes
		{"size negative", "", "tasks:\n  - argv: [x]\n    size: -1\n    wall_clock_limit: 1m\n", Options{}, "j.yaml:3:11: tasks[0].size: must be > 0, got -1"},
		{"size zero", "", "tasks:\n  - argv: [x]\n    size: 0\n    wall_clock_limit: 1m\n", Options{}, "j.yaml:3:11: tasks[0].size: must be > 0, got 0"},
		{"size NaN", "", "tasks:\n  - argv: [x]\n    size: .nan\n    wall_clock_limit: 1m\n", Options{}, "j.yaml:3:11: tasks[0].size: must be a finite number, got .nan"},
		{"size Inf", "", "tasks:\n  - argv: [x]\n    size: .inf\n    wall_clock_limit: 1m\n", Options{}, "j.yaml:3:11: tasks[0].size: must be a finite number, got .inf"},
		{"size -Inf", "", "tasks:\n  - argv: [x]\n    size: -.Inf\n    wall_clock_limit: 1m\n", Options{}, "j.yaml:3:11: tasks[0].size: must be a finite number, got -.Inf"},
		{"size string", "", "tasks:\n  - argv: [x]\n    size: \"12\"\n    wall_clock_limit: 1m\n", Options{}, `j.yaml:3:11: tasks[0].size: must be a number, got the string "12"`},
		{"size precision", "", "tasks:\n  - argv: [x]\n    size: 1.0005\n    wall_clock_limit: 1m\n", Options{}, "j.yaml:3:11: tasks[0].size: at most 3 decimal places (1/1000 GFlop), got 1.0005"},
		{"size too large", "", "tasks:\n  - argv: [x]\n    size: 1e13\n    wall_clock_limit: 1m\n", Options{}, "j.yaml:3:11: tasks[0].size: must be <= 9007199254740.992 GFlop, got 1e13"},
		{"size huge exponent", "", "tasks:\n  - argv: [x]\n    size: 1e99999\n    wall_clock_limit: 1m\n", Options{}, `j.yaml:3:11: tasks[0].size: must be a number, got the string "1e99999"`},
		{"size and runtime", "", "tasks:\n  - argv: [x]\n    size: 1\n    runtime: 1m\n    reference_gflops: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:4:5: tasks[0].runtime: give either size or runtime, not both (size is at line 3)"},
		{"neither size nor runtime", "", "tasks:\n  - argv: [x]\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:5: tasks[0]: missing size (in GFlop) or runtime (with reference_gflops) (set it here or in defaults)"},
		{"runtime without reference", "", "tasks:\n  - argv: [x]\n    runtime: 1m\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:3:14: tasks[0].runtime: runtime needs reference_gflops: the speed, in GFLOPS, of the machine the runtime was measured on (set it here or in defaults)"},
		{"runtime in defaults without reference, reported once", "", "defaults: {runtime: 1m, argv: [x], wall_clock_limit: 1m}\ntasks: [{name: a}, {name: b}]\n", Options{},
			"j.yaml:1:21: defaults.runtime: runtime needs reference_gflops: the speed, in GFLOPS, of the machine the runtime was measured on (set it here or in defaults)"},
		{"reference zero", "", "tasks:\n  - argv: [x]\n    runtime: 1m\n    reference_gflops: 0\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:4:23: tasks[0].reference_gflops: must be > 0, got 0"},
		{"runtime under 1 MFlop", "", "tasks:\n  - argv: [x]\n    runtime: 1ms\n    reference_gflops: 0.001\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:3:14: tasks[0].runtime: runtime 1ms at 0.001 GFLOPS is less than 1 MFlop of work"},
		{"runtime negative", "", "tasks:\n  - argv: [x]\n    runtime: -1h\n    reference_gflops: 1\n    wall_clock_limit: 1m\n", Options{},
			`j.yaml:3:14: tasks[0].runtime: must be > 0, got "-1h"`},

		// wall-clock limit
		{"wall negative", "sweep.yaml", "tasks:\n  - argv: [x]\n    size: 1\n    wall_clock_limit: \"-5m\"\n", Options{},
			`sweep.yaml:4:23: tasks[0].wall_clock_limit: must be > 0, got "-5m"`},
		{"wall zero", "", "tasks:\n  - argv: [x]\n    size: 1\n    wall_clock_limit: 0s\n", Options{}, `j.yaml:4:23: tasks[0].wall_clock_limit: must be > 0, got "0s"`},
		{"wall missing", "", "tasks:\n  - argv: [x]\n    size: 1\n", Options{},
			`j.yaml:2:5: tasks[0]: missing wall_clock_limit (the longest one run may take, e.g. "2h") (set it here or in defaults)`},
		{"wall without unit", "", "tasks:\n  - argv: [x]\n    size: 1\n    wall_clock_limit: 3600\n", Options{},
			`j.yaml:4:23: tasks[0].wall_clock_limit: must be a duration like "90s", "45m", "2h30m" or "1d12h", got the number 3600 without a unit (write "3600s" for seconds)`},
		{"wall garbage", "", "tasks:\n  - argv: [x]\n    size: 1\n    wall_clock_limit: soon\n", Options{},
			`j.yaml:4:23: tasks[0].wall_clock_limit: must be a duration like "90s", "45m", "2h30m" or "1d12h", got "soon"`},
		{"wall over the maximum", "", "tasks:\n  - argv: [x]\n    size: 1\n    wall_clock_limit: 7d1s\n", Options{},
			`j.yaml:4:23: tasks[0].wall_clock_limit: must be <= 7d, got "7d1s"`},
		{"wall over a custom maximum", "", "tasks:\n  - argv: [x]\n    size: 1\n    wall_clock_limit: 2h\n", Options{MaxWallClock: time.Hour},
			`j.yaml:4:23: tasks[0].wall_clock_limit: must be <= 1h0m0s, got "2h"`},

		// env
		{"env name", "", "tasks:\n  - " + ok + "\n    env: {1X: a}\n", Options{},
			`j.yaml:5:11: tasks[0].env.1X: variable name "1X": want a letter or '_' then letters, digits or '_', at most 128 characters`},
		{"env name with =", "", "tasks:\n  - " + ok + "\n    env: {\"A=B\": a}\n", Options{},
			`j.yaml:5:11: tasks[0].env.A=B: variable name "A=B": want a letter or '_' then letters, digits or '_', at most 128 characters`},
		{"env reserved", "", "tasks:\n  - " + ok + "\n    env: {COOPGRID_TASK: a}\n", Options{},
			"j.yaml:5:11: tasks[0].env.COOPGRID_TASK: COOPGRID_TASK is set by the executor; CHECKPOINT_DIR and COOPGRID_* are reserved"},
		{"env value list", "", "tasks:\n  - " + ok + "\n    env: {A: [1]}\n", Options{}, "j.yaml:5:14: tasks[0].env.A: must be a string, got a list"},
		{"env not a mapping", "", "tasks:\n  - " + ok + "\n    env: [A=1]\n", Options{}, "j.yaml:5:10: tasks[0].env: must be a mapping (key: value lines), got a list"},

		// checkpointable
		{"checkpointable yes", "", "tasks:\n  - " + ok + "\n    checkpointable: yes\n", Options{}, `j.yaml:5:21: tasks[0].checkpointable: must be true or false, got the string "yes"`},

		// outputs
		{"output escapes", "", "tasks:\n  - " + ok + "\n    outputs: [\"../x\"]\n", Options{}, `j.yaml:5:15: tasks[0].outputs[0]: "../x" goes outside the task's working directory`},
		{"output escapes after cleaning", "", "tasks:\n  - " + ok + "\n    outputs: [a/../../x]\n", Options{}, `j.yaml:5:15: tasks[0].outputs[0]: "a/../../x" goes outside the task's working directory`},
		{"output absolute", "", "tasks:\n  - " + ok + "\n    outputs: [/etc/passwd]\n", Options{},
			`j.yaml:5:15: tasks[0].outputs[0]: "/etc/passwd" is an absolute path: paths are relative to the task's working directory`},
		{"output is the directory", "", "tasks:\n  - " + ok + "\n    outputs: [./]\n", Options{},
			`j.yaml:5:15: tasks[0].outputs[0]: "./" names the task's working directory itself, not a file in it`},
		{"output bad glob", "", "tasks:\n  - " + ok + "\n    outputs: [\"a[\"]\n", Options{},
			`j.yaml:5:15: tasks[0].outputs[0]: "a[" is not a valid glob pattern (path.Match syntax: *, ?, [a-z], \)`},
		{"output control character", "", "tasks:\n  - " + ok + "\n    outputs: [\"a\\nb\"]\n", Options{},
			`j.yaml:5:15: tasks[0].outputs[0]: "a\nb" contains a control character`},
		{"output duplicate", "", "tasks:\n  - " + ok + "\n    outputs: [a.txt, ./a.txt]\n", Options{},
			`j.yaml:5:22: tasks[0].outputs[1]: output pattern "a.txt" is given twice`},
		{"template output escapes for one index", "", "template:\n  count: 3\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n  outputs: [\"{{index}}/../../x\"]\n", Options{},
			`j.yaml:6:13: template.outputs[0]: index 0: "0/../../x" goes outside the task's working directory`},
		{"default output escapes in a list", "", "defaults:\n  outputs: [\"{{count}}/../..\"]\ntasks:\n  - " + ok + "\n", Options{},
			`j.yaml:2:13: defaults.outputs[0]: tasks[0]: "1/../.." goes outside the task's working directory`},

		// inputs
		{"inputs without a directory", "", "tasks:\n  - " + ok + "\n    inputs: [run.sh]\n", Options{},
			"j.yaml:5:13: tasks[0].inputs: input files are read relative to the job file: use Load (or set Options.InputFS)"},
		{"input missing", "", "tasks:\n  - " + ok + "\n    inputs: [nope.sh]\n", Options{InputFS: testFS},
			`j.yaml:5:14: tasks[0].inputs[0]: cannot read input "nope.sh": file does not exist`},
		{"input escapes", "", "tasks:\n  - " + ok + "\n    inputs: [../run.sh]\n", Options{InputFS: testFS},
			`j.yaml:5:14: tasks[0].inputs[0]: "../run.sh" goes outside the job file's directory`},
		{"input absolute", "", "tasks:\n  - " + ok + "\n    inputs: [/etc/passwd]\n", Options{InputFS: testFS},
			`j.yaml:5:14: tasks[0].inputs[0]: "/etc/passwd" is an absolute path: paths are relative to the job file's directory`},
		{"input name escapes", "", "tasks:\n  - " + ok + "\n    inputs: [{path: run.sh, name: ../run.sh}]\n", Options{InputFS: testFS},
			`j.yaml:5:35: tasks[0].inputs[0].name: "../run.sh" goes outside the task's working directory`},
		{"input mapping without path", "", "tasks:\n  - " + ok + "\n    inputs: [{name: x}]\n", Options{InputFS: testFS},
			"j.yaml:5:14: tasks[0].inputs[0]: missing path (the file to ship, relative to the job file)"},
		{"input unknown key", "", "tasks:\n  - " + ok + "\n    inputs: [{path: run.sh, mode: 0755}]\n", Options{InputFS: testFS},
			"j.yaml:5:29: tasks[0].inputs[0].mode: unknown key (want one of: path, name)"},
		{"input over the per-file limit", "", "tasks:\n  - " + ok + "\n    inputs: [big.bin]\n", Options{InputFS: testFS, MaxInputFileBytes: 1000},
			`j.yaml:5:14: tasks[0].inputs[0]: input "big.bin" is 2000 bytes, more than the 1000 allowed per input file`},
		{"inputs over the total", "", "tasks:\n  - " + ok + "\n    inputs: [mid.bin]\n  - name: b\n    " + ok + "\n    inputs: [mid.bin, big.bin]\n", Options{InputFS: testFS, MaxInputTotalBytes: 2500},
			`j.yaml:10:23: tasks[1].inputs[1]: input "big.bin" (2000 bytes) brings the job's input files over the 2500 bytes allowed in total`},
		{"input is a directory", "", "tasks:\n  - " + ok + "\n    inputs: [dir]\n", Options{InputFS: testFS},
			`j.yaml:5:14: tasks[0].inputs[0]: input "dir" is a directory: list its files`},
		{"input names clash", "", "tasks:\n  - " + ok + "\n    inputs: [run.sh, {path: data/part-0.csv, name: run.sh}]\n", Options{InputFS: testFS},
			`j.yaml:5:22: tasks[0].inputs[1]: two input files are named "run.sh" (inputs[0] and inputs[1]): give one a different name`},
		{"input file and directory clash", "", "tasks:\n  - " + ok + "\n    inputs: [{path: run.sh, name: a}, {path: run.sh, name: a/b}]\n", Options{InputFS: testFS},
			`j.yaml:5:13: tasks[0].inputs: input "a" (inputs[0]) is also the directory of input "a/b" (inputs[1])`},

		// names
		{"task name invalid", "", "tasks:\n  - name: \"-x\"\n    " + ok + "\n", Options{},
			`j.yaml:2:11: tasks[0].name: task name "-x": want 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit`},
		{"duplicate task names", "", "tasks:\n  - name: a\n    " + ok + "\n  - name: a\n    " + ok + "\n", Options{},
			`j.yaml:6:11: tasks[1].name: duplicate task name "a" (already used by task 0)`},
		{"default name taken", "", "tasks:\n  - name: task-1\n    " + ok + "\n  - " + ok + "\n", Options{},
			`j.yaml:6:5: tasks[1]: the default name "task-1" is already used by task 0: give this task a name`},
		{"template names not unique", "", "template:\n  count: 3\n  name: \"t{{count}}\"\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			`j.yaml:3:9: template.name: tasks 0 and 1 are both named "t3": task names must be unique (use {{index}})`},
		{"template name invalid for an index", "", "template:\n  params: {p: [a, \"b c\"]}\n  name: \"t-{{param.p}}\"\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			`j.yaml:3:9: template.name: index 1: task name "t-b c": want 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit`},

		// templates
		{"template without count or params", "", "template:\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			"j.yaml:2:3: template: missing count (how many tasks) or params (the values to sweep over)"},
		{"count zero", "", "template:\n  count: 0\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			"j.yaml:2:10: template.count: must be between 1 and 100000, got 0"},
		{"count fraction", "", "template:\n  count: 1.5\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			"j.yaml:2:10: template.count: must be a whole number, got 1.5"},
		{"count in a task", "", "tasks:\n  - " + ok + "\n    count: 2\n", Options{},
			"j.yaml:5:5: tasks[0].count: unknown key (want one of: name, argv, env, size, runtime, reference_gflops, wall_clock_limit, inputs, outputs, checkpointable, cpus, memory, gpus, requirements, max_attempts, retries, nodes, class, deadline, on_miss, alternatives)"},
		{"params empty list", "", "template:\n  params: {a: []}\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			"j.yaml:2:15: template.params.a: must list at least one value"},
		{"params not lists", "", "template:\n  params: {a: 1}\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			"j.yaml:2:15: template.params.a: must be a list, got the number 1"},
		{"param name", "", "template:\n  params: {a-b: [1]}\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{},
			`j.yaml:2:12: template.params.a-b: parameter name "a-b": want a letter or '_' then letters, digits or '_', at most 64 characters`},
		{"unknown param", "", "template:\n  params: {a: [1]}\n  argv: [x, \"{{param.b}}\"]\n  size: 1\n  wall_clock_limit: 1m\n", Options{},
			`j.yaml:3:13: template.argv[1]: {{param.b}}: no parameter "b" in template.params`},
		{"param in a list", "", "tasks:\n  - argv: [x, \"{{param.b}}\"]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:15: tasks[0].argv[1]: {{param.b}}: parameters exist only in a `template` with `params`"},
		{"unknown placeholder", "", "tasks:\n  - argv: [x, \"{{ idx }}\"]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:15: tasks[0].argv[1]: unknown placeholder {{idx}} (want {{index}}, {{count}} or {{param.NAME}})"},
		{"unclosed placeholder", "", "tasks:\n  - argv: [x, \"{{index\"]\n    size: 1\n    wall_clock_limit: 1m\n", Options{},
			`j.yaml:2:15: tasks[0].argv[1]: unclosed {{ in "{{index"`},

		// limits
		{"too many tasks in a list", "", "tasks:\n  - " + ok + "\n  - " + ok + "\n  - " + ok + "\n", Options{MaxTasks: 2},
			"j.yaml:2:3: tasks: 3 tasks, more than the 2 allowed in one job"},
		{"count over the limit", "", "template:\n  count: 3\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{MaxTasks: 2},
			"j.yaml:2:10: template.count: must be between 1 and 2, got 3"},
		{"sweep over the limit", "", "template:\n  count: 2\n  params: {a: [1, 2], b: [1, 2, 3]}\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{MaxTasks: 10},
			"j.yaml:2:3: template: count × params: more than the 10 tasks allowed in one job (at parameter b)"},
		{"file too large", "", "tasks: []\n" + strings.Repeat("#", 100), Options{MaxFileBytes: 100}, "j.yaml: file is larger than 100 bytes"},
		{"too deep", "", "tasks:\n  - argv: [[[[x]]]]\n", Options{MaxDepth: 4}, "j.yaml:2:13: tasks[0].argv[0][0]: nested more than 4 levels deep"},
		{"too many nodes", "", "tasks:\n  - argv: [a, b, c, d, e, f, g, h, i, j]\n", Options{MaxNodes: 10},
			"j.yaml:2:24: tasks[0].argv[4]: more than 10 YAML nodes: the file is too large to be a job file"},
		{"expanded job too large", "", "template:\n  count: 1000\n  " + strings.ReplaceAll(ok, "\n    ", "\n  ") + "\n", Options{MaxJobBytes: 10000},
			"j.yaml:1:1: the tasks take more than 10000 bytes once expanded (at task 41 of 1000): shorten them or split the job"},
		{"argv and env over 1 MiB once expanded", "", "template:\n  params: {p: [" + long + "]}\n  argv: [x" + strings.Repeat(", \"{{param.p}}\"", 255) + "]\n  env: {" + envOf(10, "{{param.p}}") + "}\n  size: 1\n  wall_clock_limit: 1m\n", Options{},
			"j.yaml:2:3: template: index 0: argv and env take 1060297 bytes, more than 1048576"},

		// YAML hazards
		{"alias", "", "defaults: &d {size: 1}\ntasks:\n  - argv: [x]\n    wall_clock_limit: 1m\n    env: *d\n", Options{},
			"j.yaml:5:10: tasks[0].env: aliases (*d) are not supported: write the value out, or use `defaults`"},
		{"merge key", "", "tasks:\n  - <<: {size: 1}\n    argv: [x]\n", Options{},
			"j.yaml:2:5: tasks[0]: merge keys (<<) are not supported: write the keys out, or use `defaults`"},
		{"two documents", "", "tasks: []\n---\ntasks: []\n", Options{}, "j.yaml:2:1: only one YAML document is allowed (remove the second ---)"},
		{"syntax error", "", "tasks:\n  - argv: [x\n", Options{}, "j.yaml:2: YAML syntax: did not find expected ',' or ']'"},
		{"tab indentation", "", "tasks:\n\t- argv: [x]\n", Options{}, "j.yaml:2: YAML syntax: found character that cannot start any token"},

		// JSON
		{"JSON syntax", "j.json", "{\n  \"tasks\": [\n    {\"argv\": [\"x\"],}\n  ]\n}\n", Options{},
			"j.json:3:20: JSON syntax: invalid character '}' looking for beginning of object key string"},
		{"JSON comment", "j.json", "{\n  // no\n  \"tasks\": []\n}\n", Options{}, "j.json:2:3: JSON syntax: invalid character '/'"},
		{"JSON truncated", "j.json", "{\"tasks\": [", Options{}, "j.json:1:12: JSON syntax: unexpected end of file"},
		{"JSON trailing data", "j.json", "{\"tasks\": []} {}", Options{}, "j.json:1:15: JSON syntax: extra data after the top-level value"},
		{"JSON empty", "j.json", " \n", Options{}, "j.json: empty file: a job needs `tasks` or `template`"},
		{"JSON duplicate key", "j.json", "{\"tasks\": [],\n \"tasks\": []}", Options{}, "j.json:1:11: tasks: must not be empty\nj.json:2:2: tasks: duplicate key (first at line 1)"},
		{"JSON wrong type", "j.json", "{\"tasks\": [{\"argv\": [\"x\"], \"size\": \"1\", \"wall_clock_limit\": \"1m\"}]}", Options{},
			`j.json:1:36: tasks[0].size: must be a number, got the string "1"`},
		{"JSON too deep", "j.json", "[[[[[[]]]]]]", Options{MaxDepth: 3}, "j.json:1:5: nested more than 3 levels deep"},

		// several errors at once, in file order
		{"several errors", "", "tasks:\n  - argv: []\n    size: -1\n    wall_clock_limit: 1m\n    bogus: 1\n", Options{},
			"j.yaml:2:11: tasks[0].argv: must not be empty: give the command and its arguments, e.g. [/bin/sh, run.sh]\n" +
				"j.yaml:3:11: tasks[0].size: must be > 0, got -1\n" +
				"j.yaml:5:5: tasks[0].bogus: unknown key (want one of: name, argv, env, size, runtime, reference_gflops, wall_clock_limit, inputs, outputs, checkpointable, cpus, memory, gpus, requirements, max_attempts, retries, nodes, class, deadline, on_miss, alternatives)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := c.file
			if file == "" {
				file = "j.yaml"
			}
			job, err := Parse(file, []byte(c.src), c.opts)
			if err == nil {
				t.Fatalf("no error; got %+v", job)
			}
			if job != nil {
				t.Errorf("a job was returned with the error")
			}
			if err.Error() != c.want {
				t.Errorf("error\n got: %s\nwant: %s", err, c.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != file {
				t.Errorf("error is not an *Error naming %s: %#v", file, err)
			}
		})
	}
}

// envOf writes n variables V0..Vn-1 set to val, for a flow mapping.
func envOf(n int, val string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "V" + string(rune('0'+i)) + ": \"" + val + "\""
	}
	return strings.Join(parts, ", ")
}

// TestTooManyErrors: a file with many problems reports the first 20 and
// says how many more there are.
func TestTooManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("tasks:\n")
	for i := 0; i < 30; i++ {
		b.WriteString("  - {argv: [x], size: -1, wall_clock_limit: 1m}\n")
	}
	_, err := Parse("many.yaml", []byte(b.String()), Options{})
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != yamlfile.MaxErrors+1 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), yamlfile.MaxErrors+1, err)
	}
	if lines[0] != "many.yaml:2:23: tasks[0].size: must be > 0, got -1" || lines[yamlfile.MaxErrors] != "many.yaml: 10 more errors not shown" {
		t.Errorf("first %q, last %q", lines[0], lines[yamlfile.MaxErrors])
	}
}

// TestTemplateErrorReportedOnce: a template value that is wrong for every
// index is reported once, for the first.
func TestTemplateErrorReportedOnce(t *testing.T) {
	src := "template:\n  count: 1000\n  argv: [x]\n  size: 1\n  wall_clock_limit: 1m\n  outputs: [\"../{{index}}\"]\n"
	_, err := Parse("t.yaml", []byte(src), Options{})
	want := `t.yaml:6:13: template.outputs[0]: index 0: "../0" goes outside the task's working directory`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// TestLargeTemplate: the maximum number of tasks expands, each correct.
func TestLargeTemplate(t *testing.T) {
	src := "template:\n  count: 100000\n  argv: [/bin/sh, run.sh, \"{{index}}\"]\n  outputs: [\"out-{{index}}\"]\n  size: 0.001\n  wall_clock_limit: 1m\n"
	job, err := Parse("big.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Tasks) != DefaultMaxTasks {
		t.Fatalf("%d tasks", len(job.Tasks))
	}
	for _, i := range []int{0, 1, 99_999} {
		tk := job.Tasks[i]
		n := strconv.Itoa(i)
		if tk.Name != "task-"+n || tk.Argv[2] != n || tk.Outputs[0] != "out-"+n || tk.SizeMFlop != 1 {
			t.Errorf("task %d: %+v", i, tk)
		}
	}
	// One more is too many.
	_, err = Parse("big.yaml", []byte(strings.Replace(src, "100000", "100001", 1)), Options{})
	if err == nil || !strings.Contains(err.Error(), "template.count: must be between 1 and 100000, got 100001") {
		t.Fatalf("got %v", err)
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"90s", 90 * time.Second, false},
		{"1d", 24 * time.Hour, false},
		{"2d12h30m", 60*time.Hour + 30*time.Minute, false},
		{"-1d", -24 * time.Hour, false},
		{"1.5h", 90 * time.Minute, false},
		{"1.5d", 0, true},
		{"1d-1h", 0, true},
		{"d", 0, true},
		{"1dd", 0, true},
		{"999999d", 0, true},
		{"", 0, true},
	}
	for _, c := range cases {
		got, err := parseDuration(c.in)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, bad=%v", c.in, got, err, c.want, c.bad)
		}
	}
}
