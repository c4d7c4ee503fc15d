package executor

import (
	"bufio"
	"context"
	"errors"
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

// newJournaled is a process executor with a run journal in a temporary
// directory; it returns the journal's path.
func newJournaled(t *testing.T, pol Policy, opt JournalOptions) (*ProcessExecutor, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, RunJournalFile)
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Policy: pol, DisableRAPL: true, JournalPath: path, Journal: opt})
	return e, path
}

func readJournal(t *testing.T, path string) []JournalRecord {
	t.Helper()
	recs, err := ReadRunJournal(path)
	if err != nil {
		t.Fatalf("ReadRunJournal: %v", err)
	}
	return recs
}

// runsOf are the journal's runs of task.
func runsOf(t *testing.T, path, task string) []JournalRun {
	t.Helper()
	var out []JournalRun
	for _, r := range JournalRuns(readJournal(t, path)) {
		if r.Task == task {
			out = append(out, r)
		}
	}
	return out
}

// Every kind of run leaves the records the documentation promises: the
// start (with the pid the task itself sees) is durable when Start returns,
// the end carries the result's reason and exit code, and the times are
// ordered start ≤ leader reaped ≤ group gone.
func TestJournalRecordsEveryRun(t *testing.T) {
	for _, c := range []struct {
		name       string
		argv       []string
		stop       bool // Stop it once it has written its pid
		wantReason string
		wantExit   int
		process    bool
	}{
		{"ok", []string{"sh", "-c", pgidSh + " > pid"}, false, ReasonOK, 0, true},
		{"exit3", []string{"sh", "-c", pgidSh + " > pid; exit 3"}, false, ReasonExitNonzero, 3, true},
		{"stopped", []string{"sh", "-c", pgidSh + " > pid; exec sleep 60"}, true, ReasonStopped, -1, true},
		{"not-allowed", []string{"/usr/bin/env"}, false, ReasonNotAllowed, -1, false},
		{"bad-spec", []string{"sh", "-c", "true"}, false, ReasonBadSpec, -1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, path := newJournaled(t, allowShell(), JournalOptions{})
			spec := TaskSpec{ID: c.name, Argv: c.argv}
			if c.wantReason == ReasonBadSpec {
				spec.OutputPatterns = []string{"../escape"}
			}
			before := time.Now().UnixMicro()
			if err := e.Start(context.Background(), "m1", spec); err != nil {
				t.Fatal(err)
			}
			// Durable before Start returned: read at once, no waiting.
			runs := runsOf(t, path, c.name)
			if len(runs) != 1 {
				t.Fatalf("right after Start the journal holds %d runs of %s, want 1: %+v", len(runs), c.name, readJournal(t, path))
			}
			if runs[0].Process != c.process || runs[0].StartUs < before || runs[0].Machine != "m1" {
				t.Fatalf("run right after Start: %+v (process want %v, start ≥ %d)", runs[0], c.process, before)
			}
			pid := 0
			if c.process {
				pid = runs[0].PID
				got := strings.TrimSpace(waitFile(t, filepath.Join(workDir(e, c.name), "pid")))
				if got != strconv.Itoa(pid) {
					t.Fatalf("the task's process group is %s, the journal's pid %d", got, pid)
				}
			}
			if c.stop {
				if err := e.Stop(context.Background(), c.name, 0); err != nil {
					t.Fatal(err)
				}
			}
			res := next(t, e)
			runs = runsOf(t, path, c.name)
			if len(runs) != 1 {
				t.Fatalf("%d runs, want 1", len(runs))
			}
			r := runs[0]
			wantEnding := JournalEnd
			if !c.process {
				wantEnding = JournalNoProcess
			}
			if r.Ending != wantEnding || r.Reason != res.Reason || r.Reason != c.wantReason {
				t.Errorf("journal %+v, result %q, want ending %s reason %s", r, res.Reason, wantEnding, c.wantReason)
			}
			if c.process {
				if r.ExitCode != c.wantExit || r.ExitCode != res.ExitCode || r.Attempt != res.Attempt || r.Attempt != 1 {
					t.Errorf("journal exit %d attempt %d, result %d %d, want exit %d", r.ExitCode, r.Attempt, res.ExitCode, res.Attempt, c.wantExit)
				}
				if !(r.StartUs <= r.ExitUs && r.ExitUs <= r.EndUs) || r.StartUs != res.Start.UnixMicro() || r.ExitUs != res.End.UnixMicro() {
					t.Errorf("times start %d exit %d gone %d; result %d..%d", r.StartUs, r.ExitUs, r.EndUs, res.Start.UnixMicro(), res.End.UnixMicro())
				}
				if alive(pid) {
					t.Errorf("pid %d alive after its end was journaled", pid)
				}
			}
		})
	}
}

