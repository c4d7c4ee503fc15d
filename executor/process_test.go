package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

func TestProcessSuccessOutputsAndStdout(t *testing.T) {
	// A variable of the daemon's own environment must not reach the task.
	t.Setenv("COOPGRID_TEST_LEAK", "leaked")
	e := newProc(t, allowShell())
	spec := sh("job-1", `
echo hello
echo oops >&2
mkdir -p out/deep
echo data > out/a.bin
echo deeper > out/deep/b.bin
echo x > not-collected.log
echo "$GREETING" > greeting.txt
cat in/data.txt > copy.txt
env > env.txt
pwd > pwd.txt
`)
	spec.Env = map[string]string{"GREETING": "hi there"}
	spec.Inputs = map[string][]byte{"in/data.txt": []byte("payload\n")}
	spec.OutputPatterns = []string{"out", "*.txt"}
	spec.SizeMFlop = 5000
	r := run(t, e, spec)

	if !r.OK() || r.ExitCode != 0 || r.Reason != ReasonOK || r.Detail != "" {
		t.Fatalf("result %+v, want ok", r)
	}
	if r.Machine != "m1" || r.Attempt != 1 || r.DoneMFlop != 5000 {
		t.Errorf("machine %q attempt %d done %d, want m1 1 5000", r.Machine, r.Attempt, r.DoneMFlop)
	}
	if got := readStream(t, r.StdoutPath); got != "hello\n" {
		t.Errorf("stdout %q", got)
	}
	if got := readStream(t, r.StderrPath); got != "oops\n" {
		t.Errorf("stderr %q", got)
	}
	var keys []string
	for k := range r.Outputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// "*.txt" does not cross a separator, so in/data.txt is not collected.
	want := []string{"copy.txt", "env.txt", "greeting.txt", "out/a.bin", "out/deep/b.bin", "pwd.txt"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("outputs %v, want %v", keys, want)
	}
	for rel, want := range map[string]string{
		"out/a.bin": "data\n", "out/deep/b.bin": "deeper\n", "greeting.txt": "hi there\n",
		"copy.txt": "payload\n", "pwd.txt": r.WorkDir + "\n",
	} {
		if got := readFile(t, r.Outputs[rel]); got != want {
			t.Errorf("output %s = %q, want %q", rel, got, want)
		}
	}
	if r.WorkDir != workDir(e, "job-1") {
		t.Errorf("work dir %s, want %s", r.WorkDir, workDir(e, "job-1"))
	}
	env := readFile(t, r.Outputs["env.txt"])
	for _, want := range []string{"PATH=" + DefaultPath + "\n", "HOME=" + r.WorkDir + "\n", "COOPGRID_TASK_ID=job-1\n", "COOPGRID_MACHINE=m1\n", "COOPGRID_ATTEMPT=1\n", "GREETING=hi there\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
	for _, bad := range []string{"COOPGRID_TEST_LEAK", "CHECKPOINT_DIR"} {
		if strings.Contains(env, bad) {
			t.Errorf("environment has %s:\n%s", bad, env)
		}
	}
	// Declared power: the machine's busy watts over the run.
	if r.EnergySource != EnergyDeclared || r.EnergyMilliJ != milliJ(50_000, r.End.Sub(r.Start)) || r.EnergyMilliJ <= 0 {
		t.Errorf("energy %d mJ from %s over %v, want declared 50 W", r.EnergyMilliJ, r.EnergySource, r.End.Sub(r.Start))
	}
	if len(e.Running()) != 0 {
		t.Errorf("still running: %v", e.Running())
	}
}

// TestProcessFailures: a run that fails says why and is not credited with
// the whole task. A failed run is credited with the machine's speed times
// its duration (estimateDone), so the task is far larger than any run here
// could compute (10⁹ MFlop: days at the test machines' 2 GFLOPS), and the
// supervisor is started by a run of its own first, outside the runs
// checked, rather than inside the first of them.
func TestProcessFailures(t *testing.T) {
	e := newProc(t, allowShell())
	const size = 1_000_000_000
	if r := run(t, e, TaskSpec{ID: "start-supervisor", Argv: []string{"true"}}); !r.OK() {
		t.Fatalf("the run that starts the supervisor: %q %q", r.Reason, r.Detail)
	}
	for _, c := range []struct {
		name       string
		argv       []string
		wantCode   int
		wantReason string
		wantDetail string
	}{
		{"false", []string{"false"}, 1, ReasonExitNonzero, "exit status 1"},
		{"exit3", []string{"sh", "-c", "exit 3"}, 3, ReasonExitNonzero, "exit status 3"},
		{"segv", []string{"sh", "-c", "kill -SEGV $$"}, -1, ReasonSignaled, "SIGSEGV"},
		{"missing", []string{"/nonexistent/prog"}, -1, ReasonNotAllowed, "not on the machine owner's allow list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, e, TaskSpec{ID: c.name, Argv: c.argv, SizeMFlop: size})
			if r.ExitCode != c.wantCode || r.Reason != c.wantReason || !strings.Contains(r.Detail, c.wantDetail) {
				t.Errorf("got exit %d reason %q detail %q, want %d %q ~%q", r.ExitCode, r.Reason, r.Detail, c.wantCode, c.wantReason, c.wantDetail)
			}
			if r.OK() || r.DoneMFlop >= size {
				t.Errorf("failed run reports ok=%v done=%d", r.OK(), r.DoneMFlop)
			}
		})
	}
}

