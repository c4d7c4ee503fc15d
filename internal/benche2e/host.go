package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// The host's own limit: how fast this machine starts and reaps the same
// processes coopgrid's tasks run, with the same parallelism (the
// federation's 64 machines), and nothing else: no scheduler, no log, no
// run directory. bench/e2e/run.sh measures it in every repeat beside
// Slurm and coopgrid, and the table gives coopgrid's rate as a fraction of
// it (docs/BENCHMARKS.md).

// hostParallel is the federation's machines in both variants (A: 1 × 64,
// B: 4 × 16): as many tasks run at once.
const hostParallel = 64

// runHost runs argv n times, at most parallel at once, each to its end,
// and returns the time from the first start to the last exit. A process
// that fails (or cannot start) makes it fail once the others stop.
func runHost(ctx context.Context, argv []string, n, parallel int) (time.Duration, error) {
	if n < 1 || parallel < 1 || len(argv) == 0 {
		return 0, fmt.Errorf("host run: %d processes, %d at once, argv %q: want at least one of each", n, parallel, argv)
	}
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := exec.CommandContext(ctx, argv[0], argv[1:]...).Run(); err != nil {
					once.Do(func() { first = fmt.Errorf("process %d of %d (%s): %w", i, n, argv[0], err); cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return elapsed, first
}

// runHostCmd is `benche2e host`: it prints "RESULT host N ELAPSED 0 0 0",
// the line run.sh's results file takes (no submission, no resolution: the
// harness sees each exit as it happens).
func runHostCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("host", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("tasks", 1000, "processes to run")
	parallel := fs.Int("parallel", hostParallel, "processes at once (the federation's machines)")
	bin := fs.String("true", "", "the program to run (default: `true` from PATH, as the federation's tasks)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *n < 1 || *parallel < 1 {
		return usageError{errors.New("--tasks and --parallel: want at least 1")}
	}
	path := *bin
	if path == "" {
		p, err := exec.LookPath("true")
		if err != nil {
			return fmt.Errorf("find true: %w", err)
		}
		if path, err = filepath.EvalSymlinks(p); err != nil {
			return err
		}
	}
	d, err := runHost(ctx, []string{path}, *n, *parallel)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "RESULT host %d %.3f 0 0 0\n", *n, d.Seconds())
	return nil
}