// The end record is written only once nothing of the group is alive: a
// watcher that sees the record appear finds the task's grandchild (which
// ignores SIGTERM) already dead.
func TestJournalEndAfterGroupIsGone(t *testing.T) {
	e, path := newJournaled(t, allowShell(), JournalOptions{})
	spec := sh("family", `sh -c 'trap "" TERM; echo $$ > child; while :; do sleep 0.05; done' &
while [ ! -s child ]; do sleep 0.01; done; echo started > started; wait`)
	if err := e.Start(context.Background(), "m1", spec); err != nil {
		t.Fatal(err)
	}
	wd := workDir(e, "family")
	waitFile(t, filepath.Join(wd, "started"))
	child, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(wd, "child"))))
	if err != nil || !alive(child) {
		t.Fatalf("child pid %d (%v) not alive", child, err)
	}
	seen := make(chan bool, 1)
	go func() {
		for {
			for _, r := range JournalRuns(mustRead(path)) {
				if r.Task == "family" && r.Ending == JournalEnd {
					seen <- alive(child)
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := e.Stop(context.Background(), "family", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case stillAlive := <-seen:
		if stillAlive {
			t.Fatalf("grandchild %d alive when the end was journaled", child)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no end record")
	}
	if r := next(t, e); r.Reason != ReasonStopped {
		t.Errorf("result %q, want stopped", r.Reason)
	}
}

func mustRead(path string) []JournalRecord {
	recs, _ := ReadRunJournal(path)
	return recs
}

// A start that cannot be journaled does not run: Start says ErrJournal,
// the task's code never executes, no result comes, the machine is free.
func TestJournalWriteFailureRunsNothing(t *testing.T) {
	e, path := newJournaled(t, allowShell(), JournalOptions{})
	// Replace the journal's file by a read-only handle: every write fails
	// (EBADF), as on a disk gone read-only.
	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e.journal.mu.Lock()
	good := e.journal.f
	e.journal.f = ro
	e.journal.mu.Unlock()
	marker := filepath.Join(t.TempDir(), "ran")
	err = e.Start(context.Background(), "m1", sh("doomed", "touch "+marker))
	if !errors.Is(err, ErrJournal) {
		t.Fatalf("Start: %v, want ErrJournal", err)
	}
	// A refused spec cannot be journaled either.
	if err := e.Start(context.Background(), "m2", TaskSpec{ID: "refused", Argv: []string{"/usr/bin/env"}}); !errors.Is(err, ErrJournal) {
		t.Fatalf("Start of a refused spec: %v, want ErrJournal", err)
	}
	e.journal.mu.Lock()
	e.journal.f = good
	e.journal.mu.Unlock()
	ro.Close()
	// The machine is free again (once the refused run's goroutine has
	// released it: Start returned before) and the next run is journaled;
	// only its result comes.
	for deadline := time.Now().Add(20 * time.Second); len(e.Running()) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("machines still reserved: %v", e.Running())
		}
	}
	r := run(t, e, sh("after", "true"))
	if !r.OK() {
		t.Fatalf("after: %+v", r)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unjournaled task ran: %v", err)
	}
	if n := len(runsOf(t, path, "doomed")); n != 0 {
		t.Errorf("%d runs of the unjournaled task", n)
	}
	if rs := runsOf(t, path, "after"); len(rs) != 1 || rs[0].Ending != JournalEnd {
		t.Errorf("after: %+v", rs)
	}
}

// Rotation keeps Keep generations, carries the start of a run still open
// into the new file, and the reader sees each run once.
func TestJournalRotation(t *testing.T) {
	e, path := newJournaled(t, allowShell(), JournalOptions{MaxBytes: 700, Keep: 2})
	long := sh("long", "sleep 60")
	if err := e.Start(context.Background(), "m2", long); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		if r := run(t, e, sh(fmt.Sprintf("short-%d", i), "true")); !r.OK() {
			t.Fatalf("short-%d: %+v", i, r)
		}
	}
	for _, g := range []string{path, path + ".1", path + ".2"} {
		if _, err := os.Stat(g); err != nil {
			t.Errorf("generation %s: %v", g, err)
		}
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a third old generation exists (keep 2): %v", err)
	}
	// The newest file alone shows the open run.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	newest, err := readJournalFile(bufio.NewReader(f), path)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	carried := false
	for _, r := range newest {
		carried = carried || (r.Event == JournalStart && r.Task == "long" && r.Carried)
	}
	if !carried {
		t.Errorf("the newest file does not carry the open run's start: %+v", newest)
	}
	if err := e.Stop(context.Background(), "long", 0); err != nil {
		t.Fatal(err)
	}
	next(t, e)
	rs := runsOf(t, path, "long")
	if len(rs) != 1 || !rs[0].Process || rs[0].StartUs == 0 || rs[0].Ending != JournalEnd || rs[0].Reason != ReasonStopped {
		t.Errorf("long run: %+v", rs)
	}
	// Run numbers are unique across the generations read.
	seen := map[uint64]bool{}
	for _, r := range JournalRuns(readJournal(t, path)) {
		if seen[r.Run] {
			t.Errorf("run %d twice", r.Run)
		}
		seen[r.Run] = true
	}
}

// A journal already held by a live executor cannot be opened by another.
func TestJournalLock(t *testing.T) {
	_, path := newJournaled(t, allowShell(), JournalOptions{})
	_, err := NewProcessExecutor(ProcessConfig{TasksDir: t.TempDir(), Machines: testMachines, Policy: allowShell(), DisableRAPL: true, Logger: quiet, JournalPath: path})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second executor on the same journal: %v", err)
	}
}