func TestProcessMissingExecutableWithAllowAny(t *testing.T) {
	e := newProc(t, Policy{AllowAny: true})
	for _, argv0 := range []string{"/nonexistent/prog", "no-such-command-xyz"} {
		r := run(t, e, TaskSpec{ID: "missing", Argv: []string{argv0}})
		if r.Reason != ReasonStartFailed || !strings.Contains(r.Detail, argv0) {
			t.Errorf("%s: got %q %q, want start_failed naming it", argv0, r.Reason, r.Detail)
		}
	}
}

// A task whose child ignores SIGTERM: at the wall-clock limit the whole
// group dies, child included, and nothing of it survives.
func TestProcessTimeoutKillsWholeGroup(t *testing.T) {
	e := newProc(t, allowShell())
	spec := sh("slow", `
(trap '' TERM; exec sleep 100) &
echo $! > child.pid
echo $$ > leader.pid
trap '' TERM
while :; do sleep 1; done
`)
	spec.WallClockLimit = time.Second
	r := run(t, e, spec)
	if r.Reason != ReasonTimeout || r.ExitCode != -1 || !strings.Contains(r.Detail, "wall-clock limit 1s") {
		t.Fatalf("got %q exit %d %q, want killed_timeout", r.Reason, r.ExitCode, r.Detail)
	}
	if d := r.End.Sub(r.Start); d >= 30*time.Second {
		t.Errorf("ran %v with a 1 s limit", d)
	}
	for _, f := range []string{"child.pid", "leader.pid"} {
		pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(r.WorkDir, f))))
		if err != nil {
			t.Fatal(err)
		}
		// When the result is delivered no process of the group runs...
		if alive(pid) {
			t.Errorf("%s %d still alive when the result was delivered", f, pid)
		}
		// ...and soon none exists at all (an orphan's zombie is reaped by
		// init).
		if !gone(pid) {
			t.Errorf("%s %d still exists", f, pid)
		}
	}
}

