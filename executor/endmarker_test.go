package executor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"golang.org/x/sys/unix"
)

// The tests of this file kill a real peer stand-in (the test binary
// re-executed as TestLeaseHelperProcess) with SIGKILL and boot a new
// executor on its journal: a run the killed daemon left open must be
// journaled as ended when it really ended — its supervisor's end marker —
// never later (the chaos journal check saw a run of a killed daemon
// journaled as ending at the next boot, 0.7 s after the task already ran
// elsewhere: issue 16), and never before it ended.

// startLeaseHelper starts the peer stand-in in dir (a long task under a
// 500 ms lease; short: a 0.5 s task under a 1 min lease) and returns once
// its task runs.
func startLeaseHelper(t *testing.T, dir string, short bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COOPGRID_LEASE_HELPER="+dir)
	if short {
		cmd.Env = append(cmd.Env, "COOPGRID_LEASE_HELPER_SHORT=1")
	}
	// It dies with the test, whatever the test does to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "started" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	return cmd
}

// kill9 kills the stand-in as a crash and reaps it.
func kill9(t *testing.T, cmd *exec.Cmd) time.Time {
	t.Helper()
	at := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return at
}

// rebootOn opens a new executor on dir's journal, as the killed daemon's
// next boot, and returns the run of task it journaled.
func rebootOn(t *testing.T, dir, task string) JournalRun {
	t.Helper()
	path := filepath.Join(dir, RunJournalFile)
	newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Policy: allowShell(), DisableRAPL: true, JournalPath: path})
	rs := runsOf(t, path, task)
	if len(rs) != 1 || rs[0].Ending != JournalAbandoned {
		t.Fatalf("journal after the boot: %+v, want one abandoned run of %s", rs, task)
	}
	return rs[0]
}

func usText(us int64) string { return time.UnixMicro(us).Format("15:04:05.000000") }

// TestKilledPeerRunEndsWhenItsSupervisorKilledIt: kill -9 of the daemon
// closes the runs' lease pipes; each supervisor kills its run at once and
// marks when it was gone; the next boot journals that time, not its own.
func TestKilledPeerRunEndsWhenItsSupervisorKilledIt(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := startLeaseHelper(t, dir, false)
	leader := readPid(t, filepath.Join(dir, "leader"))
	child := readPid(t, filepath.Join(dir, "child"))
	defer syscall.Kill(child, syscall.SIGKILL)
	defer syscall.Kill(leader, syscall.SIGKILL)
	killed := kill9(t, cmd)
	deadline := killed.Add(5 * time.Second)
	for alive(leader) || (alive(child) && hasCgroups()) {
		if time.Now().After(deadline) {
			t.Fatalf("the killed peer's task still runs %v after the kill", time.Since(killed))
		}
		time.Sleep(5 * time.Millisecond)
	}
	dead := time.Now()
	time.Sleep(time.Second) // the boot's own time is well after
	r := rebootOn(t, dir, "paused")
	// The marker is written once the run is gone, which this loop sees a
	// poll later at most: give or take 100 ms.
	if r.EndUs < killed.UnixMicro() || r.EndUs > dead.Add(100*time.Millisecond).UnixMicro() {
		t.Fatalf("run journaled as ending at %s: want between the kill (%s) and the moment its task was seen dead (%s)",
			usText(r.EndUs), killed.Format("15:04:05.000000"), dead.Format("15:04:05.000000"))
	}
}

// TestRunEndedBeforeItsPeerWasKilledEndsWhenItEnded: a run that ends by
// itself while its daemon cannot journal it (stopped here; in the chaos
// run, busy or slow to fsync) and then the daemon is killed: the next boot
// journals when the run ended. Without the supervisor's marker on this
// path (only a lease kill wrote one), the boot journaled its own time: the
// overlap chaos saw.
func TestRunEndedBeforeItsPeerWasKilledEndsWhenItEnded(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := startLeaseHelper(t, dir, true)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The task ends 0.5 s after it started, well inside the pause; its
	// lease (a minute) does not lapse.
	time.Sleep(2 * time.Second)
	killed := kill9(t, cmd)
	r := rebootOn(t, dir, "short")
	if r.EndUs < r.StartUs || r.EndUs >= killed.UnixMicro() {
		t.Fatalf("run [%s, %s] journaled as ending after its peer was killed (%s); it ended during the peer's stop, from %s",
			usText(r.StartUs), usText(r.EndUs), killed.Format("15:04:05.000000"), stopped.Format("15:04:05.000000"))
	}
}