// What a reader accepts: a torn last line is dropped (and trimmed at the
// next open); a bad line anywhere else is an error naming the line.
func TestReadRunJournalInput(t *testing.T) {
	good := `{"v":1,"ev":"boot","pid":7,"at_us":1}` + "\n" +
		`{"v":1,"ev":"start","run":1,"task":"a","machine":"m1","pid":9,"at_us":2}` + "\n"
	for _, c := range []struct {
		name, content string
		wantRecs      int
		wantErr       string
	}{
		{"empty", "", 0, ""},
		{"good", good, 2, ""},
		{"torn tail", good + `{"v":1,"ev":"end","run":1,"ta`, 2, ""},
		{"garbage line", good + "not json\n" + good, 0, ":3:"},
		{"unknown field", `{"v":1,"ev":"boot","at_us":1,"x":1}` + "\n", 0, "unknown field"},
		{"future version", `{"v":2,"ev":"boot","at_us":1}` + "\n", 0, "version 2"},
		{"unknown event", `{"v":1,"ev":"reboot","at_us":1}` + "\n", 0, "unknown event"},
		{"run without task", `{"v":1,"ev":"start","run":1,"machine":"m1","at_us":1}` + "\n", 0, "without run, task or machine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), RunJournalFile)
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			recs, err := ReadRunJournal(path)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, c.wantErr)
				}
				return
			}
			if err != nil || len(recs) != c.wantRecs {
				t.Fatalf("got %d records, %v; want %d", len(recs), err, c.wantRecs)
			}
			// Opening it (as a restarted daemon does) trims the torn line,
			// marks run 1 abandoned and continues the numbering.
			j, err := openRunJournal(path, JournalOptions{}, "")
			if err != nil {
				t.Fatal(err)
			}
			if n := j.newRun(); c.wantRecs == 2 && n != 2 {
				t.Errorf("next run %d, want 2", n)
			}
			j.close()
			recs = readJournal(t, path)
			if c.wantRecs == 2 {
				runs := JournalRuns(recs)
				if len(runs) != 1 || runs[0].Ending != JournalAbandoned {
					t.Errorf("after reopening: %+v", runs)
				}
			}
		})
	}
}

