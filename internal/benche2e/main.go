// Command benche2e measures coopgrid's end-to-end throughput for
// `make bench-e2e` (issue 9, docs/BENCHMARKS.md): it starts a federation of
// real `peer run` processes on loopback (the process executor running
// `true`), submits n trivial tasks, waits until every one is done (on the
// first peer's event stream, GET /v1/events), checks the result, and prints
// one RESULT line. With --profile it also records a system-wide CPU profile
// (perf) over the measurement and writes the per-task timeline read from
// the Raft log. `benche2e host` measures the host's own rate of running the
// same processes with the same parallelism (host.go). `benche2e table`
// turns the results file of bench/e2e/run.sh into the side-by-side table.
//
// It is a package main rather than a test so that run.sh can alternate it
// with the Slurm runs, one measurement per process, and so that a profile
// needs no test binary: the peers are the real `bin/peer` (the profile is
// taken from outside, with perf, without changing the daemon).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
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
		fmt.Fprintln(os.Stderr, "benche2e:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "table" {
		fs := flag.NewFlagSet("table", flag.ContinueOnError)
		fs.SetOutput(stderr)
		if err := fs.Parse(args[1:]); err != nil {
			return usageError{err}
		}
		if fs.NArg() != 1 {
			return usageError{errors.New("usage: benche2e table RESULTS.tsv")}
		}
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		rows, err := parseResults(f)
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
		return writeTable(stdout, rows)
	}
	if len(args) > 0 && args[0] == "host" {
		return runHostCmd(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	var (
		o   runOptions
		set multiFlag
	)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.peerBin, "peer", "bin/peer", "the peer binary (make build)")
	fs.StringVar(&o.variant, "variant", "A", "A: one organisation with 64 machines on one peer; B: four organisations with 16 machines each on four peers")
	fs.IntVar(&o.tasks, "tasks", 1000, "tasks to submit (each runs `true`)")
	fs.DurationVar(&o.poll, "poll", 200*time.Millisecond, "period of the completion poll, used only if the event stream (GET /v1/events) fails")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	fs.StringVar(&o.work, "work", "", "directory for the federation (default: a new temporary directory, removed afterwards)")
	fs.BoolVar(&o.keep, "keep", false, "keep the federation's directory")
	fs.StringVar(&o.profile, "profile", "", "directory for the profile: perf record -a over the measurement, the timeline from the Raft log, info logs")
	fs.StringVar(&o.logLevel, "log-level", "", "peers' --log-level (default warn; info with --profile)")
	fs.Var(&set, "set", "config.yaml key=value on every peer, repeatable (e.g. consensus.schedule_interval=1s)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	switch o.variant {
	case "A":
		o.orgs, o.machines = 1, 64
	case "B":
		o.orgs, o.machines = 4, 16
	default:
		return usageError{fmt.Errorf("--variant %q: want A or B", o.variant)}
	}
	if o.tasks < 1 || o.tasks > 10_000*o.orgs {
		return usageError{fmt.Errorf("--tasks %d: want 1 to %d (one submission per organisation of at most 10,000)", o.tasks, 10_000*o.orgs)}
	}
	o.set = map[string]string{}
	for _, kv := range set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usageError{fmt.Errorf("--set %q: want key=value", kv)}
		}
		o.set[k] = v
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return measureOnce(ctx, log, o, stdout)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type runOptions struct {
	peerBin, variant, work, profile, logLevel string
	tasks, orgs, machines                     int
	poll, timeout                             time.Duration
	keep                                      bool
	set                                       map[string]string
}