// A process that leaves the task's group (setsid) while holding its stdout
// cannot hold the result back: the capture is cut after a short wait. (It
// survives the task: see the isolation limits in docs/EXECUTOR.md.)
func TestProcessEscapedProcessDoesNotBlockResult(t *testing.T) {
	pol := allowShell()
	e := newProc(t, pol)
	r := run(t, e, sh("escape", `setsid sh -c 'echo $$ > escaped.pid; echo from-escapee; exec sleep 30' & while [ ! -s escaped.pid ]; do sleep 0.01; done; echo leader`))
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(r.WorkDir, "escaped.pid"))))
	if err == nil {
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	if !r.OK() {
		t.Fatalf("%q %q", r.Reason, r.Detail)
	}
	if out := readStream(t, r.StdoutPath); !strings.Contains(out, "leader\n") || !strings.Contains(out, "from-escapee\n") {
		t.Errorf("stdout %q", out)
	}
}

// When the leader exits, what it left running in its group is killed
// before the result is delivered.
func TestProcessLeaderExitKillsLeftovers(t *testing.T) {
	e := newProc(t, allowShell())
	r := run(t, e, sh("leaves", `sleep 100 > /dev/null 2>&1 & echo $! > bg.pid`))
	if !r.OK() {
		t.Fatalf("%q %q", r.Reason, r.Detail)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(r.WorkDir, "bg.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("background process %d alive after the result", pid)
	}
	if !gone(pid) {
		t.Errorf("background process %d still exists", pid)
	}
}

func TestProcessPolicyWallClockCapsSpec(t *testing.T) {
	pol := allowShell()
	pol.MaxWallClock = 500 * time.Millisecond
	e := newProc(t, pol)
	spec := sh("capped", "sleep 60")
	spec.WallClockLimit = time.Hour
	r := run(t, e, spec)
	if r.Reason != ReasonTimeout || !strings.Contains(r.Detail, "500ms") {
		t.Fatalf("got %q %q, want the policy's 500ms limit", r.Reason, r.Detail)
	}
}

func TestProcessStopWithGraceWritesCheckpoint(t *testing.T) {
	e := newProc(t, allowShell())
	spec := sh("ck", `
trap 'echo "count=$i" > "$CHECKPOINT_DIR/state"; exit 0' TERM
i=0
echo started > started
while :; do i=$((i+1)); sleep 0.05; done
`)
	spec.Checkpointable = true
	spec.SizeMFlop = 1 << 40
	if err := e.Start(context.Background(), "m2", spec); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(workDir(e, "ck"), "started"))
	if got := e.Running(); !reflect.DeepEqual(got, []string{"ck"}) {
		t.Fatalf("running %v", got)
	}
	if err := e.Stop(context.Background(), "ck", 20*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// Stop returned: the result is already queued.
	r := next(t, e)
	if r.Reason != ReasonStopped || r.Machine != "m2" {
		t.Fatalf("got %+v, want stopped on m2", r)
	}
	// The trap handler ran and exited by itself (SIGKILL would give -1).
	if r.ExitCode != 0 {
		t.Errorf("exit %d, want 0 from the trap handler", r.ExitCode)
	}
	wantCk := filepath.Join(e.cfg.TasksDir, "ck", "checkpoint")
	if r.CheckpointDir != wantCk {
		t.Errorf("checkpoint dir %q, want %q", r.CheckpointDir, wantCk)
	}
	if st := readFile(t, filepath.Join(wantCk, "state")); !strings.HasPrefix(st, "count=") {
		t.Errorf("checkpoint %q", st)
	}
	if r.DoneMFlop <= 0 || r.DoneMFlop >= spec.SizeMFlop {
		t.Errorf("done %d MFlop, want an estimate strictly between 0 and the size", r.DoneMFlop)
	}
	if err := e.Stop(context.Background(), "ck", time.Second); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("second Stop: %v, want ErrUnknownTask", err)
	}

	// The next attempt of the same task finds the checkpoint where it left
	// it, in a fresh work directory.
	spec.Argv = []string{"sh", "-c", `cat "$CHECKPOINT_DIR/state"; echo "$COOPGRID_ATTEMPT"`}
	r = run(t, e, spec)
	if !r.OK() || r.Attempt != 2 {
		t.Fatalf("second attempt: %+v", r)
	}
	if got := readStream(t, r.StdoutPath); !strings.HasPrefix(got, "count=") || !strings.HasSuffix(got, "\n2\n") {
		t.Errorf("second attempt read %q", got)
	}
}

