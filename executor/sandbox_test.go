package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

// TestSandboxHidesDataDir: a task that runs as the peer's own user in the
// Landlock sandbox (what a peer that is not root gets) reads none of the
// peer's files, writes nothing in its data directory, cannot signal the
// peer, and still works in its own directories. Forced here, since the
// test may run as root, whom Landlock binds as well.
func TestSandboxHidesDataDir(t *testing.T) {
	if supervise.LandlockABI() < 1 {
		t.Skip("this kernel has no Landlock: a peer that is not root refuses to run tasks without run_as (TestUnprotectedPolicyRefused)")
	}
	data := t.TempDir()
	for _, f := range []string{"federation.key", "identity.key", "api.token"} {
		if err := os.WriteFile(filepath.Join(data, f), []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(data, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(data, "tasks"), Policy: allowShell(), DisableRAPL: true, Landlock: LandlockAlways})
	s := sh("boxed", `
D=`+data+`
for f in federation.key identity.key api.token; do
  if cat "$D/$f" >/dev/null 2>&1; then echo "read $f"; fi
done
if touch "$D/raft/evil" 2>/dev/null; then echo "wrote raft/"; fi
if touch "$D/evil" 2>/dev/null; then echo "wrote the data directory"; fi
if kill -0 `+strconv.Itoa(os.Getpid())+` 2>/dev/null; then echo "signalled the peer"; fi
echo mine > out.txt
echo state > "$CHECKPOINT_DIR/s"
cat /etc/hostname >/dev/null || echo "cannot read the system"
`)
	s.OutputPatterns = []string{"out.txt"}
	s.Checkpointable = true
	r := run(t, e, s)
	if !r.OK() {
		t.Fatalf("%s: %s\n%s", r.Reason, r.Detail, readStream(t, r.StderrPath))
	}
	if out := strings.TrimSpace(readStream(t, r.StdoutPath)); out != "" {
		t.Errorf("the sandboxed task reached the peer:\n%s", out)
	}
	for _, f := range []string{"raft/evil", "evil"} {
		if _, err := os.Lstat(filepath.Join(data, f)); err == nil {
			t.Errorf("%s exists", f)
		}
	}
	if _, ok := r.Outputs["out.txt"]; !ok {
		t.Errorf("outputs %v", r.Outputs)
	}
	if _, err := os.Stat(filepath.Join(r.CheckpointDir, "s")); err != nil {
		t.Errorf("checkpoint: %v", err)
	}
}