func measureOnce(ctx context.Context, log *slog.Logger, o runOptions, stdout io.Writer) (err error) {
	bin, err := filepath.Abs(o.peerBin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("peer binary: %w (run make build)", err)
	}
	trueBin, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("find true: %w", err)
	}
	if trueBin, err = filepath.EvalSymlinks(trueBin); err != nil {
		return err
	}
	root := o.work
	if root == "" {
		if root, err = os.MkdirTemp("", "coopgrid-bench-e2e-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(root)
		}
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	level := o.logLevel
	if level == "" {
		level = "warn"
		if o.profile != "" {
			level = "info"
		}
	}
	log.Info("starting the federation", "variant", o.variant, "orgs", o.orgs, "machines_per_org", o.machines, "dir", root, "set", o.set)
	// A start can fail for reasons outside the measurement (an API port
	// taken between the check and the bind): try again in a new directory.
	var f *federation
	for try := 1; ; try++ {
		cfg := fedConfig{PeerBin: bin, Root: filepath.Join(root, fmt.Sprintf("try-%d", try)), Orgs: o.orgs, Machines: o.machines, Set: o.set, LogLevel: level, TrueBin: trueBin}
		if f, err = startFederation(ctx, log, cfg); err == nil {
			root = cfg.Root
			break
		}
		if try == 3 || ctx.Err() != nil {
			return err
		}
		log.Warn("federation did not start; trying again", "try", try, "err", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			f.stop()
		}
	}()
	var prof *perfRecord
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return err
		}
		if prof, err = startPerf(ctx, filepath.Join(o.profile, "perf.data")); err != nil {
			return err
		}
		defer prof.stop()
	}
	log.Info("submitting", "tasks", o.tasks, "load", loadAvg())
	m, err := f.measure(ctx, o.tasks, o.poll, o.timeout)
	if prof != nil {
		if perr := prof.stop(); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		return err
	}
	index, hash, err := f.converged(ctx)
	if err != nil {
		return err
	}
	leader := f.leader(ctx)
	if leader == nil {
		leader = f.peers[0]
	}
	f.stop()
	stopped = true

	// The leader's log holds every entry with the time it was appended.
	r, err := readLog(leader.data, index)
	if err != nil {
		return fmt.Errorf("read %s's log: %w", leader.org, err)
	}
	if r.HashAt != hash {
		return fmt.Errorf("replaying %s's log gives hash %.16s at index %d; the peers agreed on %.16s", leader.org, r.HashAt, index, hash)
	}
	if err := r.Ledger.CheckInvariants(); err != nil {
		return fmt.Errorf("ledger invariants after the run: %w", err)
	}
	log.Info("checked", "tasks_done", m.Tasks, "peers_agree_at", index, "hash", hash[:16], "replayed_hash_equal", true, "invariants", "hold")

	name := "coopgrid-" + o.variant
	// The resolution is 0 when the event stream told the end as it was
	// applied, the poll period otherwise.
	resolution := 0.0
	if m.Polled {
		resolution = o.poll.Seconds()
	}
	fmt.Fprintf(stdout, "RESULT %s %d %.3f %.3f %.3f %.3f\n", name, m.Tasks,
		m.Elapsed().Seconds(), m.Submitted.Sub(m.Start).Seconds(), resolution, m.LedgerElapsed().Seconds())

	tl := buildTimeline(r, m.Start.UnixMilli(), m.Detected.UnixMilli(), leader.id)
	if o.profile == "" {
		return nil
	}
	if err := readPeerLogs(filepath.Join(root, "logs"), tl); err != nil {
		log.Warn("peer logs", "err", err)
	}
	if err := readJournals(root, tl); err != nil {
		log.Warn("run journals", "err", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# coopgrid variant %s, %d tasks\n\n", o.variant, o.tasks)
	how := "the end seen on the event stream"
	if m.Polled {
		how = fmt.Sprintf("the stream failed: %d polls every %v", m.Polls, o.poll)
	}
	fmt.Fprintf(&b, "elapsed %.3f s (%s), submission answered after %.3f s, last end report %.3f s after the start\n\n",
		m.Elapsed().Seconds(), how, m.Submitted.Sub(m.Start).Seconds(), m.LedgerElapsed().Seconds())
	tl.report(&b, o.orgs*o.machines)
	tl.reportLogged(&b)
	tl.reportJournal(&b)
	var (
		pids    []int
		pidList strings.Builder
	)
	for _, p := range f.peers {
		pids = append(pids, p.proc.Cmd.Process.Pid)
		fmt.Fprintf(&pidList, "%s %d\n", p.org, p.proc.Cmd.Process.Pid)
	}
	if err := os.WriteFile(filepath.Join(o.profile, "pids.txt"), []byte(pidList.String()), 0o644); err != nil {
		return err
	}
	if err := prof.report(ctx, &b, pids, o.tasks); err != nil {
		log.Warn("perf report", "err", err)
	}
	out := filepath.Join(o.profile, "profile.md")
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, b.String())
	log.Info("profile written", "file", out)
	return nil
}

// loadAvg is the first field of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
