package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// supervisorPid is the executor's current run supervisor (0: none yet).
func supervisorPid(e *ProcessExecutor) int {
	e.supMu.Lock()
	defer e.supMu.Unlock()
	if e.sup == nil {
		return 0
	}
	return e.sup.Pid()
}

// One supervisor serves every run of an executor: two runs, one after
// the other and side by side, are children of the same process.
func TestOneSupervisorServesEveryRun(t *testing.T) {
	e := newProc(t, allowShell())
	dir := t.TempDir()
	parent := func(id string) string {
		return sh(id, `read -r _ _ _ pp _ < /proc/$$/stat; echo $pp > `+filepath.Join(dir, id)).Argv[2]
	}
	for _, id := range []string{"a", "b"} {
		if r := run(t, e, TaskSpec{ID: id, Argv: []string{"sh", "-c", parent(id)}}); !r.OK() {
			t.Fatalf("%s: %s %s", id, r.Reason, r.Detail)
		}
	}
	a, b := readPid(t, filepath.Join(dir, "a")), readPid(t, filepath.Join(dir, "b"))
	if sup := supervisorPid(e); a != sup || b != sup {
		t.Fatalf("tasks' parents %d and %d, supervisor %d: want one supervisor for both", a, b, sup)
	}
}

// TestSupervisorDeathKillsItsRuns: a supervisor that dies (a crash, or
// killed) takes its runs with it: each task dies (its death signal), the
// executor kills what is left of its group, journals its end and reports
// it as the machine's failure, not the task's; the next run gets a new
// supervisor.
func TestSupervisorDeathKillsItsRuns(t *testing.T) {
	e, path := newJournaled(t, allowShell(), JournalOptions{})
	dir := t.TempDir()
	ids := []string{"one", "two"}
	for i, id := range ids {
		spec := sh(id, `sleep 300 & echo $! > `+filepath.Join(dir, id+".child")+`; echo $$ > `+filepath.Join(dir, id)+`; wait`)
		if err := e.Start(context.Background(), testMachines[i].Name, spec); err != nil {
			t.Fatal(err)
		}
	}
	var pids []int
	for _, id := range ids {
		pids = append(pids, readPid(t, filepath.Join(dir, id)), readPid(t, filepath.Join(dir, id+".child")))
	}
	defer func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}()
	sup := supervisorPid(e)
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range ids {
		r := next(t, e)
		if r.Reason != ReasonStopped || !r.MachineFailed || !strings.Contains(r.Detail, "supervisor died") {
			t.Errorf("%s: %s %q machine failed %v, want stopped by the supervisor's death", r.ID, r.Reason, r.Detail, r.MachineFailed)
		}
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("process %d of a run outlived its supervisor's death", p)
		}
	}
	for _, id := range ids {
		if rs := runsOf(t, path, id); len(rs) != 1 || rs[0].Ending != JournalEnd || rs[0].Reason != ReasonStopped {
			t.Errorf("journal of %s: %+v, want one ended run", id, rs)
		}
	}
	if r := run(t, e, sh("after", "true")); !r.OK() {
		t.Fatalf("a run after the supervisor died: %s %s", r.Reason, r.Detail)
	}
	if now := supervisorPid(e); now == sup || now == 0 {
		t.Fatalf("supervisor %d after the death of %d: want a new one", now, sup)
	}
}

// TestLeaseLapseKillsEveryRun: the lease is the peer's, renewed once for
// every run: when the peer stops renewing it, every run dies, each
// reported as a lapsed lease, and a run held at its gate runs nothing.
func TestLeaseLapseKillsEveryRun(t *testing.T) {
	var contact atomicTime
	contact.set(time.Now())
	const lease = 600 * time.Millisecond
	cfg := ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "tasks"), Policy: allowShell(), DisableRAPL: true,
		Lease: lease, Contact: contact.get, JournalPath: filepath.Join(t.TempDir(), RunJournalFile)}
	e := newProcCfg(t, cfg)
	dir := t.TempDir()
	if err := e.Start(context.Background(), "m1", sh("running", `echo $$ > `+filepath.Join(dir, "running")+`; exec sleep 300`)); err != nil {
		t.Fatal(err)
	}
	held := sh("held", "echo ran > ran")
	gate := make(chan bool, 1)
	held.Gate = gate
	if err := e.Start(context.Background(), "m2", held); err != nil {
		t.Fatal(err)
	}
	leader := readPid(t, filepath.Join(dir, "running"))
	defer syscall.Kill(leader, syscall.SIGKILL)
	// The peer loses contact now: no renewal from here on.
	contact.set(time.Now().Add(-time.Hour))
	r := next(t, e)
	if r.ID != "running" || r.Reason != ReasonStopped || !r.LeaseLapsed {
		t.Fatalf("first result %s %s (%s) lapsed %v, want the running task killed for its lease", r.ID, r.Reason, r.Detail, r.LeaseLapsed)
	}
	if alive(leader) {
		t.Errorf("task %d alive after its lease lapsed", leader)
	}
	// The held run's lease lapsed too: opening its gate runs nothing.
	time.Sleep(lease)
	gate <- true
	r = next(t, e)
	if r.ID != "held" || r.Reason != ReasonStopped || !r.LeaseLapsed {
		t.Fatalf("second result %s %s (%s) lapsed %v, want the held run ended for its lease", r.ID, r.Reason, r.Detail, r.LeaseLapsed)
	}
	if _, err := readFileErr(filepath.Join(workDir(e, "held"), "ran")); err == nil {
		t.Fatal("the held task ran after its lease lapsed")
	}
	if rs := runsOf(t, cfg.JournalPath, "held"); len(rs) != 1 || !rs[0].NotRun {
		t.Fatalf("journal of the held run %+v: want NotRun", rs)
	}
}

// atomicTime is a time shared with the executor's renewal goroutine.
type atomicTime struct{ ns atomic.Int64 }

func (a *atomicTime) set(t time.Time) { a.ns.Store(t.UnixNano()) }
func (a *atomicTime) get() time.Time  { return time.Unix(0, a.ns.Load()) }

func readFileErr(p string) ([]byte, error) { return os.ReadFile(p) }
