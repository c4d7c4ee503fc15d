package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRetentionWithARealPeer: a real peer with retention.tasks of 1 s
// sweeps every second: the task directories of finished tasks go, their
// returned outputs (retention.outputs 0: kept) stay, and the directory of
// a task still running stays through many sweeps.
func TestRetentionWithARealPeer(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	cfg := map[string]string{"retention.tasks": "1s", "retention.interval": "1s"}
	for k, v := range fastConfig {
		cfg[k] = v
	}
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 2, 10, 100), config: cfg})
	a.start(t)
	quick := writeFile(t, root, "quick.yaml", `name: quick
template:
  count: 2
  argv: [/bin/sh, -c, 'echo ok > out.txt']
  size: 0.1
  wall_clock_limit: 1m
  outputs: [out.txt]
`)
	long := writeFile(t, root, "long.yaml", `name: long
tasks:
  - argv: [/bin/sh, -c, 'sleep 8; echo ok > out.txt']
    size: 0.1
    wall_clock_limit: 1m
    outputs: [out.txt]
`)
	running := a.submit(t, long)[0]
	ids := a.submit(t, quick)
	waitAllDone(t, a, ids)
	for _, id := range ids {
		waitFor(t, waitTimeout, "tasks/"+id+" removed", func() (bool, string) {
			_, err := os.Stat(filepath.Join(a.data, "tasks", id))
			return os.IsNotExist(err), "still there"
		})
		if _, err := os.Stat(filepath.Join(a.data, "outputs", id, "out.txt")); err != nil {
			t.Errorf("the output of %s went with its task directory: %v", id, err)
		}
	}
	// The long task runs through several sweeps.
	if d := a.task(t, running); d.State != "running" {
		t.Fatalf("the long task is %s, want running", d.State)
	}
	time.Sleep(3 * time.Second)
	if d := a.task(t, running); d.State == "running" {
		if _, err := os.Stat(filepath.Join(a.data, "tasks", running)); err != nil {
			t.Fatalf("the running task's directory was removed: %v", err)
		}
	}
	waitAllDone(t, a, []string{running})
	if _, err := os.Stat(filepath.Join(a.data, "outputs", running, "out.txt")); err != nil {
		t.Fatalf("the long task's output: %v", err)
	}
}
