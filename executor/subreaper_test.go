package executor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

// A run without a cgroup: the supervisor adopts what the task orphans
// (it is a child subreaper, so that it can find what is left of a run
// among its own children rather than by a scan of /proc) and must reap
// them as they die. A task that keeps
// daemonizing short-lived processes leaves no zombie behind its
// supervisor.
func TestSupervisorReapsAdoptedOrphans(t *testing.T) {
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "tasks"), Policy: allowShell(), DisableRAPL: true, DisableCgroups: true})
	dir := t.TempDir()
	// Twenty double forks: each `( sleep 0.01 & )` orphans a sleep that
	// then dies; then the task says its parent (the executor's
	// supervisor, which adopts the orphans) and waits for the test.
	script := `i=0; while [ $i -lt 20 ]; do ( sleep 0.01 & ); i=$((i+1)); done; sleep 0.5; ` +
		`read -r _ _ _ ppid _ < /proc/$$/stat; echo $ppid > ` + filepath.Join(dir, "sup") + `; ` +
		`while [ ! -e ` + filepath.Join(dir, "go") + ` ]; do sleep 0.01; done`
	if err := e.Start(context.Background(), "m1", sh("orphans", script)); err != nil {
		t.Fatal(err)
	}
	sup := readPid(t, filepath.Join(dir, "sup"))
	// The orphans died half a second ago; give the reaper a moment more.
	var zombies []int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		zombies = zombiesOf(sup)
		if len(zombies) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := next(t, e); !r.OK() {
		t.Fatalf("%s %s", r.Reason, r.Detail)
	}
	if len(zombies) > 0 {
		t.Fatalf("zombies %v left unreaped by the supervisor %d", zombies, sup)
	}
}

// zombiesOf lists the zombie children of pid.
func zombiesOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, ent := range ents {
		p, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if st, err := supervise.ReadProcStat(p); err == nil && st.PPid == pid && st.State == 'Z' {
			out = append(out, p)
		}
	}
	return out
}

// The helper process of TestSupervisorEndsOrphansWhilePeerPaused: a peer
// stand-in without cgroups, which the test stops with SIGSTOP.
func TestOrphanHelperProcess(t *testing.T) {
	dir := os.Getenv("COOPGRID_ORPHAN_HELPER")
	if dir == "" {
		t.Skip("helper process only")
	}
	e, err := NewProcessExecutor(ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Machines: testMachines, Policy: allowShell(),
		DisableRAPL: true, DisableCgroups: true, Logger: quiet, Lease: time.Minute})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	// The task leaves a sleep in its process group and ends after the
	// test has stopped this peer.
	task := sh("orphan", `sleep 300 & echo $! > `+filepath.Join(dir, "orphan")+`; echo $$ > `+filepath.Join(dir, "leader")+
		`; while [ ! -e `+filepath.Join(dir, "end")+` ]; do sleep 0.01; done`)
	if err := e.Start(context.Background(), "m1", task); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	waitFile(t, filepath.Join(dir, "leader"))
	fmt.Println("started")
	time.Sleep(10 * time.Minute)
}

// TestSupervisorEndsOrphansWhilePeerPaused: without a cgroup, what a task
// leaves in its process group when it ends is killed by its supervisor,
// not only by the peer when it looks: the supervisor's shortcut (no child
// left, nothing to look for) must not skip a process it adopted.
func TestSupervisorEndsOrphansWhilePeerPaused(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COOPGRID_ORPHAN_HELPER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "started" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	leader := readPid(t, filepath.Join(dir, "leader"))
	orphan := readPid(t, filepath.Join(dir, "orphan"))
	defer syscall.Kill(orphan, syscall.SIGKILL)
	defer syscall.Kill(leader, syscall.SIGKILL)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "end"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(leader) || alive(orphan) {
		if time.Now().After(deadline) {
			t.Fatalf("leader alive %v, orphan alive %v, 10 s after the task ended with its peer stopped", alive(leader), alive(orphan))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