func TestProcessStopKillsAfterGrace(t *testing.T) {
	e := newProc(t, allowShell())
	spec := sh("stubborn", `trap '' TERM; echo started > started; while :; do sleep 0.05; done`)
	spec.CheckpointDir = filepath.Join(t.TempDir(), "given", "ck")
	if err := e.Start(context.Background(), "m1", spec); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(workDir(e, "stubborn"), "started"))
	if err := e.Stop(context.Background(), "stubborn", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r := next(t, e)
	if r.Reason != ReasonStopped || r.ExitCode != -1 {
		t.Fatalf("got %q exit %d, want stopped by SIGKILL", r.Reason, r.ExitCode)
	}
	if r.CheckpointDir != spec.CheckpointDir {
		t.Errorf("checkpoint dir %q, want the given %q", r.CheckpointDir, spec.CheckpointDir)
	}
	if fi, err := os.Stat(spec.CheckpointDir); err != nil || !fi.IsDir() {
		t.Errorf("given checkpoint dir not created: %v", err)
	}
}

func TestProcessPolicyExecutables(t *testing.T) {
	for _, c := range []struct {
		name   string
		pol    Policy
		argv0  string
		inputs map[string][]byte
		want   string
	}{
		{"deny by default", Policy{}, "/bin/sh", nil, ReasonNotAllowed},
		{"name allows path", Policy{Allow: []string{"sh"}}, "/bin/sh", nil, ReasonOK},
		{"path allows name", Policy{Allow: []string{"/bin/sh"}}, "sh", nil, ReasonOK},
		{"other executable", Policy{Allow: []string{"/bin/true"}}, "/bin/sh", nil, ReasonNotAllowed},
		{"unknown allowed name", Policy{Allow: []string{"no-such-tool"}}, "sh", nil, ReasonNotAllowed},
		{"shipped script needs allow_any", Policy{Allow: []string{"sh"}}, "./run.sh", map[string][]byte{"run.sh": []byte("#!/bin/sh\ntouch ran\n")}, ReasonNotAllowed},
		{"shipped script with allow_any", Policy{AllowAny: true}, "./run.sh", map[string][]byte{"run.sh": []byte("#!/bin/sh\ntouch ran\n")}, ReasonOK},
		{"allow_any", Policy{AllowAny: true}, "sh", nil, ReasonOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newProc(t, c.pol)
			argv := []string{c.argv0}
			if c.inputs == nil {
				argv = append(argv, "-c", "touch ran")
			}
			r := run(t, e, TaskSpec{ID: "t1", Argv: argv, Inputs: c.inputs})
			if r.Reason != c.want {
				t.Fatalf("got %q (%s), want %q", r.Reason, r.Detail, c.want)
			}
			_, err := os.Stat(filepath.Join(workDir(e, "t1"), "ran"))
			if c.want == ReasonOK && err != nil {
				t.Errorf("task did not run: %v", err)
			}
			if c.want == ReasonNotAllowed {
				if !strings.Contains(r.Detail, c.argv0) || !strings.Contains(r.Detail, "allow") {
					t.Errorf("detail %q should name the executable and the allow list", r.Detail)
				}
				// Refused before anything was created.
				if _, err := os.Stat(filepath.Join(e.cfg.TasksDir, "t1")); !os.IsNotExist(err) {
					t.Errorf("refused task left a directory: %v", err)
				}
				if r.ExitCode != -1 || r.EnergyMilliJ != 0 {
					t.Errorf("refused task: exit %d energy %d", r.ExitCode, r.EnergyMilliJ)
				}
			}
		})
	}
}

