package executor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"golang.org/x/sys/unix"
)

// quiet drops the executor's logs in tests.
var quiet = slog.New(slog.DiscardHandler)

// testMachines are two small machines: 2 GFLOPS at 50 W and 4 GFLOPS at
// 120 W.
var testMachines = []MachineConfig{
	{Name: "m1", GFLOPS: 2, BusyWatts: 50, IdleWatts: 10},
	{Name: "m2", GFLOPS: 4, BusyWatts: 120},
}

// allowShell is a policy for tests: sh and a few tools, generous limits.
func allowShell() Policy {
	return Policy{
		Allow:     []string{"sh", "true", "false", "sleep", "cat", "head", "id"},
		KillGrace: 200 * time.Millisecond,
		// Tasks run as the test's user: see newProcCfg.
		UnsafeRunAsPeerUser: true,
	}
}

// newProc makes a ProcessExecutor in a temporary directory with RAPL off
// (declared power), closed at the end of the test.
func newProc(t *testing.T, pol Policy) *ProcessExecutor {
	t.Helper()
	return newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "tasks"), Policy: pol, DisableRAPL: true})
}

func newProcCfg(t *testing.T, cfg ProcessConfig) *ProcessExecutor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.Machines == nil {
		cfg.Machines = testMachines
	}
	// The mechanics tests run tasks as the test's own user, which the
	// owner must opt into; the protection tests (protect_test.go) use
	// run_as or check the refusal.
	if cfg.Policy.RunAs == "" {
		cfg.Policy.UnsafeRunAsPeerUser = true
	}
	e, err := NewProcessExecutor(cfg)
	if err != nil {
		t.Fatalf("NewProcessExecutor: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// sh is a TaskSpec running a shell script.
func sh(id, script string) TaskSpec {
	return TaskSpec{ID: id, Argv: []string{"sh", "-c", script}}
}

// next waits for the next result, failing after a generous bound.
func next(t *testing.T, e Executor) Result {
	t.Helper()
	select {
	case r, ok := <-e.Results():
		if !ok {
			t.Fatal("results channel closed")
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no result within 30 s")
	}
	return Result{}
}

// run starts spec on m1 and waits for its result.
func run(t *testing.T, e Executor, spec TaskSpec) Result {
	t.Helper()
	if err := e.Start(context.Background(), "m1", spec); err != nil {
		t.Fatalf("Start %s: %v", spec.ID, err)
	}
	r := next(t, e)
	if r.ID != spec.ID {
		t.Fatalf("result for %q, want %q", r.ID, spec.ID)
	}
	return r
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// waitFile polls until p exists (the task signals progress through files
// in its work directory).
func waitFile(t *testing.T, p string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 && strings.HasSuffix(string(b), "\n") {
			return string(b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", p)
	return ""
}

// workDir is where the first attempt of id runs (the documented layout).
func workDir(e *ProcessExecutor, id string) string {
	return filepath.Join(e.cfg.TasksDir, id, "attempt-1", "work")
}

// alive reports whether pid is a live process: kill(pid, 0) succeeds and
// it is not a zombie waiting for init to reap it.
func alive(pid int) bool {
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return false
	}
	st, err := supervise.ReadProcStat(pid)
	if err != nil {
		return false
	}
	return st.State != 'Z' && st.State != 'X'
}

// gone waits (generously) until kill(pid, 0) fails with ESRCH: the process
// is dead and reaped.
func gone(pid int) bool {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// readStream is a captured stream: a stream the task never wrote has no
// file (the capture creates it with the first byte), and is empty.
func readStream(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(filepath.Dir(p)); derr != nil {
			t.Fatalf("read %s: its attempt directory is missing too: %v", p, derr)
		}
		return ""
	}
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}
