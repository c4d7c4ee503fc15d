package config

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestRunAsWithFreshDataDir: a data directory made by Init, a machines
// file with run_as, and a task that tries to read the peer's secrets and
// write its Raft directory. The task reaches its own work directory and
// nothing else (issue 16: run_as failed with Init's 0700 directory, and a
// task running as the peer read every key).
func TestRunAsWithFreshDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run_as needs the peer to run as root; executor.TestUnprotectedPolicyRefused covers the refusal")
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	machines := writeFile(t, t.TempDir(), "m.yaml", "machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\npolicy:\n  allow: [/bin/sh]\n  run_as: nobody\n")
	checkSnoopFails(t, machines, "m1")
}

// TestClusterExampleAsShipped: examples/machines/cluster.yaml, with the
// dedicated user examples/systemd creates (and .ci/run, the same way).
func TestClusterExampleAsShipped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run_as needs the peer to run as root; executor.TestUnprotectedPolicyRefused covers the refusal")
	}
	if _, err := user.Lookup("coopgrid-task"); err != nil {
		t.Skipf("no user coopgrid-task (examples/systemd/coopgrid-peer.service creates it: useradd --system coopgrid-task): %v", err)
	}
	checkSnoopFails(t, "../examples/machines/cluster.yaml", "node1")
}

// checkSnoopFails inits a data directory with the machines file, runs a
// snooping task on machine and checks it reached nothing of the peer's.
func checkSnoopFails(t *testing.T, machines, machine string) {
	t.Helper()
	ctx := context.Background()
	// The data directory's ancestors are the host's business (a real one
	// lives under /var/lib); t.TempDir makes them 0700.
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "data")
	if _, err := Init(ctx, InitOptions{DataDir: dir, Org: "uni-a", MachinesFile: machines, NewFederation: true, MeasureFor: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// What a running peer adds: its Raft directory.
	if err := os.Mkdir(filepath.Join(dir, RaftDir), 0o700); err != nil {
		t.Fatal(err)
	}
	mf, err := executor.LoadMachinesFile(filepath.Join(dir, MachinesFile))
	if err != nil {
		t.Fatal(err)
	}
	e, err := executor.NewProcessExecutor(executor.ProcessConfig{TasksDir: filepath.Join(dir, TasksDir), Machines: mf.Machines, Policy: mf.Policy, DisableRAPL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	script := `
for f in federation.key identity.key api.token config.yaml machines.yaml; do
  if cat "$D/$f" >/dev/null 2>&1; then echo "read $f"; fi
done
if ls "$D" >/dev/null 2>&1; then echo "listed the data directory"; fi
if touch "$D/raft/evil" 2>/dev/null; then echo "wrote raft/"; fi
if touch "$D/evil" 2>/dev/null; then echo "wrote the data directory"; fi
echo mine > out.txt
`
	err = e.Start(ctx, machine, executor.TaskSpec{ID: "snoop", Argv: []string{"sh", "-c", script},
		Env: map[string]string{"D": dir}, OutputPatterns: []string{"out.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	var r executor.Result
	select {
	case r = <-e.Results():
	case <-time.After(30 * time.Second):
		t.Fatal("no result")
	}
	if !r.OK() {
		t.Fatalf("result %+v", r)
	}
	if got, _ := os.ReadFile(r.StdoutPath); len(got) != 0 {
		t.Errorf("the task reached the peer's files:\n%s", got)
	}
	for _, f := range []string{"raft/evil", "evil"} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s exists", f)
		}
	}
	if _, ok := r.Outputs["out.txt"]; !ok {
		t.Errorf("outputs %v", r.Outputs)
	}
	// The secrets are intact and still the peer's alone.
	for _, f := range []string{p2p.SecretFile, p2p.IdentityFile, TokenFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi, err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("data directory mode %v, %v", fi.Mode().Perm(), err)
	}
	if !strings.HasPrefix(r.WorkDir, filepath.Join(dir, TasksDir)) {
		t.Errorf("work dir %s", r.WorkDir)
	}
}
