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
)

// leaseTask leaves a setsid child behind, writes both pids and waits.
func leaseTask(id, dir string) TaskSpec {
	return sh(id, `setsid sleep 300 & echo $! > `+filepath.Join(dir, "child")+`; echo $$ > `+filepath.Join(dir, "leader")+`; exec sleep 300`)
}

func readPid(t *testing.T, p string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, p)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestLeaseLapsesWithoutContact: a peer that loses contact with its
// federation stops renewing, and the run's supervisor kills the run whole
// within 2 × the lease of the last contact.
func TestLeaseLapsesWithoutContact(t *testing.T) {
	lastContact := time.Now()
	const lease = 600 * time.Millisecond
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "tasks"), Policy: allowShell(), DisableRAPL: true,
		Lease: lease, Contact: func() time.Time { return lastContact }})
	dir := t.TempDir()
	if err := e.Start(context.Background(), "m1", leaseTask("cutoff", dir)); err != nil {
		t.Fatal(err)
	}
	child := readPid(t, filepath.Join(dir, "child"))
	defer syscall.Kill(child, syscall.SIGKILL)
	r := next(t, e)
	took := r.End.Sub(lastContact)
	if r.Reason != ReasonStopped || !r.LeaseLapsed || !strings.Contains(r.Detail, "lease lapsed") {
		t.Fatalf("reason %s (%s)", r.Reason, r.Detail)
	}
	if took > 2*lease+500*time.Millisecond {
		t.Errorf("killed %v after the last contact, lease %v", took, lease)
	}
	if e.cgroups != nil && alive(child) {
		t.Errorf("the setsid child %d outlived the lease", child)
	}
}

// The helper process of TestStoppedPeerCannotKeepItsRun: a peer stand-in
// with a lease, which the test stops with SIGSTOP.
func TestLeaseHelperProcess(t *testing.T) {
	dir := os.Getenv("COOPGRID_LEASE_HELPER")
	if dir == "" {
		t.Skip("helper process only")
	}
	lease, task := 500*time.Millisecond, leaseTask("paused", dir)
	if os.Getenv("COOPGRID_LEASE_HELPER_SHORT") != "" {
		// A task that ends by itself well within a long lease. It says
		// when it runs: Start only queues it, and a helper stopped before
		// the run began would start it after the resume.
		lease, task = time.Minute, sh("short", "echo $$ > "+filepath.Join(dir, "short-running")+"; sleep 0.5")
	}
	e, err := NewProcessExecutor(ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Machines: testMachines, Policy: allowShell(),
		DisableRAPL: true, Logger: quiet, JournalPath: filepath.Join(dir, RunJournalFile), Lease: lease})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if err := e.Start(context.Background(), "m1", task); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if task.ID == "short" {
		waitFile(t, filepath.Join(dir, "short-running"))
	}
	fmt.Println("started")
	time.Sleep(10 * time.Minute)
}

// TestStoppedPeerCannotKeepItsRun: a SIGSTOPped peer cannot stop its
// tasks; its supervisors do, once the lease lapses — well before the
// leader may declare the machines lost and place the tasks again. The
// journal, read by the next boot, ends the run when the supervisor killed
// it (issue 16: a paused peer's tasks ran to completion twice).
func TestStoppedPeerCannotKeepItsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COOPGRID_LEASE_HELPER="+dir)
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
	child := readPid(t, filepath.Join(dir, "child"))
	defer syscall.Kill(child, syscall.SIGKILL)
	defer syscall.Kill(leader, syscall.SIGKILL)
	stopped := time.Now()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := stopped.Add(5 * time.Second)
	for alive(leader) || (alive(child) && hasCgroups()) {
		if time.Now().After(deadline) {
			t.Fatalf("the stopped peer's task still runs after %v (lease 500ms)", time.Since(stopped))
		}
		time.Sleep(20 * time.Millisecond)
	}
	dead := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The next boot ends the run when its supervisor killed it.
	newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Policy: allowShell(), DisableRAPL: true, JournalPath: filepath.Join(dir, RunJournalFile)})
	rs := runsOf(t, filepath.Join(dir, RunJournalFile), "paused")
	// The supervisor stamps the kill once the run's cgroup is empty, which
	// can be a few ms after this loop saw the task's processes gone: the
	// bound is when they were seen dead, give or take 100 ms (the next
	// boot, the time journaled without the stamp, is seconds later).
	if len(rs) != 1 || rs[0].Ending != JournalAbandoned || rs[0].EndUs < stopped.UnixMicro() || rs[0].EndUs > dead.Add(100*time.Millisecond).UnixMicro() {
		t.Fatalf("journal %+v: want abandoned between the stop (%d) and the time the task was seen dead (%d)", rs, stopped.UnixMicro(), dead.UnixMicro())
	}
}

// hasCgroups says whether this host gives the executor cgroups, without
// which a setsid child is out of reach.
func hasCgroups() bool {
	_, err := newCgroupMaker("/sys/fs/cgroup", DefaultCgroupParent)
	return err == nil
}

// TestRunEndingWhilePeerPausedIsJournaledWhenItEnded: a task that ends by
// itself while its peer is stopped is journaled as ended when its
// supervisor found it gone, not when the peer, resumed, noticed. The chaos
// journal check took the later time for an overlap with the run the
// leader had placed meanwhile (the smoke scenario, seed
// 1795636946510284646).
func TestRunEndingWhilePeerPausedIsJournaledWhenItEnded(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	if !hasCgroups() {
		t.Skip("no cgroups here: the supervisor stamps a run's end only when its cgroup shows it gone")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COOPGRID_LEASE_HELPER="+dir, "COOPGRID_LEASE_HELPER_SHORT=1")
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
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the task's 0.5 s end well inside the pause
	resumed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var rs []JournalRun
	for {
		rs = runsOf(t, filepath.Join(dir, RunJournalFile), "short")
		if len(rs) == 1 && !rs[0].Open() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal %+v: no end of the short run 10 s after the resume", rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if end := time.UnixMicro(rs[0].EndUs); !end.Before(resumed.Add(-time.Second)) {
		t.Fatalf("the run's end is journaled at %v, %v after the peer resumed at %v: want when it ended, during the pause",
			end.Format(time.StampMicro), end.Sub(resumed), resumed.Format(time.StampMicro))
	}
}
