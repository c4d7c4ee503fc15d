package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStartToReap measures the process executor alone: b.N runs of
// `true`, each started (with its start gate opened at once, as the runner
// does once the start is committed) and reaped, on `parallel` machines
// kept busy: the executor's share of issue 22's per-task overhead, with no
// ledger, scheduler or network. The figure is tasks/s (start of the first
// to the result of the last).
//
//	go test ./executor -run '^$' -bench StartToReap -benchtime 300x
//
// Configurations: "daemon" is what `peer run` sets up (the run journal,
// a cgroup per run when the host gives the peer cgroups: as root);
// "bare" has neither. COOPGRID_BENCH_SUPERVISOR names another binary as
// the supervisor (a built `peer`, whose start-up is the one that counts
// end to end: the test binary links far fewer packages).
func BenchmarkStartToReap(b *testing.B) {
	for _, c := range []struct {
		name     string
		journal  bool
		cgroups  bool
		parallel int
	}{
		{"daemon/parallel=8", true, true, 8},
		{"journal/parallel=8", true, false, 8},
		{"bare/parallel=8", false, false, 8},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchStartToReap(b, c.journal, c.cgroups, c.parallel)
		})
	}
}

func benchStartToReap(b *testing.B, journal, cgroups bool, parallel int) {
	dir := b.TempDir()
	machines := make([]MachineConfig, parallel)
	for i := range machines {
		machines[i] = MachineConfig{Name: "m" + strconv.Itoa(i), GFLOPS: 1, BusyWatts: 10}
	}
	cfg := ProcessConfig{
		TasksDir: filepath.Join(dir, "tasks"), Machines: machines, DisableRAPL: true, Logger: quiet,
		Policy:         Policy{Allow: []string{"true"}, UnsafeRunAsPeerUser: true},
		DisableCgroups: !cgroups,
		SupervisorPath: os.Getenv("COOPGRID_BENCH_SUPERVISOR"),
	}
	if journal {
		cfg.JournalPath = filepath.Join(dir, RunJournalFile)
	}
	e, err := NewProcessExecutor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	}()
	// One waiter per task ID; the router hands each result to its waiter.
	var mu sync.Mutex
	waiters := map[string]chan Result{}
	go func() {
		for r := range e.Results() {
			mu.Lock()
			w := waiters[r.ID]
			delete(waiters, r.ID)
			mu.Unlock()
			w <- r
		}
	}()
	// One run first: the supervisor starts once per executor, not per
	// task (its start-up is reported apart).
	w0 := make(chan Result, 1)
	mu.Lock()
	waiters["warm-up"] = w0
	mu.Unlock()
	if err := e.Start(context.Background(), machines[0].Name, TaskSpec{ID: "warm-up", Argv: []string{"true"}}); err != nil {
		b.Fatal(err)
	}
	if r := <-w0; r.Reason != ReasonOK {
		b.Fatalf("warm-up: %s %s", r.Reason, r.Detail)
	}
	e.supMu.Lock()
	supPid := e.sup.Pid()
	e.supMu.Unlock()
	var next, failed sync.Mutex
	n := 0
	var firstErr error
	self0, children0 := rusageCPU()
	sup0, supSelf0 := procCPU(b, supPid)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, m := range machines {
		wg.Go(func() {
			for {
				next.Lock()
				i := n
				n++
				next.Unlock()
				if i >= b.N {
					return
				}
				id := fmt.Sprintf("t%d", i)
				w := make(chan Result, 1)
				mu.Lock()
				waiters[id] = w
				mu.Unlock()
				gate := make(chan bool, 1)
				gate <- true
				err := e.Start(context.Background(), m.Name, TaskSpec{ID: id, Argv: []string{"true"}, Gate: gate})
				if err == nil {
					if r := <-w; r.Reason != ReasonOK {
						err = fmt.Errorf("%s: %s %s", id, r.Reason, r.Detail)
					}
				}
				if err != nil {
					failed.Lock()
					if firstErr == nil {
						firstErr = err
					}
					failed.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	self1, children1 := rusageCPU()
	sup1, supSelf1 := procCPU(b, supPid)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	// CPU per task: this process (the executor), its reaped children (none
	// for `true`: no output copier), and the supervisor with the tasks it
	// reaped (its own and its reaped children's times, /proc/PID/stat).
	b.ReportMetric(float64((self1-self0).Microseconds())/1000/float64(b.N), "peer-cpu-ms/task")
	b.ReportMetric(float64((children1-children0+sup1-sup0).Microseconds())/1000/float64(b.N), "child-cpu-ms/task")
	// Of which the supervisor's own (without the tasks it reaped).
	b.ReportMetric(float64((supSelf1-supSelf0).Microseconds())/1000/float64(b.N), "sup-cpu-ms/task")
}

// procCPU is the CPU time of process pid and of the children it reaped
// (utime, stime, cutime and cstime of /proc/PID/stat), and its own alone.
func procCPU(b *testing.B, pid int) (withChildren, self time.Duration) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// After the command: state is field 3, utime..cstime fields 14-17.
	var ticks, own int64
	for i, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
		if i < 2 {
			own += n
		}
	}
	return time.Duration(ticks) * time.Second / 100, time.Duration(own) * time.Second / 100 // USER_HZ
}

// rusageCPU is the user+system CPU time of this process and of its reaped
// children.
func rusageCPU() (self, children time.Duration) {
	var s, c syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}
