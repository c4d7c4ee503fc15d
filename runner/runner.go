// Package runner runs what the ledger places on this peer's machines:
// allocations → executor → reports, with the checkpoint glue.
//
// The bridge (bridge.go) reconciles the ledger's allocations and pending
// stops for this peer's organisation with the runs of the peer's
// executor; the reporter (reporter.go) group-commits the reports on those
// runs; the checkpoint glue (checkpoint.go) packs, replicates, restores and
// collects checkpoint archives through the checkpoint package.
//
// The runner knows nothing of the daemon around it: it proposes through a
// function, reads the ledger through the small Ledger interface, fetches
// inputs and ships outputs through functions, and owns its goroutines
// (Start, Close).
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/checkpoint"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Ledger is the local replica of the ledger (*consensus.Node satisfies it).
type Ledger interface {
	// View runs fn on the local ledger: a possibly stale read.
	View(fn func(*ledger.Ledger))
	// ReadConsistent runs fn once the local ledger has applied what the
	// leader had committed when asked.
	ReadConsistent(ctx context.Context, fn func(*ledger.Ledger)) error
	// Subscribe delivers the committed changes to org's machines: the
	// bridge's wake-ups.
	Subscribe(org string) *consensus.Subscription
	// Members is the Raft configuration: the peers a checkpoint may be
	// replicated to.
	Members() ([]consensus.Member, error)
}

// ProposeFunc builds a command acting for this peer's organisation (the
// envelope: organisation, peer, time), lets body fill it in, commits it and
// returns its result once the local ledger has applied it. A command the
// ledger rejected returns the *ledger.Error with the result.
type ProposeFunc func(ctx context.Context, body func(*ledger.Command)) (ledger.Result, error)

// CheckpointConfig is how this peer takes, keeps, replicates and restores
// checkpoints (the checkpoint.* keys of docs/CONFIG.md).
type CheckpointConfig struct {
	// Replication is the number of peers that hold each archive this peer
	// takes, itself included.
	Replication int
	// Grace is the time between SIGTERM and SIGKILL for a checkpointable
	// task that the ledger preempts or cancels: the time it has to write
	// its final checkpoint.
	Grace time.Duration
	// MaxArchiveBytes bounds one compressed archive, taken or received;
	// MaxTaskBytes the archives of one task in the store; MaxPeerBytes
	// every archive in the store.
	MaxArchiveBytes int64
	MaxTaskBytes    int64
	MaxPeerBytes    int64
	// TransferTimeout bounds one push or fetch of an archive.
	TransferTimeout time.Duration
	// GCInterval paces the collection of archives no unfinished task
	// needs (it also runs at start and after this peer's tasks end).
	GCInterval time.Duration
	// Interval, when positive, also checkpoints running checkpointable
	// tasks every Interval; 0 checkpoints them every Young/Daly interval
	// of their machine once the ledger records an interruption of it
	// (ckinterval.go), and otherwise only at a preemption.
	Interval time.Duration
}