func TestProcessBadSpecs(t *testing.T) {
	e := newProc(t, allowShell())
	base := func() TaskSpec { return sh("bad", "touch ran") }
	for _, c := range []struct {
		name   string
		mutate func(*TaskSpec)
		want   string
		detail string
	}{
		{"absolute input", func(s *TaskSpec) { s.Inputs = map[string][]byte{"/etc/evil": nil} }, ReasonBadSpec, "absolute"},
		{"dotdot input", func(s *TaskSpec) { s.Inputs = map[string][]byte{"../evil": nil} }, ReasonBadSpec, "escapes"},
		{"nested dotdot input", func(s *TaskSpec) { s.Inputs = map[string][]byte{"a/../../evil": nil} }, ReasonBadSpec, "escapes"},
		{"dot input", func(s *TaskSpec) { s.Inputs = map[string][]byte{"a/..": nil} }, ReasonBadSpec, "work directory itself"},
		{"empty input name", func(s *TaskSpec) { s.Inputs = map[string][]byte{"": nil} }, ReasonBadSpec, "empty"},
		{"same file twice", func(s *TaskSpec) { s.Inputs = map[string][]byte{"a/b": nil, "a//b": nil} }, ReasonBadSpec, "same file"},
		{"file and dir", func(s *TaskSpec) { s.Inputs = map[string][]byte{"a": nil, "a/b": nil} }, ReasonBadSpec, "also the directory"},
		{"dotdot output", func(s *TaskSpec) { s.OutputPatterns = []string{"../*"} }, ReasonBadSpec, "escapes"},
		{"absolute output", func(s *TaskSpec) { s.OutputPatterns = []string{"/etc/*"} }, ReasonBadSpec, "absolute"},
		{"nested dotdot output", func(s *TaskSpec) { s.OutputPatterns = []string{"out/../../x"} }, ReasonBadSpec, "escapes"},
		{"bad glob", func(s *TaskSpec) { s.OutputPatterns = []string{"out/["} }, ReasonBadSpec, "syntax error"},
		{"reserved env", func(s *TaskSpec) { s.Env = map[string]string{"CHECKPOINT_DIR": "/tmp"} }, ReasonBadSpec, "reserved"},
		{"bad env name", func(s *TaskSpec) { s.Env = map[string]string{"A=B": "x"} }, ReasonBadSpec, "name"},
		{"bad id", func(s *TaskSpec) { s.ID = "../x" }, ReasonBadSpec, "task ID"},
		{"relative checkpoint dir", func(s *TaskSpec) { s.CheckpointDir = "ck" }, ReasonBadSpec, "checkpoint"},
		{"negative limit", func(s *TaskSpec) { s.WallClockLimit = -time.Second }, ReasonBadSpec, "negative"},
		{"done over size", func(s *TaskSpec) { s.SizeMFlop, s.DoneMFlop = 10, 11 }, ReasonBadSpec, "done"},
		{"empty argv", func(s *TaskSpec) { s.Argv = nil }, ReasonBadSpec, "argv"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := base()
			c.mutate(&s)
			r := run(t, e, s)
			if r.Reason != c.want || !strings.Contains(r.Detail, c.detail) {
				t.Fatalf("got %q %q, want %q ~%q", r.Reason, r.Detail, c.want, c.detail)
			}
			ents, _ := os.ReadDir(e.cfg.TasksDir)
			for _, ent := range ents {
				// The machines' end markers are the executor's own.
				if ent.Name() != supervise.MarkersDir {
					t.Errorf("bad spec left %s in the tasks directory", ent.Name())
				}
			}
		})
	}
}

func TestProcessInputTooLarge(t *testing.T) {
	pol := allowShell()
	pol.MaxInputBytes = 10
	e := newProc(t, pol)
	s := sh("big", "true")
	s.Inputs = map[string][]byte{"a": make([]byte, 6), "b": make([]byte, 5)}
	if r := run(t, e, s); r.Reason != ReasonInputTooLarge || !strings.Contains(r.Detail, "11 bytes") {
		t.Errorf("got %q %q", r.Reason, r.Detail)
	}
	s.Inputs = map[string][]byte{"a": make([]byte, 5), "b": make([]byte, 5)}
	if r := run(t, e, s); !r.OK() {
		t.Errorf("10 bytes under a 10-byte limit: %q %q", r.Reason, r.Detail)
	}
}

