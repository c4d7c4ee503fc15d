package jobfile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

const examplesDir = "../examples/jobs"

func loadExample(t *testing.T, name string) *Job {
	t.Helper()
	job, err := Load(filepath.Join(examplesDir, name), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

func TestExampleSweep(t *testing.T) {
	job := loadExample(t, "sweep.yaml")
	if job.Name != "sweep" || len(job.Tasks) != 8 {
		t.Fatalf("job %q with %d tasks", job.Name, len(job.Tasks))
	}
	alphas := []string{"0.1", "0.2", "0.5", "1.0"}
	for i, tk := range job.Tasks {
		alpha, seed, n := alphas[i/2], strconv.Itoa(i%2+1), strconv.Itoa(i)
		want := Task{
			Name: "alpha-" + alpha + "-seed-" + seed,
			Argv: []string{"/bin/sh", "-c", `echo "task $INDEX of $COUNT: alpha=$ALPHA seed=$SEED" > "result-$INDEX.txt"`},
			Env:  map[string]string{"ALPHA": alpha, "SEED": seed, "INDEX": n, "COUNT": "8"},
			// 2.5 GFlop, exactly.
			SizeMFlop:      2500,
			WallClockLimit: 5 * time.Minute,
			Outputs:        []string{"result-" + n + ".txt"},
		}
		if !reflect.DeepEqual(tk, want) {
			t.Errorf("task %d:\n got %+v\nwant %+v", i, tk, want)
		}
	}
}

func TestExampleCheckpointCounter(t *testing.T) {
	job := loadExample(t, "checkpoint-counter.yaml")
	script, err := os.ReadFile(filepath.Join(examplesDir, "counter.sh"))
	if err != nil {
		t.Fatal(err)
	}
	want := Job{Name: "checkpoint-counter", Tasks: []Task{{
		Name: "count-to-600",
		Argv: []string{"/bin/sh", "counter.sh", "600"},
		Env:  map[string]string{"STEP_SECONDS": "1"},
		// 10 min on a 10 GFLOPS machine: 600 s × 10,000 MFLOPS.
		SizeMFlop:      6_000_000,
		WallClockLimit: time.Hour,
		Inputs:         []Input{{Name: "counter.sh", Data: script}},
		Outputs:        []string{"result.txt"},
		Checkpointable: true,
	}}}
	if !reflect.DeepEqual(*job, want) {
		t.Errorf("got\n%+v\nwant\n%+v", *job, want)
	}
}

func TestExampleHelloJSON(t *testing.T) {
	job := loadExample(t, "hello.json")
	want := Job{Name: "hello", Tasks: []Task{
		{Name: "hello-size", Argv: []string{"/bin/sh", "-c", `echo "hello from $GREETER" > hello.txt`}, Env: map[string]string{"GREETER": "a task sized in GFlop"},
			SizeMFlop: 500, WallClockLimit: time.Minute, Outputs: []string{"hello.txt"}},
		// 2 s on a 1.5 GFLOPS machine = 3 GFlop.
		{Name: "hello-runtime", Argv: []string{"/bin/sh", "-c", `echo "hello from $GREETER" > hello.txt`}, Env: map[string]string{"GREETER": "a task sized by its runtime"},
			SizeMFlop: 3000, WallClockLimit: time.Minute, Outputs: []string{"hello.txt"}},
	}}
	if !reflect.DeepEqual(*job, want) {
		t.Errorf("got\n%+v\nwant\n%+v", *job, want)
	}
}

// TestExamplesAcceptedByLedger: every example's tasks, as `peer submit`
// would turn them into a SubmitTasks command, pass the ledger's own shape
// validation. It keeps this package's limits and the ledger's in step.
func TestExamplesAcceptedByLedger(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if ext := filepath.Ext(f); ext != ".yaml" && ext != ".json" {
			continue
		}
		n++
		job, err := Load(f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ledger.EncodeCommand(submitCommand(job)); err != nil {
			t.Errorf("%s: ledger rejects the tasks: %v", f, err)
		}
	}
	if n < 3 {
		t.Fatalf("only %d example job files found", n)
	}
}

// TestLimitsMatchLedger: a task at every limit this package allows is
// accepted by the ledger.
func TestLimitsMatchLedger(t *testing.T) {
	if maxArgs != ledger.MaxArgv || maxArgBytes != ledger.MaxArgBytes || maxEnv != ledger.MaxEnv || maxEnvKeyLen != ledger.MaxEnvKeyLen ||
		maxFiles != ledger.MaxFiles || maxPathLen != ledger.MaxFileNameLen || maxSizeMFlop != ledger.MaxSizeMFlop || maxNameLen != ledger.MaxNameLen {
		t.Fatal("a limit differs from the ledger's")
	}
	long := strings.Repeat("p", maxPathLen-4)
	var b strings.Builder
	b.WriteString("template:\n  count: 1\n  argv: [x")
	for i := 1; i < maxArgs; i++ {
		b.WriteString(", a")
	}
	b.WriteString("]\n  env: {" + strings.Repeat("K", maxEnvKeyLen) + ": " + strings.Repeat("v", 1000) + "}\n")
	b.WriteString("  size: 9007199254740.992\n  wall_clock_limit: 7d\n  outputs: [")
	for i := 0; i < maxFiles; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(long + strconv.Itoa(1000+i))
	}
	b.WriteString("]\n")
	job, err := Parse("limits.yaml", []byte(b.String()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.EncodeCommand(submitCommand(job)); err != nil {
		t.Errorf("ledger rejects a task at the limits: %v", err)
	}
}

func submitCommand(job *Job) ledger.Command {
	st := &ledger.SubmitTasks{}
	for _, tk := range job.Tasks {
		spec := ledger.Spec{Argv: tk.Argv, Env: tk.Env, WallLimitMs: tk.WallClockLimit.Milliseconds(), Outputs: tk.Outputs, Checkpointable: tk.Checkpointable}
		for _, in := range tk.Inputs {
			spec.Inputs = append(spec.Inputs, in.Name)
		}
		st.Tasks = append(st.Tasks, ledger.TaskSpec{SizeMFlop: tk.SizeMFlop, Spec: spec})
	}
	return ledger.Command{Org: "org1", Peer: "peer1", SubmitTasks: st}
}

// TestCounterScript runs examples/jobs/counter.sh for real: it counts to
// its target, leaves its counter in $CHECKPOINT_DIR, and a second run
// resumes from the saved counter instead of from zero.
func TestCounterScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	script, err := filepath.Abs(filepath.Join(examplesDir, "counter.sh"))
	if err != nil {
		t.Fatal(err)
	}
	work, ckpt := t.TempDir(), t.TempDir()
	run := func(target string) (string, error) {
		cmd := exec.Command(sh, script, target)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "CHECKPOINT_DIR="+ckpt, "STEP_SECONDS=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		return stderr.String(), err
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	if log, err := run("3"); err != nil {
		t.Fatalf("first run: %v\n%s", err, log)
	}
	if got := read(filepath.Join(work, "result.txt")); got != "3" {
		t.Errorf("result %q, want 3", got)
	}
	if got := read(filepath.Join(ckpt, "counter")); got != "3" {
		t.Errorf("checkpoint %q, want 3", got)
	}

	// As if preempted at 5 of 7: the next run starts from 5.
	if err := os.WriteFile(filepath.Join(ckpt, "counter"), []byte("5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := run("7")
	if err != nil {
		t.Fatalf("resumed run: %v\n%s", err, log)
	}
	if !strings.Contains(log, "resuming from 5") || read(filepath.Join(work, "result.txt")) != "7" {
		t.Errorf("did not resume from 5: log %q", log)
	}

	// A corrupt checkpoint is refused, not trusted.
	if err := os.WriteFile(filepath.Join(ckpt, "counter"), []byte("5x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err = run("7")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(log, "corrupt checkpoint") {
		t.Errorf("corrupt checkpoint: err %v, log %q", err, log)
	}
}

// TestExampleTasksRun runs the tasks of sweep.yaml and hello.json as the
// executor would (argv, env added to the environment, a fresh working
// directory) and checks that each leaves exactly the files its output
// patterns promise.
func TestExampleTasksRun(t *testing.T) {
	if _, err := exec.LookPath("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	for _, name := range []string{"sweep.yaml", "hello.json"} {
		job := loadExample(t, name)
		for _, tk := range job.Tasks {
			work := t.TempDir()
			cmd := exec.Command(tk.Argv[0], tk.Argv[1:]...)
			cmd.Dir = work
			cmd.Env = os.Environ()
			for k, v := range tk.Env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s %s: %v\n%s", name, tk.Name, err, out)
			}
			for _, pat := range tk.Outputs {
				m, err := filepath.Glob(filepath.Join(work, pat))
				if err != nil || len(m) != 1 {
					t.Fatalf("%s %s: output %q matched %v (%v)", name, tk.Name, pat, m, err)
				}
				data, err := os.ReadFile(m[0])
				if err != nil {
					t.Fatal(err)
				}
				want := "hello from " + tk.Env["GREETER"] + "\n"
				if name == "sweep.yaml" {
					want = "task " + tk.Env["INDEX"] + " of 8: alpha=" + tk.Env["ALPHA"] + " seed=" + tk.Env["SEED"] + "\n"
				}
				if string(data) != want {
					t.Errorf("%s %s: %s holds %q, want %q", name, tk.Name, pat, data, want)
				}
			}
		}
	}
}
