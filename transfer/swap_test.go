package transfer

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
)

// TestOutputSwappedAfterListing: a real task's outputs are copied into
// the peer's staging directory (executor: the output copier), from which
// they ship. The task cannot reach it; should the staged files be swapped
// anyway for symbolic links — to a file, and through a directory — to a
// secret of the host, or for a hard link to it, opening them refuses
// each; the secret is never read (issue 16: 41 of 90 shipped files held
// /etc/shadow). The executor's tests swap the work directory itself
// (TestOutputSwapAfterListing).
func TestOutputSwappedAfterListing(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "shadow")
	if err := os.WriteFile(secret, []byte("root:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "b.txt"), []byte("root:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := executor.NewProcessExecutor(executor.ProcessConfig{
		TasksDir: filepath.Join(t.TempDir(), "tasks"), DisableRAPL: true,
		Machines: []executor.MachineConfig{{Name: "m1", GFLOPS: 1, BusyWatts: 1}},
		Policy:   executor.Policy{Allow: []string{"sh"}, UnsafeRunAsPeerUser: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	spec := executor.TaskSpec{ID: "swap", Argv: []string{"sh", "-c", "echo a > a.txt; mkdir -p d; echo b > d/b.txt"}, OutputPatterns: []string{"*.txt", "d"}}
	if err := e.Start(context.Background(), "m1", spec); err != nil {
		t.Fatal(err)
	}
	var r executor.Result
	select {
	case r = <-e.Results():
	case <-time.After(30 * time.Second):
		t.Fatal("no result")
	}
	if !r.OK() || len(r.Outputs) != 2 {
		t.Fatalf("result %+v", r)
	}
	// Before the swap both open.
	for rel, src := range r.Outputs {
		f, err := openOutput(src, rel)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		f.Close()
	}
	// The swap, where the outputs ship from.
	dir := filepath.Dir(r.Outputs["a.txt"])
	if filepath.Dir(r.Outputs[filepath.Join("d", "b.txt")]) != filepath.Join(dir, "d") {
		t.Fatalf("outputs %v not in one directory", r.Outputs)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(filepath.Join(dir, "a.txt")))
	must(os.Symlink(secret, filepath.Join(dir, "a.txt")))
	must(os.RemoveAll(filepath.Join(dir, "d")))
	must(os.Symlink(secretDir, filepath.Join(dir, "d")))
	for rel, src := range r.Outputs {
		f, err := openOutput(src, rel)
		if err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("%s opened after the swap, read %q", rel, b)
		}
	}
	// And a hard link to the secret in place of an output.
	must(os.Remove(filepath.Join(dir, "a.txt")))
	must(os.Link(secret, filepath.Join(dir, "a.txt")))
	if f, err := openOutput(r.Outputs["a.txt"], "a.txt"); err == nil {
		f.Close()
		t.Error("a hard link to another file opened")
	}
}
