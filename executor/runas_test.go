package executor

import (
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// nobody returns the unprivileged test user, skipping if there is none.
func nobody(t *testing.T) (uid, gid uint32) {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	a, _ := strconv.ParseUint(u.Uid, 10, 32)
	b, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(a), uint32(b)
}

// searchableTempDir is a t.TempDir whose ancestors another user can
// traverse (t.TempDir makes them 0700).
func searchableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunAsUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root; TestRunAsNeedsRoot covers the other case")
	}
	uid, gid := nobody(t)
	dir := searchableTempDir(t)
	e := newProcCfg(t, ProcessConfig{
		TasksDir:    filepath.Join(dir, "tasks"),
		Policy:      Policy{Allow: []string{"sh"}, RunAs: "nobody"},
		DisableRAPL: true,
	})
	s := sh("who", `
id -u > uid.txt
id -G > groups.txt
cat in/data > copy.txt
echo saved > "$CHECKPOINT_DIR/state"
`)
	s.Inputs = map[string][]byte{"in/data": []byte("input\n")}
	s.OutputPatterns = []string{"*.txt"}
	s.Checkpointable = true
	r := run(t, e, s)
	if !r.OK() {
		t.Fatalf("%q %q (stderr %q)", r.Reason, r.Detail, readStream(t, r.StderrPath))
	}
	if got := strings.TrimSpace(readFile(t, r.Outputs["uid.txt"])); got != strconv.Itoa(int(uid)) {
		t.Errorf("ran as uid %s, want %d", got, uid)
	}
	// Root's supplementary groups are dropped: only the user's group.
	if got := strings.TrimSpace(readFile(t, r.Outputs["groups.txt"])); got != strconv.Itoa(int(gid)) {
		t.Errorf("groups %q, want only %d", got, gid)
	}
	if got := readFile(t, r.Outputs["copy.txt"]); got != "input\n" {
		t.Errorf("input read as %q", got)
	}
	if got := readFile(t, filepath.Join(r.CheckpointDir, "state")); got != "saved\n" {
		t.Errorf("checkpoint %q", got)
	}
}

func TestRunAsUnreachableWorkDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	nobody(t)
	// t.TempDir's ancestors are 0700: the run-as user cannot reach the
	// work directory, and the failure says which directory is in the way.
	e := newProcCfg(t, ProcessConfig{
		TasksDir:    filepath.Join(t.TempDir(), "tasks"),
		Policy:      Policy{Allow: []string{"sh"}, RunAs: "nobody"},
		DisableRAPL: true,
	})
	r := run(t, e, sh("blocked", "touch ran"))
	if r.Reason != ReasonStartFailed || !strings.Contains(r.Detail, "not searchable by uid") {
		t.Fatalf("got %q %q", r.Reason, r.Detail)
	}
}

// childEnv marks the copy of this test binary that runs unprivileged.
const childEnv = "COOPGRID_EXECUTOR_TEST_UNPRIVILEGED"

// TestRunAsNeedsRoot checks that a policy with run_as fails every task with
// a clear reason when the peer is not root. Run as root, it re-runs itself
// as user nobody, so the non-root path is exercised for real either way.
func TestRunAsNeedsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		if os.Getenv(childEnv) != "" {
			t.Fatal("the unprivileged child runs as root")
		}
		rerunAsNobody(t)
		return
	}
	e := newProc(t, Policy{Allow: []string{"sh"}, RunAs: "nobody"})
	r := run(t, e, sh("x", "touch ran"))
	if r.Reason != ReasonRunAsUnavailable || !strings.Contains(r.Detail, "needs the peer to run as root") {
		t.Fatalf("got %q %q, want run_as_unavailable", r.Reason, r.Detail)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.TasksDir, "x")); !os.IsNotExist(err) {
		t.Errorf("refused task left a directory: %v", err)
	}
}

func rerunAsNobody(t *testing.T) {
	uid, gid := nobody(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := searchableTempDir(t)
	bin := filepath.Join(dir, "executor.test")
	copyFile(t, self, bin, 0o755)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestRunAsNeedsRoot$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = []string{"PATH=" + DefaultPath, "TMPDIR=" + tmp, childEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRunAsNeedsRoot") {
		t.Fatalf("unprivileged run: %v\n%s", err, out)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
