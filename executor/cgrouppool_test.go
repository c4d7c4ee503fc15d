package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ownCgroup is the cgroup a task recorded (cat /proc/self/cgroup): its
// freezer cgroup on v1, its one cgroup on v2.
func ownCgroup(t *testing.T, file string) string {
	t.Helper()
	for _, l := range strings.Split(readFile(t, file), "\n") {
		if _, p, ok := strings.Cut(l, ":freezer:"); ok {
			return p
		}
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatalf("%s names no freezer or unified cgroup", file)
	return ""
}

// TestConcurrentRunsOfAMachineKeepTheirOwnCgroups: a machine with several
// CPUs runs several tasks at once, each in a cgroup no other live run
// holds; the end of one run (its cgroup killed whole, then kept for the
// machine's next run) leaves the other run and its processes alive, and a
// kept cgroup serves the next run only once its run is over. Session 8's
// per-machine cgroup failed this: the short run's end killed the long
// one's processes.
func TestConcurrentRunsOfAMachineKeepTheirOwnCgroups(t *testing.T) {
	dir := t.TempDir()
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Policy: allowShell(), DisableRAPL: true,
		Machines: []MachineConfig{{Name: "m1", GFLOPS: 2, BusyWatts: 50, CPUs: 2}}})
	needCgroups(t, e)
	gate := filepath.Join(dir, "go")
	long := sh("long", `sleep 300 & echo $! > child.pid; cat /proc/self/cgroup > cg; echo ready > ready; `+
		`while [ ! -e `+gate+` ]; do sleep 0.02; done; kill -0 $(cat child.pid) && echo alive > survived; kill $(cat child.pid)`)
	if err := e.Start(context.Background(), "m1", long); err != nil {
		t.Fatal(err)
	}
	lw := workDir(e, "long")
	waitFile(t, filepath.Join(lw, "ready"))
	child, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(lw, "child.pid"))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = killPid(child) }()
	longCg := ownCgroup(t, filepath.Join(lw, "cg"))

	var shortCg []string
	for _, id := range []string{"short1", "short2"} {
		r := run(t, e, sh(id, `cat /proc/self/cgroup > cg`))
		if r.Reason != ReasonOK {
			t.Fatalf("%s: %s %s", id, r.Reason, r.Detail)
		}
		cg := ownCgroup(t, filepath.Join(r.WorkDir, "cg"))
		if cg == longCg {
			t.Fatalf("%s ran in cgroup %s, which the live run long holds", id, cg)
		}
		shortCg = append(shortCg, cg)
		if !alive(child) {
			t.Fatalf("the end of %s killed long's process %d", id, child)
		}
		if !strings.Contains(strings.Join(e.Running(), " "), "long") {
			t.Fatalf("the end of %s ended long too", id)
		}
	}
	if shortCg[0] != shortCg[1] {
		t.Errorf("short2 ran in %s, want short1's cgroup %s kept for it", shortCg[1], shortCg[0])
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := next(t, e)
	if r.ID != "long" || r.Reason != ReasonOK {
		t.Fatalf("%s: %s %s", r.ID, r.Reason, r.Detail)
	}
	if readFileQuiet(filepath.Join(lw, "survived")) != "alive\n" {
		t.Errorf("long's process did not live through the other runs' ends")
	}
}

// TestCgroupKeptOnlyWhenVacant: a cgroup that still holds a process is
// not kept for another run (the pool checks it vacant), and the next run
// gets a cgroup of its own; a vacant one is kept and handed out again.
func TestCgroupKeptOnlyWhenVacant(t *testing.T) {
	e := newProc(t, allowShell())
	needCgroups(t, e)
	p := e.cgpool
	cg, err := p.take("m1")
	if err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	for _, f := range cg.procsFiles() {
		if err := os.WriteFile(f, []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if cg.vacant() {
		t.Fatal("a cgroup with a process in it reads vacant")
	}
	if err := p.give("m1", cg, true, false); err == nil {
		t.Error("give removed a cgroup with a process in it")
	}
	next, err := p.take("m1")
	if err != nil {
		t.Fatal(err)
	}
	if next.procsFiles()[0] == cg.procsFiles()[0] {
		t.Fatalf("the occupied cgroup %s was handed out again", cg.procsFiles()[0])
	}
	if err := p.give("m1", next, true, false); err != nil {
		t.Fatal(err)
	}
	again, err := p.take("m1")
	if err != nil {
		t.Fatal(err)
	}
	if again.procsFiles()[0] != next.procsFiles()[0] {
		t.Errorf("a vacant cgroup was not kept: got %s, want %s", again.procsFiles()[0], next.procsFiles()[0])
	}
	_ = p.give("m1", again, false, false)

	// A cgroup the peer's kill had to empty is not kept, whatever the
	// supervisor said before.
	acted, err := p.take("m1")
	if err != nil {
		t.Fatal(err)
	}
	victim := exec.Command("sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = victim.Wait() }()
	for _, f := range acted.procsFiles() {
		if err := os.WriteFile(f, []byte(strconv.Itoa(victim.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if acted.kill(5 * time.Second) {
		t.Fatal("the kill left the sleep alive")
	}
	if err := p.give("m1", acted, true, true); err != nil {
		t.Fatalf("give: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(acted.procsFiles()[0])); !os.IsNotExist(err) {
		t.Errorf("a cgroup the kill had to empty was kept (%v)", err)
	}
	// The occupied one is left to its process; once it is gone, remove it.
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	cg.kill(0)
	if err := cg.remove(); err != nil {
		t.Errorf("remove %s: %v", cg.procsFiles()[0], err)
	}
}