func TestProcessOutputsNeverLeaveWorkDir(t *testing.T) {
	e := newProc(t, allowShell())
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := sh("links", `
echo inside > inside.dat
ln -s inside.dat good.txt
ln -s `+outside+` evil.txt
ln -s ../../.. up
ln -s nowhere broken.txt
mkfifo pipe.txt
`)
	s.OutputPatterns = []string{"*.txt", "up"}
	r := run(t, e, s)
	if !r.OK() {
		t.Fatalf("%q %q", r.Reason, r.Detail)
	}
	if len(r.Outputs) != 0 {
		t.Errorf("outputs %v, want none: links are never followed, a FIFO is not a regular file", r.Outputs)
	}
	for _, s := range []string{"good.txt (symbolic link", "evil.txt (symbolic link", "broken.txt (symbolic link", "up (symbolic link"} {
		if !strings.Contains(r.Detail, s) {
			t.Errorf("detail %q does not report %q", r.Detail, s)
		}
	}
}

func TestProcessLimitsOnLogsAndOutputs(t *testing.T) {
	pol := allowShell()
	pol.MaxLogBytes = 1000
	pol.MaxOutputBytes = 100
	e := newProc(t, pol)

	r := run(t, e, sh("chatty", "head -c 100000 /dev/zero; echo done >&2"))
	if !r.OK() {
		t.Fatalf("%q %q: draining must let the writer finish", r.Reason, r.Detail)
	}
	if fi, err := os.Stat(r.StdoutPath); err != nil || fi.Size() != 1000 || !r.StdoutTruncated {
		t.Errorf("stdout: %v size %d truncated %v, want 1000 bytes and truncated", err, fi.Size(), r.StdoutTruncated)
	}
	if r.StderrTruncated || readStream(t, r.StderrPath) != "done\n" {
		t.Errorf("stderr truncated=%v", r.StderrTruncated)
	}

	s := sh("bulky", "head -c 60 /dev/zero > a.out; head -c 60 /dev/zero > b.out")
	s.OutputPatterns = []string{"*.out"}
	r = run(t, e, s)
	if r.Reason != ReasonOutputTooLarge || r.Outputs != nil || r.ExitCode != 0 {
		t.Errorf("got %q exit %d outputs %v, want output_too_large with none listed", r.Reason, r.ExitCode, r.Outputs)
	}
	s.ID, s.Argv = "fits", []string{"sh", "-c", "head -c 100 /dev/zero > a.out"}
	if r = run(t, e, s); !r.OK() || len(r.Outputs) != 1 {
		t.Errorf("100 bytes under a 100-byte limit: %q %v", r.Reason, r.Outputs)
	}
}

func TestProcessResourceLimits(t *testing.T) {
	pol := allowShell()
	pol.MaxCPUSeconds = 7
	pol.MaxAddressSpaceBytes = 1 << 30
	e := newProc(t, pol)
	// The limits are in place when the task's program starts.
	r := run(t, e, TaskSpec{ID: "limits", Argv: []string{"cat", "/proc/self/limits"}})
	if !r.OK() {
		t.Fatalf("%q %q", r.Reason, r.Detail)
	}
	limits := readStream(t, r.StdoutPath)
	for _, want := range [][]string{
		{"Max cpu time", "7", "8", "seconds"},
		{"Max address space", "1073741824", "1073741824", "bytes"},
	} {
		found := false
		for _, line := range strings.Split(limits, "\n") {
			if strings.HasPrefix(line, want[0]) && reflect.DeepEqual(strings.Fields(line[len(want[0]):]), want[1:]) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %q line in\n%s", strings.Join(want, " "), limits)
		}
	}
}