// The helper process of TestJournalAbandonedAfterKill: a daemon stand-in
// that starts a long task, prints its pid and waits to be killed.
func TestJournalHelperProcess(t *testing.T) {
	dir := os.Getenv("COOPGRID_JOURNAL_HELPER")
	if dir == "" {
		t.Skip("helper process only")
	}
	e, err := NewProcessExecutor(ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Machines: testMachines, Policy: allowShell(),
		DisableRAPL: true, Logger: quiet, JournalPath: filepath.Join(dir, RunJournalFile)})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if err := e.Start(context.Background(), "m1", sh("victim", pgidSh+" > "+filepath.Join(dir, "pid")+"; exec sleep 600")); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("started")
	time.Sleep(10 * time.Minute)
}

// A daemon killed with SIGKILL leaves its run open; its task's leader dies
// with it (PDEATHSIG), and the next executor on the journal records the
// run abandoned at a time after the kill.
func TestJournalAbandonedAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COOPGRID_JOURNAL_HELPER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "started" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q, %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "pid"))))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, RunJournalFile)
	if rs := runsOf(t, path, "victim"); len(rs) != 1 || !rs[0].Open() || rs[0].PID != pid {
		t.Fatalf("before the kill: %+v (task pid %d)", rs, pid)
	}
	killed := time.Now().UnixMicro()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !gone(pid) {
		t.Fatalf("the task's leader %d outlived its daemon", pid)
	}
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Policy: allowShell(), DisableRAPL: true, JournalPath: path})
	rs := runsOf(t, path, "victim")
	if len(rs) != 1 || rs[0].Ending != JournalAbandoned || rs[0].EndUs < killed || rs[0].PID != pid {
		t.Fatalf("after the restart: %+v (killed at %d)", rs, killed)
	}
	// The numbering continues: the next run is not run 1 again.
	r := run(t, e, sh("next", "true"))
	if !r.OK() {
		t.Fatal(r)
	}
	if nr := runsOf(t, path, "next"); len(nr) != 1 || nr[0].Run <= rs[0].Run {
		t.Errorf("next run %+v after abandoned run %d", nr, rs[0].Run)
	}
	boots := 0
	for _, rec := range readJournal(t, path) {
		if rec.Event == JournalBoot {
			boots++
		}
	}
	if boots != 2 {
		t.Errorf("%d boot records, want 2", boots)
	}
}