// Config is what a Runner needs from the peer it runs in.
type Config struct {
	// Org is the organisation this peer acts for; Self is its peer ID.
	Org  string
	Self peer.ID
	// Machines are the names of the machines this peer offers (its
	// machines file): an allocation on any other machine is not started.
	Machines []string
	// Hosts maps a machine's name to the host a parallel job's launcher
	// reaches it by (the machines file's host key); a machine not in it
	// is reached by its name.
	Hosts map[string]string
	// Executor runs the machines' tasks; nil when the peer offers none
	// (then only the checkpoint glue runs). The peer owns it and closes it
	// before the runner (see Close).
	Executor executor.Executor
	// StopGrace is the time between SIGTERM and SIGKILL when the ledger
	// stops a task that is not checkpointable (executor.stop_grace).
	StopGrace time.Duration

	// Ledger is the local replica.
	Ledger Ledger
	// Propose commits a command for this peer's organisation.
	Propose ProposeFunc
	// Retryable says a failed proposal or transfer certainly or possibly
	// did not take effect for reasons that pass (no leader, leader
	// change, network): it is tried again with backoff.
	Retryable func(error) bool
	// DeclareLost proposes MachineLost for one of this peer's machines; a
	// machine already lost is not an error.
	DeclareLost func(ctx context.Context, machine string) error
	// FetchInputs gets every input of a task, by name.
	FetchInputs func(ctx context.Context, t ledger.Task) (map[string][]byte, error)
	// ShipOutputs sends a finished run's outputs (name → path) to the
	// task's organisation.
	ShipOutputs func(ctx context.Context, t ledger.Task, machine string, outputs map[string]string) error

	// Host serves the checkpoint replication protocol and tells which
	// peers are connected.
	Host host.Host
	// TasksDir holds the tasks' directories (DATA/tasks): a task's
	// $CHECKPOINT_DIR is TasksDir/<id>/CheckpointSubdir.
	TasksDir string
	// CheckpointsDir holds the checkpoint archives (DATA/checkpoints).
	CheckpointsDir string
	Checkpoint     CheckpointConfig

	// Lease is the lease this peer holds on its runs.
	Lease LeaseConfig

	// Progress paces the monitoring of soft-deadline runs (progress.go).
	Progress ProgressConfig

	// ReconcileInterval paces the bridge's reconciliation against the
	// ledger (default 2s); committed changes wake it earlier.
	ReconcileInterval time.Duration
	// ReportLinger is how long a report that arrives while this peer is
	// reporting steadily waits for others to share its log entry
	// (reporter.go); 0 means DefaultReportLinger, a negative value none.
	ReportLinger time.Duration
	// Now is the clock of the commands' envelopes and of the declared
	// energy estimates (default time.Now).
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Observer, when set, receives the timing of this peer's runs.
	Observer Observer
}

// Observer receives the timing of the runs on this peer's machines, for
// metrics. RunStarted: a task's first run was recorded as started, queueWait
// after its submission (ledger times). RunEnded: the end of a run was
// recorded; runTime is the executor's, outcome "done", "failed" or
// "stopped".
type Observer interface {
	RunStarted(queueWait time.Duration)
	RunEnded(runTime time.Duration, outcome string)
}

// CheckpointSubdir is a task's $CHECKPOINT_DIR below TasksDir/<id>/, the
// process executor's default.
const CheckpointSubdir = "checkpoint"

// Runner runs this peer's share of the ledger's allocations.
type Runner struct {
	log *slog.Logger
	rep *reporter
	ck  *checkpoints
	br  *bridge // nil without an executor

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// closing makes the runner drop its work without proposing anything
	// (SetClosing).
	closing atomic.Bool

	mu        sync.Mutex
	started   bool
	closed    bool
	closeOnce sync.Once
}

// New opens the checkpoint store and serves the replication protocol on
// the host (other peers may push archives from now on); Start starts the
// rest.
func New(cfg Config) (*Runner, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = 2 * time.Second
	}
	switch {
	case cfg.ReportLinger == 0:
		cfg.ReportLinger = DefaultReportLinger
	case cfg.ReportLinger < 0:
		cfg.ReportLinger = 0
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Progress.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runner{log: cfg.Logger}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	ck, err := newCheckpoints(r.ctx, cfg)
	if err != nil {
		r.cancel()
		return nil, err
	}
	r.ck = ck
	r.rep = newReporter(cfg)
	if l, ok := cfg.Executor.(leaser); ok && cfg.Lease.Duration > 0 {
		l.SetLease(cfg.Lease.Duration, cfg.Lease.Contact)
	}
	if cfg.Executor != nil {
		r.br = newBridge(cfg, &r.wg, &r.closing, r.rep, ck)
		ck.tracks = r.br.tracks
	}
	return r, nil
}

