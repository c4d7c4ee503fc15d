package transfer

import (
	"context"
	"errors"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/internal/safeopen"
)

// TestOutputOwnedByRunUser: outputs must be the task's own files, owned by
// the run's user (issue 16: "regular files owned as expected"). A real task
// writes a.txt and waits; meanwhile a file of another user appears in its
// work directory (as a set-user-ID helper giving one to root, or another
// user planting one, would leave it). The executor does not list it and
// says why in Detail; and a staged output replaced afterwards by a file of
// a user other than the peer is refused when it is read, with the reason. Run as the
// run_as user coopgrid-task (the stranger is root), and as the peer's own
// user with the opt-in (the stranger is coopgrid-task).
func TestOutputOwnedByRunUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: switching to the run_as user, and making files of another user")
	}
	u, err := user.Lookup("coopgrid-task")
	if err != nil {
		t.Skipf("needs the run_as user coopgrid-task: %v", err)
	}
	taskUID, _ := strconv.Atoi(u.Uid)
	taskGID, _ := strconv.Atoi(u.Gid)
	cases := []struct {
		name      string
		policy    executor.Policy
		runUID    int
		strangerU int
		strangerG int
	}{
		{"run_as", executor.Policy{Allow: []string{"sh"}, RunAs: "coopgrid-task"}, taskUID, 0, 0},
		{"peer user", executor.Policy{Allow: []string{"sh"}, UnsafeRunAsPeerUser: true}, 0, taskUID, taskGID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The run_as user must reach its directories: t.TempDir is 0700.
			dir := t.TempDir()
			for _, d := range []string{dir, filepath.Dir(dir)} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			tasks := filepath.Join(dir, "tasks")
			e, err := executor.NewProcessExecutor(executor.ProcessConfig{
				TasksDir: tasks, DisableRAPL: true,
				Machines: []executor.MachineConfig{{Name: "m1", GFLOPS: 1, BusyWatts: 1}},
				Policy:   c.policy,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			spec := executor.TaskSpec{ID: "own", OutputPatterns: []string{"*.txt"},
				Argv: []string{"sh", "-c", "echo mine > a.txt; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"}}
			if err := e.Start(context.Background(), "m1", spec); err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(tasks, "own", "attempt-1", "work")
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := os.Stat(filepath.Join(work, "a.txt")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the task never wrote a.txt")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// A file of another user appears while the task runs.
			stranger := func(name string) {
				t.Helper()
				p := filepath.Join(work, name)
				tmp := filepath.Join(work, ".tmp-"+name)
				if err := os.WriteFile(tmp, []byte("root:secret"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(tmp, c.strangerU, c.strangerG); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, p); err != nil {
					t.Fatal(err)
				}
			}
			stranger("planted.txt")
			if err := os.WriteFile(filepath.Join(work, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var r executor.Result
			select {
			case r = <-e.Results():
			case <-time.After(30 * time.Second):
				t.Fatal("no result")
			}
			if !r.OK() {
				t.Fatalf("result %q %q", r.Reason, r.Detail)
			}
			if _, listed := r.Outputs["planted.txt"]; listed || len(r.Outputs) != 1 {
				t.Fatalf("outputs %v: want a.txt only", r.Outputs)
			}
			want := "planted.txt (owned by uid " + strconv.Itoa(c.strangerU) + ", not the run's user uid " + strconv.Itoa(c.runUID)
			if !strings.Contains(r.Detail, want) {
				t.Errorf("detail %q does not say %q", r.Detail, want)
			}
			// The task's own output opens.
			f, err := openOutput(r.Outputs["a.txt"], "a.txt")
			if err != nil {
				t.Fatalf("a.txt: %v", err)
			}
			f.Close()
			// Replaced where it ships from (the peer's staging directory)
			// by a file of a user other than the peer: refused.
			staged := filepath.Dir(r.Outputs["a.txt"])
			tmp := filepath.Join(staged, ".tmp")
			if err := os.WriteFile(tmp, []byte("root:secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(tmp, taskUID, taskGID); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, r.Outputs["a.txt"]); err != nil {
				t.Fatal(err)
			}
			f, err = openOutput(r.Outputs["a.txt"], "a.txt")
			if err == nil {
				b, _ := io.ReadAll(f)
				f.Close()
				t.Fatalf("another user's a.txt opened, read %q", b)
			}
			if !errors.Is(err, safeopen.ErrOwner) || !strings.Contains(err.Error(), "a staged output is the peer's own copy") {
				t.Errorf("refused with %v", err)
			}
		})
	}
}
