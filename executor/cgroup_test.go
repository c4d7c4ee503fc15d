package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needCgroups skips, saying why, when this host gives the executor no
// cgroups; TestCgroupLimitsRefusedWithoutCgroups covers that case.
func needCgroups(t *testing.T, e *ProcessExecutor) {
	t.Helper()
	if e.cgroups == nil {
		t.Skip("this host gives the executor no cgroups (not root, or no writable hierarchy): the run cannot be confined; TestCgroupLimitsRefusedWithoutCgroups checks the refusal")
	}
}

// runCgroupFile is a file of the cgroup of task's run in progress, in
// controller's hierarchy (v1) or the unified one (v2); "" when the run has
// none (not started, or over).
func runCgroupFile(e *ProcessExecutor, task, controller, file string) string {
	run, ok := e.reg.get(task)
	if !ok {
		return ""
	}
	run.mu.Lock()
	cg := run.cg
	run.mu.Unlock()
	if cg == nil {
		return ""
	}
	for _, f := range cg.procsFiles() {
		if _, ok := e.cgroups.(*cgroupV2Maker); ok || filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(f)))) == controller {
			return filepath.Join(filepath.Dir(f), file)
		}
	}
	return ""
}

// TestStopKillsSetsidChild: a child that left the task's process group
// and session (setsid) dies with the run when it is cancelled (issue 16:
// it survived).
func TestStopKillsSetsidChild(t *testing.T) {
	e := newProc(t, allowShell())
	needCgroups(t, e)
	s := sh("escapee", `setsid sh -c 'echo $$ > esc.pid; exec sleep 300' & while [ ! -s esc.pid ]; do sleep 0.01; done; echo ready > ready; sleep 300`)
	if err := e.Start(context.Background(), "m1", s); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(workDir(e, "escapee"), "ready"))
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(workDir(e, "escapee"), "esc.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = killPid(pid) }()
	if err := e.Stop(context.Background(), "escapee", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r := next(t, e)
	if r.Reason != ReasonStopped {
		t.Fatalf("reason %s (%s)", r.Reason, r.Detail)
	}
	if alive(pid) {
		t.Fatalf("the setsid child %d survived the stop", pid)
	}
}

// TestForkBombHeldByPidsLimit: max_processes is the run's cgroup pids
// limit, which holds for a task running as root too (RLIMIT_NPROC does
// not); the 29 sleeps it leaves die with the run (issue 16: 300 processes
// were not limited).
func TestForkBombHeldByPidsLimit(t *testing.T) {
	pol := allowShell()
	pol.MaxProcesses = 30
	pol.MaxWallClock = 2 * time.Second
	e := newProc(t, pol)
	needCgroups(t, e)
	// A loop, not the exponential bomb: were the limit missing, it would
	// still be bounded by the wall clock. It counts the forks that
	// succeeded in a file: the shell gives up at the first one refused,
	// within milliseconds on a fast host, so sampling the cgroup's
	// pids.current while it runs can miss the whole run.
	if err := e.Start(context.Background(), "m1", sh("bomb", `n=0; while :; do sleep 30 & n=$((n+1)); echo $n > forks; done`)); err != nil {
		t.Fatal(err)
	}
	procs := "" // the run's pids cgroup.procs
	deadline := time.Now().Add(30 * time.Second)
	var r Result
	for done := false; !done; {
		select {
		case r = <-e.Results():
			done = true
		case <-time.After(5 * time.Millisecond):
			if f := runCgroupFile(e, "bomb", "pids", "cgroup.procs"); f != "" {
				procs = f
			}
			if time.Now().After(deadline) {
				t.Fatal("no result")
			}
		}
	}
	// The shell gives up when fork fails (exit 2), or the wall clock
	// ends it; either way the limit held and the run ended whole.
	if r.Reason != ReasonTimeout && r.Reason != ReasonExitNonzero {
		t.Errorf("reason %s (%s), want %s or %s", r.Reason, r.Detail, ReasonTimeout, ReasonExitNonzero)
	}
	// The shell and its sleeps are at most 30: at most 29 forks
	// succeeded, and the kernel refused the next (as root, only the
	// cgroup's pids limit refuses a fork: RLIMIT_NPROC spares root and is
	// not set with a cgroup).
	forks, err := strconv.Atoi(strings.TrimSpace(readFileQuiet(filepath.Join(workDir(e, "bomb"), "forks"))))
	if err != nil || forks < 1 || forks > 29 {
		t.Errorf("%d forks succeeded (%v), want 1..29", forks, err)
	}
	if got := readStream(t, r.StderrPath); !strings.Contains(got, "fork") {
		t.Errorf("stderr %q: no refused fork", got)
	}
	// Its cgroup is removed, or kept empty for the machine's next run.
	if procs == "" {
		t.Error("the run's pids cgroup was never seen")
	} else if b, err := os.ReadFile(procs); err == nil && len(b) > 0 {
		t.Errorf("processes left in the run's cgroup %s: %s", procs, b)
	}
}

// TestDiskFillerKilled: a run over max_disk_bytes is killed with
// disk_limit. The filler writes 64 MiB, then sleeps for longer than next
// waits for a result: only the disk limit's kill ends it in time. The
// kill's reason names a use over the limit, the file it wrote is there,
// and nothing of the run is left (its process group is empty), so the
// file stopped growing when the run was killed.
func TestDiskFillerKilled(t *testing.T) {
	const limit = 1 << 20
	pol := allowShell()
	pol.MaxDiskBytes = limit
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "tasks"), Policy: pol, DisableRAPL: true, DiskCheckInterval: 50 * time.Millisecond})
	r := run(t, e, sh("filler", `echo $$ > pid; i=0; while [ $i -lt 1024 ]; do head -c 65536 /dev/zero >> big; i=$((i+1)); done; exec sleep 600`))
	if r.Reason != ReasonDiskLimit || !strings.Contains(r.Detail, "limit is 1048576") {
		t.Fatalf("reason %s (%s), want %s", r.Reason, r.Detail, ReasonDiskLimit)
	}
	var used, max int64
	if _, err := fmt.Sscanf(r.Detail, "the run uses %d bytes of disk, the machine owner's limit is %d", &used, &max); err != nil || used <= limit || max != limit {
		t.Errorf("detail %q: want a use over the limit %d (%v)", r.Detail, limit, err)
	}
	if fi, err := os.Stat(filepath.Join(r.WorkDir, "big")); err != nil || fi.Size() == 0 {
		t.Errorf("the filler's file: %v", err)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(r.WorkDir, "pid"))))
	if err != nil {
		t.Fatal(err)
	}
	if groupAlive(pgid) {
		t.Errorf("processes of the killed run left in its group %d", pgid)
	}
}