// LeaseConfig is the lease a peer holds on its runs (docs/EXECUTOR.md,
// "The run lease"): an executor that supports one (SetLease) has each
// run's supervisor kill the run when the peer has not confirmed contact
// with its federation (Contact) for about Duration — so a peer that is cut
// off or stopped stops its tasks before the leader may declare its
// machines lost (after the heartbeat timeout) and place them again. The
// node uses a third of the heartbeat timeout. A zero Duration holds no
// lease.
type LeaseConfig struct {
	Duration time.Duration
	Contact  func() time.Time
}

// leaser is an executor whose runs hold a lease
// (*executor.ProcessExecutor).
type leaser interface {
	SetLease(lease time.Duration, contact func() time.Time)
}

func (cfg *Config) check() error {
	var missing []string
	need := func(ok bool, name string) {
		if !ok {
			missing = append(missing, name)
		}
	}
	need(cfg.Org != "", "Org")
	need(cfg.Self != "", "Self")
	need(cfg.Ledger != nil, "Ledger")
	need(cfg.Propose != nil, "Propose")
	need(cfg.Retryable != nil, "Retryable")
	need(cfg.Host != nil, "Host")
	need(cfg.TasksDir != "", "TasksDir")
	need(cfg.CheckpointsDir != "", "CheckpointsDir")
	if cfg.Executor != nil {
		need(cfg.DeclareLost != nil, "DeclareLost")
		need(cfg.FetchInputs != nil, "FetchInputs")
		need(cfg.ShipOutputs != nil, "ShipOutputs")
	}
	if len(missing) > 0 {
		return fmt.Errorf("runner: config lacks %v", missing)
	}
	return nil
}

// Start starts the reporter, the checkpoint collector and, with an
// executor, the bridge: the peer calls it once it has caught up with the
// federation, so that the first reconciliation reads a current ledger.
// Start after Close, or a second Start, does nothing.
func (r *Runner) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.closed {
		return
	}
	r.started = true
	r.wg.Go(func() { r.rep.loop(r.ctx) })
	if r.br != nil {
		r.wg.Go(func() { r.br.loop(r.ctx) })
		r.wg.Go(func() { r.br.consume(r.ctx) })
	}
	r.wg.Go(func() { r.ck.gcLoop(r.ctx) })
}

// SetClosing(true) makes the runner drop its work from now on: no
// reconciliation pass starts or stops anything, and the results the
// executor still delivers are not reported. The peer sets it before it
// closes the executor (Close, an abrupt stop, Leave): the runs that
// closing the executor kills are no ends for the ledger to book (a clean
// close declares the machines lost instead; an abrupt stop proposes
// nothing, as when the process dies). A Leave that failed sets it back.
func (r *Runner) SetClosing(closing bool) { r.closing.Store(closing) }

// Close stops the runner: it drops its work (SetClosing), cancels what is
// in flight, waits for every goroutine it started, then stops serving
// checkpoints. The goroutine reading the executor's results ends when the
// executor closes its Results channel, so the peer closes the executor
// first. A second Close does nothing.
func (r *Runner) Close() {
	r.closeOnce.Do(func() {
		r.SetClosing(true)
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.cancel()
		r.wg.Wait()
		r.ck.close()
	})
}

// RunningByMachine maps machine names to the task started there (the
// heartbeat's telemetry).
func (r *Runner) RunningByMachine() map[string]string {
	if r.br == nil {
		return map[string]string{}
	}
	return r.br.runningByMachine()
}

// CheckpointStore is this peer's archive store (for diagnostics and tests).
func (r *Runner) CheckpointStore() *checkpoint.Store { return r.ck.store }

// CheckpointService is this peer's replication service (for tests: pushing
// and fetching as this peer).
func (r *Runner) CheckpointService() *checkpoint.Service { return r.ck.svc }

// ReportCounts are the reporter's counters since New: the commands it
// proposed and the reports they carried. Fewer commands than reports means
// reports were batched.
func (r *Runner) ReportCounts() (commands, reports uint64) {
	return r.rep.commands.Load(), r.rep.sent.Load()
}

// errClosed ends the reports still queued when the runner closes.
var errClosed = errors.New("runner closed")

// sleep waits d or until ctx ends; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
