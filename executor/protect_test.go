package executor

import (
	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestUnprotectedPolicyRefused: a policy under which tasks would run as
// the peer's own user is refused before anything is created, unless the
// owner opts in by name.
func TestUnprotectedPolicyRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tasks")
	_, err := NewProcessExecutor(ProcessConfig{TasksDir: dir, Machines: testMachines, Policy: Policy{Allow: []string{"sh"}}, DisableRAPL: true, Logger: quiet, Landlock: LandlockOff})
	if err == nil || !strings.Contains(err.Error(), "unsafe_run_as_peer_user") || !strings.Contains(err.Error(), "run_as") {
		t.Fatalf("got %v, want a refusal naming run_as and unsafe_run_as_peer_user", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Errorf("the refused executor created %s: %v", dir, serr)
	}
	for _, ok := range []Policy{
		{}, // allows nothing: nothing to protect
		{Allow: []string{"sh"}, UnsafeRunAsPeerUser: true}, // the owner's explicit choice
		{Allow: []string{"sh"}, RunAs: "nobody"},           // never the peer's user (fails per task if not root)
	} {
		e, err := NewProcessExecutor(ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "t"), Machines: testMachines, Policy: ok, DisableRAPL: true, Logger: quiet, Landlock: LandlockOff})
		if err != nil {
			t.Errorf("%+v: %v", ok, err)
			continue
		}
		_ = e.Close(t.Context())
	}
	// A sandbox protects a peer that is not root; root is too strong for
	// a sandbox alone.
	if err := checkProtection(Policy{Allow: []string{"sh"}}, true); (err == nil) != (os.Geteuid() != 0) {
		t.Errorf("sandboxed, uid %d: %v", os.Geteuid(), err)
	}
	mf, err := ParseMachinesFile("m.yaml", []byte("machines:\n  - {name: a, gflops: 1, busy_watts: 1}\npolicy:\n  allow: [sh]\n  unsafe_run_as_peer_user: true\n"))
	if err != nil || !mf.Policy.UnsafeRunAsPeerUser {
		t.Fatalf("machines file: %+v, %v", mf, err)
	}
}

// TestLoaderPreloadFromInputRefused: LD_PRELOAD of a library shipped as
// an input would run the job's code inside an allowed program, before
// anything else: the job is refused and nothing runs.
func TestLoaderPreloadFromInputRefused(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build the preloaded library (the refusal is also checked by TestLoaderEnvList)")
	}
	src := filepath.Join(t.TempDir(), "evil.c")
	lib := filepath.Join(filepath.Dir(src), "evil.so")
	code := `#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) { int fd = open("pwned", O_CREAT|O_WRONLY, 0644); if (fd >= 0) close(fd); }
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Skipf("gcc cannot build a shared library here: %v\n%s", err, out)
	}
	so, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	e := newProc(t, Policy{Allow: []string{"/bin/true"}})
	for i, env := range []map[string]string{
		{"LD_PRELOAD": "./evil.so"},
		{"LD_AUDIT": "./evil.so"},
		{"LD_LIBRARY_PATH": "."},
		{"GCONV_PATH": "."},
	} {
		s := TaskSpec{ID: "preload" + string(rune('a'+i)), Argv: []string{"/bin/true"}, Env: env, Inputs: map[string][]byte{"evil.so": so}}
		r := run(t, e, s)
		if r.Reason != ReasonBadSpec {
			t.Errorf("%v: reason %s (%s), want %s", env, r.Reason, r.Detail, ReasonBadSpec)
		}
		if r.WorkDir != "" {
			if _, err := os.Stat(filepath.Join(r.WorkDir, "pwned")); err == nil {
				t.Errorf("%v: the preloaded library ran", env)
			}
		}
	}
}

// TestLoaderEnvList: the refused families, and the supervisor's stripping.
func TestLoaderEnvList(t *testing.T) {
	for _, k := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH", "GLIBC_TUNABLES", "PYTHONSTARTUP", "PYTHONPATH", "PERL5OPT", "BASH_ENV", "ENV", "NODE_OPTIONS", "MALLOC_CHECK_", "BASH_FUNC_x%%"} {
		if !supervise.LoaderEnv(k) {
			t.Errorf("%s is not refused", k)
		}
		if te := validateSpec(&TaskSpec{ID: "a", Argv: []string{"true"}, Env: map[string]string{k: "x"}}, true); te == nil || te.reason != ReasonBadSpec {
			t.Errorf("%s: %v", k, te)
		}
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "OMP_NUM_THREADS", "TMPDIR", "LDFLAGS"} {
		if supervise.LoaderEnv(k) {
			t.Errorf("%s is refused", k)
		}
	}
	got := supervise.StripLoaderEnv([]string{"PATH=/bin", "LD_PRELOAD=x", "A=1", "BASH_ENV=y"})
	if want := []string{"PATH=/bin", "A=1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("stripped %v, want %v", got, want)
	}
}

// TestSuperviseReasonCodes: the supervisor reports the executor's codes.
func TestSuperviseReasonCodes(t *testing.T) {
	if supervise.ReasonNotAllowed != ReasonNotAllowed || supervise.ReasonBadSpec != ReasonBadSpec || supervise.ReasonStartFailed != ReasonStartFailed {
		t.Fatal("executor/internal/supervise's reason codes differ from the executor's")
	}
}