// TestCgroupLimitsRefusedWithoutCgroups: memory and CPU limits only a
// cgroup enforces are refused, not silently dropped, where there is none.
func TestCgroupLimitsRefusedWithoutCgroups(t *testing.T) {
	for _, cfg := range []ProcessConfig{
		{DisableCgroups: true},
		{CgroupRoot: "/proc/no-such-cgroup-root"},
	} {
		for _, pol := range []Policy{{MaxMemoryBytes: 1 << 30}, {MaxCPUs: 1}} {
			pol.Allow, pol.UnsafeRunAsPeerUser = []string{"sh"}, true
			cfg.TasksDir, cfg.Machines, cfg.Policy, cfg.DisableRAPL, cfg.Logger = filepath.Join(t.TempDir(), "t"), testMachines, pol, true, quiet
			_, err := NewProcessExecutor(cfg)
			if err == nil || !strings.Contains(err.Error(), "need cgroups") {
				t.Errorf("%+v: %v", pol, err)
			}
		}
	}
	// Without such limits the executor runs, warning.
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "t"), Policy: allowShell(), DisableRAPL: true, CgroupRoot: "/proc/no-such-cgroup-root"})
	if e.cgroups != nil {
		t.Fatal("cgroups under a missing root")
	}
	if r := run(t, e, sh("plain", "true")); !r.OK() {
		t.Fatal(r)
	}
}

