package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTimerSlack: every thread of a `peer run` process, the runtime's
// sysmon included (it starts before main), sleeps with the raised timer
// slack (cmd/peer/timerslack.go), while a task it runs starts with the
// kernel's default; COOPGRID_TIMER_SLACK=0 leaves the peer's as started.
func TestTimerSlack(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 1, 10, 40), config: fastConfig})
	p := a.start(t)
	if got := threadSlacks(t, p.Cmd.Process.Pid); len(got) < 3 || !allEqual(got, 1_000_000) {
		t.Fatalf("peer run's threads' timer slack (ns): %v, want all 1000000", got)
	}
	// The re-executed process keeps its name (ps, top, pgrep).
	if comm := strings.TrimSpace(readFile(fmt.Sprintf("/proc/%d/comm", p.Cmd.Process.Pid))); comm != filepath.Base(peerBin) {
		t.Fatalf("the peer's process is named %q, want %q", comm, filepath.Base(peerBin))
	}
	job := writeFile(t, root, "slack.json", `{"version": 1, "name": "slack",
  "defaults": {"wall_clock_limit": "1m", "outputs": ["slack.txt"]},
  "tasks": [{"name": "slack", "argv": ["/bin/sh", "-c", "cat /proc/self/timerslack_ns > slack.txt"], "size": 0.5}]}`)
	ids := a.submit(t, job)
	waitAllDone(t, a, ids)
	got, err := os.ReadFile(filepath.Join(a.data, "outputs", ids[0], "slack.txt"))
	if err != nil || strings.TrimSpace(string(got)) != "50000" {
		t.Fatalf("the task's timer slack: %q (%v), want 50000", got, err)
	}
	if err := p.Stop(readyTimeout); err != nil {
		t.Fatal(err)
	}

	t.Setenv("COOPGRID_TIMER_SLACK", "0")
	p = a.start(t)
	if got := threadSlacks(t, p.Cmd.Process.Pid); len(got) == 0 || allEqual(got, 1_000_000) {
		t.Fatalf("with COOPGRID_TIMER_SLACK=0 the threads' timer slack is %v, want the test's own", got)
	}
}

// threadSlacks reads the timer slack of every thread of pid.
func threadSlacks(t *testing.T, pid int) []int {
	t.Helper()
	tids, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/" + tid.Name() + "/timerslack_ns")
		if err != nil {
			t.Skipf("timer slack not readable here: %v", err)
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func allEqual(xs []int, v int) bool {
	for _, x := range xs {
		if x != v {
			return false
		}
	}
	return true
}