// TestBootWaitsForASupervisorStillAlive: a supervisor that has not yet
// ended its run when the daemon boots again (stopped here; in general
// slow) holds its end marker's lock; the boot waits for it rather than
// journal its own time while the task still runs.
func TestBootWaitsForASupervisorStillAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := startLeaseHelper(t, dir, false)
	leader := readPid(t, filepath.Join(dir, "leader"))
	child := readPid(t, filepath.Join(dir, "child"))
	defer syscall.Kill(child, syscall.SIGKILL)
	defer syscall.Kill(leader, syscall.SIGKILL)
	path := filepath.Join(dir, RunJournalFile)
	rs := runsOf(t, path, "paused")
	if len(rs) != 1 || !rs[0].Open() || rs[0].PID <= 0 {
		t.Fatalf("journal before the kill: %+v", rs)
	}
	// The journal holds the run's process group, its task's pid; the
	// task's parent is the executor's supervisor.
	st, err := supervise.ReadProcStat(rs[0].PID)
	if err != nil {
		t.Fatal(err)
	}
	supervisor := st.PPid
	// Not SIGSTOP: a stopped process in a group its parent's death
	// orphans gets SIGHUP and SIGCONT from the kernel. A ptrace stop of
	// every thread holds it without that.
	runtime.LockOSThread() // ptrace requests come from the tracer's thread
	defer runtime.UnlockOSThread()
	resume := holdThreads(t, supervisor)
	defer resume()
	defer syscall.Kill(supervisor, syscall.SIGKILL)
	kill9(t, cmd)
	booted := make(chan error, 1)
	go func() {
		e, err := NewProcessExecutor(ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Machines: testMachines,
			Policy: allowShell(), DisableRAPL: true, Logger: quiet, JournalPath: path})
		if err == nil {
			_ = e.Close(context.Background())
		}
		booted <- err
	}()
	// The supervisor cannot act: the task runs on, and the boot must not
	// conclude meanwhile (it would journal its own time, before the end).
	time.Sleep(time.Second)
	select {
	case err := <-booted:
		t.Fatalf("the boot concluded (%v) while the run's supervisor was stopped and its task alive (%v)", err, alive(leader))
	default:
	}
	if !alive(leader) {
		t.Fatal("the task died while its supervisor was stopped: the test proves nothing")
	}
	resumed := time.Now()
	resume()
	if err := <-booted; err != nil {
		t.Fatal(err)
	}
	if alive(leader) {
		t.Fatal("the task outlived its resumed supervisor")
	}
	rs = runsOf(t, path, "paused")
	if len(rs) != 1 || rs[0].Ending != JournalAbandoned || rs[0].EndUs < resumed.UnixMicro() {
		t.Fatalf("journal after the boot: %+v; the task ran until its supervisor resumed at %s", rs, resumed.Format("15:04:05.000000"))
	}
}

// holdThreads stops every thread of pid in a ptrace stop (the caller's
// goroutine locked to its thread) and returns what lets them go, once.
func holdThreads(t *testing.T, pid int) (resume func()) {
	t.Helper()
	held := map[int]bool{}
	for again := true; again; {
		again = false
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			tid, err := strconv.Atoi(ent.Name())
			if err != nil || held[tid] {
				continue
			}
			if err := unix.PtraceSeize(tid); err != nil {
				t.Fatalf("ptrace seize %d: %v", tid, err)
			}
			if err := unix.PtraceInterrupt(tid); err != nil {
				t.Fatalf("ptrace interrupt %d: %v", tid, err)
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
				t.Fatalf("thread %d not stopped: %v %#x", tid, err, uint32(ws))
			}
			held[tid], again = true, true // a thread may have started meanwhile
		}
	}
	done := false
	return func() {
		if done {
			return
		}
		done = true
		for tid := range held {
			_ = unix.PtraceDetach(tid)
		}
	}
}