func TestProcessCPULimit(t *testing.T) {
	pol := allowShell()
	pol.MaxCPUSeconds = 1
	e := newProc(t, pol)
	s := sh("spin", "while :; do :; done")
	s.WallClockLimit = 30 * time.Second // a safety net, not the limit under test
	r := run(t, e, s)
	if r.Reason != ReasonCPULimit || !strings.Contains(r.Detail, "CPU-time limit 1s") {
		t.Fatalf("got %q %q, want cpu_limit", r.Reason, r.Detail)
	}
}

func TestProcessStartErrors(t *testing.T) {
	e := newProc(t, allowShell())
	ctx := context.Background()
	if err := e.Start(ctx, "nope", sh("a", "true")); !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("unknown machine: %v", err)
	}
	if err := e.Start(ctx, "m1", sh("long", "sleep 60")); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx, "m1", sh("other", "true")); !errors.Is(err, ErrMachineBusy) {
		t.Errorf("busy machine: %v", err)
	}
	if err := e.Start(ctx, "m2", sh("long", "true")); !errors.Is(err, ErrTaskRunning) {
		t.Errorf("same task twice: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.Start(cancelled, "m2", sh("c", "true")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if err := e.Stop(ctx, "ghost", 0); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("stop unknown: %v", err)
	}
	if err := e.Stop(ctx, "long", 0); err != nil {
		t.Fatal(err)
	}
	if r := next(t, e); r.ID != "long" || r.Reason != ReasonStopped {
		t.Errorf("got %s %s", r.ID, r.Reason)
	}
	// The machine is free again: no result came for the refused starts.
	r := run(t, e, sh("after", "true"))
	if !r.OK() {
		t.Errorf("after: %q", r.Reason)
	}
}

func TestProcessCloseStopsRunningTasks(t *testing.T) {
	e, err := NewProcessExecutor(ProcessConfig{
		TasksDir: t.TempDir(), Machines: testMachines, Policy: allowShell(), DisableRAPL: true, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, m := range []string{"m1", "m2"} {
		if err := e.Start(ctx, m, sh("on-"+m, "trap '' TERM; echo started > started; sleep 60")); err != nil {
			t.Fatal(err)
		}
		waitFile(t, filepath.Join(workDir(e, "on-"+m), "started"))
	}
	got := make(chan []Result)
	go func() {
		var rs []Result
		for r := range e.Results() {
			rs = append(rs, r)
		}
		got <- rs
	}()
	closeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := e.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	rs := <-got // the channel was closed
	if len(rs) != 2 || rs[0].Reason != ReasonStopped || rs[1].Reason != ReasonStopped || rs[0].ExitCode != -1 {
		t.Fatalf("results at close: %+v", rs)
	}
	if err := e.Start(ctx, "m1", sh("late", "true")); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

func TestNewProcessExecutorRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		cfg  ProcessConfig
		want string
	}{
		{"no dir", ProcessConfig{Machines: testMachines}, "tasks directory"},
		{"no machines", ProcessConfig{TasksDir: dir}, "no machines"},
		{"zero gflops", ProcessConfig{TasksDir: dir, Machines: []MachineConfig{{Name: "a", BusyWatts: 1}}}, "gflops"},
		{"dup machine", ProcessConfig{TasksDir: dir, Machines: []MachineConfig{testMachines[0], testMachines[0]}}, "twice"},
		{"relative allow", ProcessConfig{TasksDir: dir, Machines: testMachines, Policy: Policy{Allow: []string{"bin/sh"}}}, "allow"},
		{"relative path", ProcessConfig{TasksDir: dir, Machines: testMachines, Policy: Policy{Path: "/bin:bin"}}, "path"},
		{"root run_as", ProcessConfig{TasksDir: dir, Machines: testMachines, Policy: Policy{RunAs: "0:0"}}, "unprivileged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewProcessExecutor(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error about %s", err, c.want)
			}
		})
	}
}
