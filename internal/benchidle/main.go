// Command benchidle measures what an idle federation costs (issue 17,
// `make bench-idle`, docs/BENCHMARKS.md): it starts N real `peer run`
// processes on loopback, each in its own data directory, with the
// documented flow (peer init, peer invite through the first peer's API,
// peer run --bootstrap --invitation), waits until the federation has
// formed, lets it settle, then reads every process's CPU time from
// /proc/PID/stat at the start and at the end of a fixed idle window and
// prints the leader's and the followers' CPU as a percentage of one core.
// Optionally it records the leader with perf over a second window, and
// measures a fail-over (kill -9 of the leader until a surviving voter
// leads) and how many lines the new leader logs about the dead one.
//
// It is a package main rather than a test, like internal/benche2e: the
// peers are the real bin/peer, observed from outside.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchidle:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

// options are the command line.
type options struct {
	peerBin  string
	n        int
	window   time.Duration
	settle   time.Duration
	failover bool
	perf     bool
	perfRole string
	keep     bool
	root     string
	set      map[string]string
	logLevel string
	inFlight int
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("benchidle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{set: map[string]string{}}
	fs.StringVar(&o.peerBin, "peer", "bin/peer", "the peer binary")
	fs.IntVar(&o.n, "n", 10, "peers (one organisation each)")
	fs.DurationVar(&o.window, "window", 30*time.Second, "the idle window over which CPU time is measured")
	fs.DurationVar(&o.settle, "settle", 10*time.Second, "wait after formation before the window (the last joins' catch-up, autopilot's first rounds)")
	fs.BoolVar(&o.failover, "failover", true, "after the window, kill -9 the leader and time the election of the next")
	fs.BoolVar(&o.perf, "perf", false, "record the leader with perf over a second window (perf.data and perf.txt in the work directory)")
	fs.StringVar(&o.perfRole, "perf-role", "leader", "whom --perf records: leader or nonvoter (the last non-voter)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	fs.StringVar(&o.root, "dir", "", "work directory (default: a new one under $TMPDIR)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "the peers' --log-level")
	fs.IntVar(&o.inFlight, "join-in-flight", defaultInFlight, "joiners started and not ready yet at once (after the voters)")
	fs.Func("set", "config.yaml key=value for every peer (repeatable), e.g. heartbeat.interval=5s", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want key=value, got %q", s)
		}
		o.set[k] = v
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, usageError{err}
	}
	if fs.NArg() != 0 || o.n < 1 || o.window <= 0 {
		return o, usageError{errors.New("usage: benchidle [--n N] [--window D] [--peer BIN] [--set key=value]… (N ≥ 1, D > 0)")}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if o.peerBin, err = filepath.Abs(o.peerBin); err != nil {
		return err
	}
	if o.root == "" {
		if o.root, err = os.MkdirTemp("", "coopgrid-bench-idle-"); err != nil {
			return err
		}
	}
	if !o.keep {
		defer os.RemoveAll(o.root)
	} else {
		log.Info("work directory kept", "dir", o.root)
	}
	if _, ok := o.set["executor.kind"]; !ok {
		o.set["executor.kind"] = "sim"
	}

	fed := &federation{bin: o.peerBin, root: o.root, n: o.n, set: o.set, logLevel: o.logLevel, log: log, inFlight: o.inFlight, given: map[int]bool{}}
	defer fed.stop()
	formed, err := fed.start(ctx)
	if err != nil {
		return err
	}
	log.Info("formed", "peers", o.n, "seconds", formed.Seconds(), "cpu_seconds_of_all_peers", fed.cpuSeconds(), "load", loadavg())
	fed.formationCost().log(log, o.n)
	if err := sleep(ctx, o.settle); err != nil {
		return err
	}
	res := result{N: o.n, Formed: formed, Window: o.window, JoinRetries: int(fed.retries.Load())}
	if err := fed.measureIdle(ctx, o.window, &res); err != nil {
		return err
	}
	if o.perf {
		if err := fed.profile(ctx, o.perfRole, o.window, filepath.Join(o.root, "perf")); err != nil {
			log.Warn("perf", "err", err)
		}
	}
	var ferr error
	if o.failover && o.n >= 3 {
		// A failed fail-over is a result too: the idle figures are
		// printed with it, then the run fails.
		if ferr = fed.failover(ctx, &res); ferr != nil {
			ferr = fmt.Errorf("fail-over: %w", ferr)
			res.FailoverErr = ferr.Error()
		}
	}
	res.print(stdout)
	return ferr
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