// An end the disk refuses is not lost: the result is delivered at once,
// and the record, with its own times, goes out ahead of the next append
// that succeeds (here, the next run's start) or at close.
func TestJournalEndWrittenLater(t *testing.T) {
	for _, flushBy := range []string{"next start", "close"} {
		t.Run(flushBy, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, RunJournalFile)
			e, err := NewProcessExecutor(ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Machines: testMachines, Policy: allowShell(),
				DisableRAPL: true, Logger: quiet, JournalPath: path})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Start(context.Background(), "m1", sh("first", "echo started > started; exec sleep 60")); err != nil {
				t.Fatal(err)
			}
			waitFile(t, filepath.Join(workDir(e, "first"), "started"))
			ro, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			e.journal.mu.Lock()
			good := e.journal.f
			e.journal.f = ro
			e.journal.mu.Unlock()
			if err := e.Stop(context.Background(), "first", 0); err != nil {
				t.Fatal(err)
			}
			res := next(t, e)
			if res.Reason != ReasonStopped {
				t.Fatalf("result %+v", res)
			}
			if rs := runsOf(t, path, "first"); len(rs) != 1 || !rs[0].Open() {
				t.Fatalf("while the disk refuses: %+v", rs)
			}
			e.journal.mu.Lock()
			e.journal.f = good
			e.journal.mu.Unlock()
			ro.Close()
			if flushBy == "next start" {
				if r := run(t, e, sh("second", "true")); !r.OK() {
					t.Fatal(r)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := e.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for range e.Results() {
			}
			rs := runsOf(t, path, "first")
			if len(rs) != 1 || rs[0].Ending != JournalEnd || rs[0].Reason != ReasonStopped || rs[0].ExitUs != res.End.UnixMicro() || rs[0].EndUs < rs[0].ExitUs {
				t.Fatalf("after the %s: %+v (result ended %d)", flushBy, rs, res.End.UnixMicro())
			}
		})
	}
}

// TestJournalGroupCommit: appends that arrive while a write is in progress
// are written together by the next group (one write, one fsync), every
// caller returns only once its records are in the file, and each record is
// there exactly once, starts and ends alike. The test holds the journal's
// file lock, as a slow fsync would, while the appends queue up.
func TestJournalGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), RunJournalFile)
	j, err := openRunJournal(path, JournalOptions{}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	const n = 64
	j.mu.Lock() // the first group's leader waits here with its own record
	errs := make(chan error, n)
	for i := range n {
		go func() {
			run := uint64(1000 + i)
			if i%2 == 0 {
				errs <- j.append(JournalRecord{Event: JournalStart, Run: run, Task: fmt.Sprintf("t%d", i), Machine: "m1", PID: 1, AtUs: 1})
			} else {
				code := 0
				errs <- j.appendEnd(JournalRecord{Event: JournalEnd, Run: run, Task: fmt.Sprintf("t%d", i), Machine: "m1", PID: 1, AtUs: 2, ExitCode: &code})
			}
		}()
	}
	// One leader holds its group (its own record) at the lock; the other
	// n-1 appends queue behind it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		j.qmu.Lock()
		queued := len(j.queue)
		j.qmu.Unlock()
		if queued == n-1 {
			break
		}
		if time.Now().After(deadline) {
			j.mu.Unlock()
			t.Fatalf("%d appends queued, want %d", queued, n-1)
		}
		time.Sleep(time.Millisecond)
	}
	sizeBefore, groupsBefore := j.size, j.groups
	select {
	case err := <-errs:
		t.Fatalf("an append returned before its record was written: %v", err)
	default:
	}
	j.mu.Unlock()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	recs := readJournal(t, path)
	seen := map[uint64]int{}
	for _, r := range recs {
		if r.Run >= 1000 {
			seen[r.Run]++
		}
	}
	if len(seen) != n {
		t.Fatalf("%d of %d records in the journal", len(seen), n)
	}
	for run, k := range seen {
		if k != 1 {
			t.Fatalf("run %d recorded %d times", run, k)
		}
	}
	// The leader's group and one group for all the appends queued behind
	// it: two writes and two fsyncs for n records.
	j.mu.Lock()
	groups := j.groups - groupsBefore
	grew := j.size > sizeBefore
	j.mu.Unlock()
	if groups != 2 || !grew {
		t.Fatalf("%d appends written in %d groups (file grew: %v), want 2", n, groups, grew)
	}
	j.qmu.Lock()
	flushing, queued := j.flushing, len(j.queue)
	j.qmu.Unlock()
	if flushing || queued != 0 {
		t.Fatalf("journal left flushing=%v with %d queued", flushing, queued)
	}
}

// pgidSh prints the shell's process group: the run's supervisor, which the
// journal records as the run's pid (field 5 of /proc/PID/stat; "sh" has no
// space in its name).
const pgidSh = `read -r _ _ _ _ pg _ < /proc/$$/stat; echo $pg`
