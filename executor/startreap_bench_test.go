package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	var next, failed sync.Mutex
	n := 0
	var firstErr error
	self0, children0 := rusageCPU()
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
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	// CPU per task: this process (the executor) and its reaped children
	// (the supervisors, and the tasks their supervisors reaped).
	b.ReportMetric(float64((self1-self0).Microseconds())/1000/float64(b.N), "peer-cpu-ms/task")
	b.ReportMetric(float64((children1-children0).Microseconds())/1000/float64(b.N), "child-cpu-ms/task")
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