func readFileQuiet(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// TestDiscardRemovesAttemptDir: after keep_task_dirs the attempt
// directory and the outputs' staging directory go; the checkpoint directory stays; anything that is not an
// attempt directory of the executor is left alone.
func TestDiscardRemovesAttemptDir(t *testing.T) {
	pol := allowShell()
	pol.KeepTaskDirs = 50 * time.Millisecond
	e := newProc(t, pol)
	s := sh("gc", `echo x > out.txt; echo state > "$CHECKPOINT_DIR/s"`)
	s.Checkpointable = true
	s.OutputPatterns = []string{"out.txt"}
	r := run(t, e, s)
	if !r.OK() {
		t.Fatal(r)
	}
	attempt := filepath.Dir(r.WorkDir)
	staging := e.stagingDir("gc", r.Attempt)
	if got := r.Outputs["out.txt"]; got != filepath.Join(staging, "out.txt") {
		t.Fatalf("output staged at %q, want under %s", got, staging)
	}
	e.Discard(Result{ID: "gc", WorkDir: "/etc/x"})     // not ours
	e.Discard(Result{ID: "../gc", WorkDir: r.WorkDir}) // bad ID
	e.Discard(Result{ID: "other", WorkDir: r.WorkDir}) // another task's
	e.Discard(r)
	deadline := time.Now().Add(10 * time.Second)
	for _, dir := range []string{attempt, staging} {
		for {
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still there", dir)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := os.Stat(filepath.Join(r.CheckpointDir, "s")); err != nil {
		t.Errorf("checkpoint: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal(err)
	}
}

// TestRunCgroupRemovedWithNested: once a run is over its cgroup is gone in
// every hierarchy, with the cgroups the task made under its own; a process
// the task moved into one of those, out of its process group as well, is
// found there and killed with the run.
func TestRunCgroupRemovedWithNested(t *testing.T) {
	e := newProc(t, allowShell())
	v1, ok := e.cgroups.(*cgroupV1Maker)
	if !ok {
		t.Skip("needs cgroup v1 (this host's kind), run as root")
	}
	// The task (as root, like the test) makes a cgroup under its own in
	// every hierarchy, moves an escaped sleep into them, and ends.
	script := `setsid sleep 300 & pid=$!; echo $pid > sub.pid; `
	for _, c := range v1Controllers {
		script += `d=/sys/fs/cgroup/` + string(c) + `$(sed -n 's/^[0-9]*:\([a-z,]*,\)\{0,1\}` + string(c) + `\(,[a-z,]*\)\{0,1\}://p' /proc/self/cgroup); ` +
			`echo $d >> cg; mkdir $d/sub && echo $pid > $d/sub/cgroup.procs || exit 9; `
	}
	s := sh("nested", script)
	r := run(t, e, s)
	if !r.OK() {
		t.Fatalf("%s %s: %s", r.Reason, r.Detail, readFileQuiet(r.StderrPath))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(r.WorkDir, "sub.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	fz := strings.Fields(readFile(t, filepath.Join(r.WorkDir, "cg")))[0]
	if !strings.HasPrefix(fz, filepath.Join(v1.root, "freezer", DefaultCgroupParent)+"/") {
		t.Fatalf("the task's freezer cgroup %q is not the run's", fz)
	}
	if alive(pid) {
		t.Errorf("the process in the nested cgroup (%d) survived the run", pid)
	}
	name := filepath.Base(fz)
	for _, c := range v1Controllers {
		if _, err := os.Stat(filepath.Join(v1.root, string(c), DefaultCgroupParent, name)); !os.IsNotExist(err) {
			t.Errorf("%s cgroup %s left after the run: %v", c, name, err)
		}
	}
}
