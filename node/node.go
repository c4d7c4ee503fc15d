package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/gossip"
	"github.com/coopgrid/coopgrid/history"
	"github.com/coopgrid/coopgrid/leader"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/coopgrid/coopgrid/runner"
	"github.com/coopgrid/coopgrid/transfer"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Options configure Start. Listen, API and Bootstrap are the flags of
// `peer run`: when set they override config.yaml.
type Options struct {
	DataDir   string
	Listen    []string
	API       string
	Bootstrap []string
	// Invitation is the invitation token a member organisation issued for
	// this peer's organisation (`peer run --invitation`): needed to join,
	// not to restart as a member.
	Invitation string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// JoinTimeout bounds the first join of a peer that is not a member yet
	// (default 60s, or the context's deadline).
	JoinTimeout time.Duration
	// ReconcileInterval paces the executor bridge's reconciliation against
	// the ledger (default 2s); committed changes wake it earlier.
	ReconcileInterval time.Duration
	// ProgressInterval paces the reading of soft-deadline tasks' progress
	// reports (default 10s; runner.ProgressConfig).
	ProgressInterval time.Duration
	// Consensus, when set, edits the consensus configuration after the
	// config file's settings (for tests and tools).
	Consensus func(*consensus.Config)
	// OnVoting, when set, is told whether this peer votes, at start and
	// at every change (consensus.Config.OnVoting): `peer run` takes one P
	// from its first call unless the peer leads or votes while busy.
	OnVoting func(voting bool)
	// OnLeading, when set, is told whether this peer leads, at every
	// change, as soon as Raft reports it (consensus.Config.OnLeading):
	// `peer run` sets its GOMAXPROCS from it.
	OnLeading func(leading bool)
	// Leader, when set, edits the leader's configuration (scheduling,
	// lost-machine detection) after the config file's settings (for tests
	// and tools).
	Leader func(*leader.Config)
	// FaultInjection turns on the test-only fault surface (POST
	// /v1/debug/faults: blocked peers, clock offset, slow Raft store;
	// faultinject.go). Off by default; `peer run --fault-injection`.
	FaultInjection bool
	// FaultClockOffset starts the peer with its wall clock already
	// stepped (requires FaultInjection): a restart under a wrong clock.
	FaultClockOffset time.Duration
	// EventLogCapacity is how many recent task transitions the peer keeps
	// for GET /v1/events (default api.DefaultEventLogCapacity).
	EventLogCapacity int
	// BuildVersion names this binary's build in what the peer announces to
	// every peer it connects to, beside the command version its ledger
	// applies (leader.UserAgent; `peer run` passes its version).
	BuildVersion string
	// LoadSource is where the load monitor reads the owner's load on this
	// host, for machines with reclaim_load (load.go); nil: ProcLoad.
	// LoadInterval paces it (default 10s).
	LoadSource   LoadSource
	LoadInterval time.Duration
}

// Node is a running peer: the libp2p host, the Raft member holding the
// ledger, the executor of this peer's machines and the bridge between them,
// gossip heartbeats and the file transfer protocols. It implements
// api.Backend.
type Node struct {
	dir      string
	cfg      config.Config
	log      *slog.Logger
	self     peer.ID
	org      string
	limit    config.Limit
	machines map[string]executor.MachineConfig // by name
	// owner is the replicated part of the machines file's policy, declared
	// with every machine (ledger.OwnerPolicy); nil declares none.
	owner *ledger.OwnerPolicy
	opts  Options

	host *p2p.Host
	// signer signs every command this peer authors (propose, Submit) with
	// the host's identity key: the ledger checks it against the peer ID
	// (ledger/sign.go).
	signer ledger.Signer
	cons   *consensus.Node
	lead   *leader.Leader
	exec   executor.Executor // nil when the peer offers no machines
	// unprotected: the executor runs tasks with this peer's own user and
	// privileges (the owner's unsafe_run_as_peer_user); declared in the
	// machines' registration (ledger.MachineSpec.Unprotected).
	unprotected bool
	files       *transfer.Service
	// runner runs what the ledger places on this peer's machines.
	runner *runner.Runner
	// events keeps the recent task transitions (events.go).
	events *api.EventLog
	// history keeps this organisation's forgotten tasks (history.go).
	history *history.Store
	// historyReplica serves and fetches the records a snapshot skipped.
	historyReplica *history.Replica
	// backupBusy is held while an online backup is taken (backup.go).
	backupBusy sync.Mutex

	gossip *gossip.Gossip
	// boot orders this peer's heartbeats across restarts (the replay
	// guard).
	boot int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ready chan struct{}
	// consUp is closed once n.cons is set: admission may read the
	// members from then on, before this peer is ready (its own first
	// registration is admitted while it starts).
	consUp   chan struct{}
	done     chan struct{}
	doneOnce sync.Once
	errMu    sync.Mutex
	err      error

	// faults is the test-only fault-injection state, nil unless
	// Options.FaultInjection.
	faults *faultControl
	// metrics are the latency histograms of /metrics (metrics.go).
	metrics *metrics

	// crashed makes every component drop its work without proposing
	// anything: an abrupt stop, as when the process dies.
	crashed   atomic.Bool
	closing   atomic.Bool
	left      atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ api.Backend = (*Node)(nil)

// Start opens the data directory and starts the peer. A peer that is not a
// member of the federation yet joins through the bootstrap addresses (or
// the known peers), or, only if it was initialised with --new-federation
// and has no way to join, bootstraps a new federation. Start returns once
// the peer is a member; registering the organisation and starting the
// executor continue in the background (Ready).
//
// Start is a list of named steps (IPFS Cluster's pattern): each builds one
// component from the configuration and the components before it, and
// fails with its own context; a failed step shuts down what the earlier
// ones started. The components own their goroutines and their Close.
func Start(ctx context.Context, opts Options) (*Node, error) {
	n, mf, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"libp2p host", n.startHost},
		{"executor", func() error { return n.startExecutor(mf) }},
		{"history store", n.openHistory},
		{"replication and leader duties", n.startReplication},
		{"file transfer", n.startTransfer},
		{"runner", n.startRunner},
		{"gossip", n.startGossip},
		{"membership", func() error { return n.join(ctx) }},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.run(); err != nil {
			n.log.Debug("start: step failed", "step", s.name, "err", err)
			n.shutdown(context.Background())
			return nil, err
		}
		// What a restart costs, step by step (docs/BENCHMARKS.md).
		n.log.Info("start: step done", "step", s.name, "took", time.Since(t).Round(time.Millisecond))
	}
	n.wg.Add(1)
	go n.setup()
	return n, nil
}

// prepare checks the options against config.yaml and builds the node's
// fixed parts: configuration with the flags applied, organisation and
// limit, the machines file, the boot stamp and the data directory's
// subdirectories. Nothing runs yet.
func prepare(opts Options) (*Node, *executor.MachinesFile, error) {
	if opts.DataDir == "" {
		return nil, nil, errors.New("start: no data directory")
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	cfg, err := loadConfig(dir, opts)
	if err != nil {
		return nil, nil, err
	}
	limit, err := config.ParseLimit(cfg.Limit)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: limit: %w", filepath.Join(dir, config.ConfigFile), err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.ReconcileInterval <= 0 {
		opts.ReconcileInterval = 2 * time.Second
	}
	if opts.JoinTimeout <= 0 {
		opts.JoinTimeout = 60 * time.Second
	}
	faults, err := faultsFor(opts, log)
	if err != nil {
		return nil, nil, err
	}
	if err := checkInvitation(opts.Invitation, cfg.Org); err != nil {
		return nil, nil, err
	}
	n := &Node{
		dir: dir, cfg: cfg, org: cfg.Org, limit: limit, opts: opts,
		log:      log.With("org", cfg.Org),
		machines: map[string]executor.MachineConfig{},
		ready:    make(chan struct{}),
		consUp:   make(chan struct{}),
		done:     make(chan struct{}),
		faults:   faults,
		metrics:  newMetrics(),
	}
	n.boot = config.NextBoot(dir, n.now().UnixMilli(), n.log)
	mf, err := n.loadMachines()
	if err != nil {
		return nil, nil, err
	}
	for _, d := range []string{config.BlobsDir, config.OutputsDir, config.TasksDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, nil, fmt.Errorf("start: %w", err)
		}
	}
	return n, mf, nil
}

// loadConfig reads config.yaml and applies the flags of `peer run`.
func loadConfig(dir string, opts Options) (config.Config, error) {
	cfgPath := filepath.Join(dir, config.ConfigFile)
	if _, err := os.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
		return config.Config{}, fmt.Errorf("start %s: %w", dir, config.ErrNotInitialised)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return config.Config{}, err
	}
	if len(opts.Listen) > 0 {
		for _, a := range opts.Listen {
			if err := config.CheckTCPAddr(a); err != nil {
				return config.Config{}, badInput("--listen %v", err)
			}
		}
		cfg.Listen = opts.Listen
	}
	if opts.API != "" {
		if err := config.CheckAPIAddr(opts.API); err != nil {
			return config.Config{}, badInput("--api %v", err)
		}
		cfg.API = opts.API
	}
	for _, a := range opts.Bootstrap {
		if err := config.CheckBootstrapAddr(a); err != nil {
			return config.Config{}, badInput("--bootstrap %v", err)
		}
	}
	return cfg, nil
}

// faultsFor builds the test-only fault surface when it is asked for.
func faultsFor(opts Options, log *slog.Logger) (*faultControl, error) {
	if !opts.FaultInjection {
		if opts.FaultClockOffset != 0 {
			return nil, badInput("--fault-clock-offset needs --fault-injection")
		}
		return nil, nil
	}
	if o := opts.FaultClockOffset.Milliseconds(); o > api.MaxClockOffsetMs || o < -api.MaxClockOffsetMs {
		return nil, badInput("--fault-clock-offset %v: out of range (a year either way)", opts.FaultClockOffset)
	}
	log.Warn("fault injection is ON: a test-only surface (POST /v1/debug/faults); never use it in production")
	return newFaultControl(opts.FaultClockOffset), nil
}

// loadMachines reads the machines file this peer offers, if any.
func (n *Node) loadMachines() (*executor.MachinesFile, error) {
	p := n.cfg.MachinesPath(n.dir)
	if p == "" {
		return nil, nil
	}
	mf, err := executor.LoadMachinesFile(p)
	if err != nil {
		return nil, err
	}
	if err := slurmMachines(n.cfg.Executor.Kind, p, mf, n.log); err != nil {
		return nil, err
	}
	for _, m := range mf.Machines {
		if m.GFLOPS == 0 {
			return nil, fmt.Errorf("machines file %s: machine %q has no gflops: declare it, or let peer init measure it", p, m.Name)
		}
		n.machines[m.Name] = m
	}
	n.owner = ownerPolicy(n.cfg.Executor.Kind, mf.Policy)
	return mf, nil
}

// startHost starts the libp2p host (identity, private network, gater).
// From here on a failed start shuts the node down.
func (n *Node) startHost() error {
	h, err := p2p.New(p2p.Config{
		DataDir:       n.dir,
		ListenAddrs:   n.cfg.Listen,
		AnnounceAddrs: n.cfg.Announce,
		Logger:        n.baseLog(),
		Gater:         n.gater(),
		UserAgent:     leader.UserAgent(n.opts.BuildVersion),
	})
	if err != nil {
		return err
	}
	n.host = h
	n.self = h.ID()
	n.signer = h.PrivateKey()
	n.log = n.log.With("peer", shortID(n.self))
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return nil
}

// startExecutor builds the executor of the machines file's machines.
func (n *Node) startExecutor(mf *executor.MachinesFile) error {
	if mf == nil {
		return nil
	}
	exec, err := newExecutor(n.cfg, n.dir, mf, n.baseLog())
	if err != nil {
		return err
	}
	n.exec = exec
	// Only the process executor runs anything on the host; a simulated
	// one runs nothing, so it protects trivially.
	if p, ok := exec.(interface{ Unprotected() bool }); ok {
		n.unprotected = p.Unprotected()
	}
	return nil
}

// startReplication builds gossip's liveness (which the leader reads), the
// leader's duties, and the Raft member whose hooks start and stop them.
func (n *Node) startReplication() error {
	ccfg := consensus.DefaultConfig(filepath.Join(n.dir, config.RaftDir))
	if n.cfg.Consensus.Preset == "wan" {
		ccfg = consensus.WANConfig(filepath.Join(n.dir, config.RaftDir))
	}
	if n.cfg.Consensus.DeadVoterAfter > 0 {
		ccfg.DeadServerTimeout = n.cfg.Consensus.DeadVoterAfter
	}
	ccfg.RemoveDeadAfter = n.cfg.Consensus.RemoveDeadAfter
	ccfg.Logger = n.baseLog()
	ccfg.Signer = n.signer
	if n.faults != nil {
		ccfg.StoreDelay = n.faults.diskDelay
	}
	ccfg.OnVoting = n.opts.OnVoting
	ccfg.OnLeading = n.opts.OnLeading
	if n.opts.Consensus != nil {
		n.opts.Consensus(&ccfg)
	}
	n.gossip = gossip.New(gossip.Config{Org: n.org, Boot: n.boot, Interval: n.cfg.Heartbeat.Interval, MaxInterval: n.cfg.Heartbeat.Timeout / 3,
		Now: n.now, Logger: n.log, IsMember: n.gossipMember, Leader: n.gossipLeader, Members: n.gossipMembers})
	lead, err := n.newLeader(ccfg)
	if err != nil {
		return err
	}
	n.lead = lead
	ccfg.Admit = lead.Admit
	n.events = api.NewEventLog(n.opts.EventLogCapacity)
	ccfg.OnApply = func(res *ledger.Result) {
		lead.Applied(res)
		n.recordApplied(res)
		n.keepForgotten(res)
	}
	ccfg.OnRestore = func(index uint64) {
		n.events.Reset(index)
		n.historyRestored(index)
	}
	ccfg.OnLeadership = func(ctx context.Context, c *consensus.Node) { lead.Establish(ctx, c) }
	if n.cons, err = consensus.New(ccfg, n.host); err != nil {
		return err
	}
	close(n.consUp)
	return nil
}

// startTransfer serves the blob, outputs and logs protocols.
func (n *Node) startTransfer() (err error) {
	n.files, err = n.newTransfer()
	return err
}

// startRunner builds the runner of this peer's machines; it serves the
// checkpoint protocol now and runs tasks once setup starts it.
func (n *Node) startRunner() (err error) {
	n.runner, err = n.newRunner()
	return err
}

// join makes this peer a member of the federation (or bootstraps one),
// within the join timeout: the time without progress, which the leader's
// paced answers (it admits others first) extend.
func (n *Node) join(ctx context.Context) error {
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.AfterFunc(n.opts.JoinTimeout, cancel)
	defer deadline.Stop()
	return n.becomeMember(jctx, n.opts.Bootstrap, func() { deadline.Reset(n.opts.JoinTimeout) })
}

// baseLog is the logger the options gave, without the node's attributes
// (the components add their own).
func (n *Node) baseLog() *slog.Logger {
	if n.opts.Logger != nil {
		return n.opts.Logger
	}
	return slog.Default()
}

// badInput is Start's error for a bad option, as config.Init's are.
func badInput(format string, args ...any) error {
	return &config.InputError{Err: fmt.Errorf(format, args...)}
}

// newLeader builds the leader's duties from config.yaml's consensus and
// heartbeat sections; they run while this peer leads (ccfg.OnLeadership).
func (n *Node) newLeader(ccfg consensus.Config) (*leader.Leader, error) {
	lcfg := leader.DefaultConfig()
	lcfg.Self, lcfg.Org, lcfg.Signer = n.self, n.org, n.signer
	lcfg.Policy = n.cfg.Consensus.Policy
	lcfg.ScheduleInterval = n.cfg.Consensus.ScheduleInterval
	// The retention duty looks for finished tasks to forget as often as
	// the scheduler ticks.
	lcfg.RetentionInterval = n.cfg.Consensus.ScheduleInterval
	lcfg.CheckpointBlockSeconds = n.cfg.Consensus.CheckpointBlock.Seconds()
	lcfg.BarrierRetry = ccfg.HeartbeatTimeout
	lcfg.LostTimeout = n.cfg.Heartbeat.Timeout
	lcfg.Serving = func() bool { return n.isReady() && !n.crashed.Load() && !n.closing.Load() }
	lcfg.Now = n.now
	lcfg.Logger = n.log
	lcfg.Observer = n.metrics
	// Members is read by admission, which may run before n.cons is set (a
	// forwarded proposal during Start); consUp orders the two. Not ready:
	// this peer's own first registration (which may carry a version-2
	// retention rule) is admitted while it starts.
	lcfg.Members = func() ([]consensus.Member, error) {
		select {
		case <-n.consUp:
			return n.cons.Members()
		default:
			return nil, errors.New("this peer is still starting")
		}
	}
	lcfg.Agents = n.host
	if n.opts.Leader != nil {
		n.opts.Leader(&lcfg)
	}
	return leader.New(lcfg, n.gossip)
}

func newExecutor(cfg config.Config, dir string, mf *executor.MachinesFile, log *slog.Logger) (executor.Executor, error) {
	if cfg.Executor.Kind == "slurm" {
		return newSlurmExecutor(cfg, dir, mf, log)
	}
	if cfg.Executor.Kind == "sim" {
		e, err := executor.NewSimExecutor(executor.SimConfig{Machines: mf.Machines, Compression: cfg.Executor.SimCompression, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		return e, nil
	}
	e, err := executor.NewProcessExecutor(executor.ProcessConfig{
		TasksDir: filepath.Join(dir, config.TasksDir),
		Machines: mf.Machines,
		Policy:   mf.Policy,
		Logger:   log,
		// The executor's own record of its runs (docs/EXECUTOR.md).
		JournalPath: filepath.Join(dir, executor.RunJournalFile),
	})
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return e, nil
}

func shortID(id peer.ID) string {
	s := id.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

// ID is this peer's libp2p ID (also its Raft server ID).
func (n *Node) ID() peer.ID { return n.self }

// Org is the organisation this peer acts for.
func (n *Node) Org() string { return n.org }

// DataDir is the peer's data directory.
func (n *Node) DataDir() string { return n.dir }

// Config is the configuration the node runs with (flags applied).
func (n *Node) Config() config.Config { return n.cfg }

// APIAddr is the HTTP API's host:port from the config or --api.
func (n *Node) APIAddr() string { return n.cfg.API }

// TokenPath is the API token file.
func (n *Node) TokenPath() string { return filepath.Join(n.dir, config.TokenFile) }

// APIToken reads the API's bearer token from the data directory.
func (n *Node) APIToken() (string, error) {
	b, err := os.ReadFile(n.TokenPath())
	if err != nil {
		return "", fmt.Errorf("api token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("api token %s is empty", n.TokenPath())
	}
	return t, nil
}

// OfferedMachines are the names of the machines this peer offers (from its
// machines file), sorted.
func (n *Node) OfferedMachines() []string { return n.machineNames() }

// Addrs are this peer's full multiaddrs (ending in /p2p/<id>): what others
// pass as --bootstrap.
func (n *Node) Addrs() []string {
	var out []string
	for _, a := range n.host.FullAddrs() {
		out = append(out, a.String())
	}
	return out
}

// Host is the libp2p host.
func (n *Node) Host() *p2p.Host { return n.host }

// Consensus is the Raft member (for metrics and diagnostics).
func (n *Node) Consensus() *consensus.Node { return n.cons }

// ReplicationConfig is what Options.Consensus edits (consensus.Config),
// named here so that a tool starting peers (lab/demo) need not import
// consensus.
type ReplicationConfig = consensus.Config

// LeaderConfig is what Options.Leader edits (leader.Config): the
// scheduling pass and lost-machine detection, for tools and tests.
type LeaderConfig = leader.Config

// ViewLedger runs fn on this peer's replica of the ledger, read-only and
// possibly stale (consensus.Node.View's rules: keep nothing but copies).
func (n *Node) ViewLedger(fn func(l *ledger.Ledger)) { n.cons.View(fn) }

// IsLeader reports whether this peer is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.cons.IsLeader() }

// InvariantError is the first ledger invariant violation this peer saw
// after an applied entry (consensus.Config.CheckInvariants); nil otherwise.
func (n *Node) InvariantError() error { return n.cons.InvariantError() }

// Halt stops the peer as if its process died, for fault demonstrations:
// the network first, then the Raft member, so that it proposes nothing on
// its way out. Close must still be called to free the rest.
func (n *Node) Halt() error {
	return errors.Join(n.host.Close(), n.cons.Shutdown())
}

// SchedulerStats are the leader loop's counters (decisions per second for
// /metrics).
func (n *Node) SchedulerStats() leader.SchedulerStats { return n.lead.SchedulerStats() }

// Ready is closed once the organisation is registered and the executor
// bridge runs.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Done is closed when the node stops by itself: after Leave, or on a fatal
// error (Err says which).
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is the fatal error that stopped the node, nil after Leave or Close.
func (n *Node) Err() error {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return n.err
}

func (n *Node) stop(err error) {
	n.errMu.Lock()
	if n.err == nil {
		n.err = err
	}
	n.errMu.Unlock()
	n.doneOnce.Do(func() { close(n.done) })
}

// WaitReady waits until the node is ready, stopped, or ctx ends.
func (n *Node) WaitReady(ctx context.Context) error {
	select {
	case <-n.ready:
		return nil
	case <-n.done:
		if err := n.Err(); err != nil {
			return err
		}
		return errors.New("node stopped")
	case <-ctx.Done():
		return fmt.Errorf("waiting for the node to be ready: %w", ctx.Err())
	}
}

func (n *Node) isReady() bool {
	select {
	case <-n.ready:
		return true
	default:
		return false
	}
}

// Close stops the peer cleanly: it stops the tasks running here and
// declares this peer's machines lost (so that their tasks are queued again
// at once rather than after the heartbeat timeout), then stops gossip,
// Raft and the host. A restart brings the machines back up.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.shutdown(ctx) })
	return n.closeErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.closing.Store(true)
	if n.runner != nil {
		n.runner.SetClosing(true)
	}
	// The reverse of Start's steps, each named by what it stops; a step
	// whose component never started does nothing.
	steps := []struct {
		name string
		stop func() error
	}{
		{"executor", func() error { return n.stopExecutor(ctx) }},
		{"machines", func() error { n.releaseOwnMachines(ctx); return nil }},
		{"background work", n.stopBackground},
		{"snapshot", func() error { return n.snapshotAtStop(ctx) }},
		{"consensus", n.stopReplication},
		{"history store", n.closeHistory},
		{"host", n.stopHost},
	}
	var errs []error
	for _, s := range steps {
		if err := s.stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	n.doneOnce.Do(func() { close(n.done) })
	return errors.Join(errs...)
}

// stopExecutor stops the tasks running here (their ends are still
// reported while the runner runs).
func (n *Node) stopExecutor(ctx context.Context) error {
	if n.exec == nil {
		return nil
	}
	return n.exec.Close(ctx)
}

// releaseOwnMachines declares this peer's machines lost on a clean stop,
// so that their tasks are queued again at once rather than after the
// heartbeat timeout.
func (n *Node) releaseOwnMachines(ctx context.Context) {
	if n.cons == nil || !n.isReady() || n.crashed.Load() || n.left.Load() {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	n.releaseMachines(pctx)
}

// stopBackground ends the node's context and waits for the runner, gossip
// and the node's own goroutines.
func (n *Node) stopBackground() error {
	if n.cancel != nil {
		n.cancel()
	}
	if n.runner != nil {
		n.runner.Close()
	}
	if n.gossip != nil {
		n.gossip.Close()
	}
	n.wg.Wait()
	return nil
}

// snapshotAtStopTimeout bounds the snapshot of a clean stop.
const snapshotAtStopTimeout = 10 * time.Second

// snapshotAtStop snapshots the applied state on a clean stop, so that the
// next start restores it and replays almost nothing (issue 17: restart to
// serving in 5 s). A crash takes none: the next start replays what was
// applied since the last snapshot, which the snapshot pacer bounds
// (consensus/snapshotpace.go). A peer that left the federation has no
// state to keep.
func (n *Node) snapshotAtStop(ctx context.Context) error {
	if n.cons == nil || n.crashed.Load() || n.left.Load() {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, snapshotAtStopTimeout)
	defer cancel()
	start := time.Now()
	if err := n.cons.SnapshotAtStop(sctx); err != nil {
		n.log.Warn("stop: no snapshot; the next start replays the log since the last one", "err", err)
		return nil
	}
	n.log.Info("stop: snapshot taken", "took", time.Since(start))
	return nil
}

func (n *Node) stopReplication() error {
	if n.cons == nil {
		return nil
	}
	return n.cons.Shutdown()
}

// stopHost withdraws the file protocols and closes the libp2p host.
func (n *Node) stopHost() error {
	if n.host == nil {
		return nil
	}
	if n.files != nil {
		n.files.Close()
	}
	return n.host.Close()
}

// crash stops the node abruptly, as if the process died: nothing is
// proposed, running tasks are killed, the data directory stays.
func (n *Node) crash() {
	n.crashed.Store(true)
	if d, ok := n.exec.(interface{ Detach() }); ok {
		// A dead peer leaves its batch jobs running (executor/slurm).
		d.Detach()
	}
	_ = n.Close(context.Background())
}

// releaseMachines declares this peer's up machines lost, best effort.
func (n *Node) releaseMachines(ctx context.Context) {
	var up []string
	n.cons.View(func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			if m.Org == n.org && m.State == ledger.MachineUp {
				up = append(up, m.ID)
			}
		}
	})
	for _, id := range up {
		if _, err := n.propose(ctx, func(c *ledger.Command) { c.MachineLost = &ledger.MachineLostCmd{Machine: id} }); err != nil {
			n.log.Info("close: could not declare machine lost; the leader will after the heartbeat timeout", "machine", id, "err", err)
		}
	}
}

// propose builds a command acting for this peer's organisation, signs it, commits it
// and returns its result once the local ledger has applied it too, so that
// whatever this peer reads next (an API call, the executor bridge) sees the
// write: a follower's commit returns when the leader commits, before the
// follower applies. A command the ledger rejected returns the *ledger.Error
// (with the result).
func (n *Node) propose(ctx context.Context, body func(*ledger.Command)) (ledger.Result, error) {
	c := ledger.Command{Org: n.org, Peer: n.self.String(), AtMs: n.now().UnixMilli()}
	body(&c)
	data, err := n.encode(c)
	if err != nil {
		return ledger.Result{}, err
	}
	return n.proposeEncoded(ctx, data)
}

// encode validates, encodes and signs a command this peer authors: every
// peer's ledger checks the signature against the peer ID (ledger/sign.go),
// so that neither the leader it is forwarded to nor anyone else can alter
// it or act for this organisation.
func (n *Node) encode(c ledger.Command) ([]byte, error) {
	return ledger.EncodeSigned(c, n.signer)
}

// proposeEncoded proposes an encoded command and waits until this peer
// has applied it; a ledger refusal is the error.
func (n *Node) proposeEncoded(ctx context.Context, data []byte) (ledger.Result, error) {
	start := time.Now()
	res, err := n.cons.Propose(ctx, data)
	if err != nil {
		return res, err
	}
	n.metrics.observeProposal(time.Since(start))
	if err := n.waitApplied(ctx, res.Index); err != nil {
		return res, err
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// waitApplied waits until the local ledger has applied index idx, so that
// a read after a write sees the write. It is woken by the FSM's apply (no
// polling), and ends with the node.
func (n *Node) waitApplied(ctx context.Context, idx uint64) error {
	if n.cons.AppliedIndex() >= idx {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()
	err := n.cons.WaitApplied(wctx, idx)
	if err != nil && ctx.Err() == nil && n.ctx.Err() != nil {
		return errors.New("node stopped")
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

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

// IdleGrid is the step of the wall-clock grid on which a peer's periodic
// upkeep wakes (p2p.IdleGrid): a chore of the `peer run` process outside
// node (cmd/peer's reading of its CPU) waits on it too, through
// UntilIdleGrid, and so shares the peer's wake-ups.
const IdleGrid = p2p.IdleGrid

// UntilIdleGrid is how long from now until the next point of IdleGrid
// (p2p.UntilGrid).
func UntilIdleGrid(now time.Time) time.Duration { return p2p.UntilGrid(now, IdleGrid) }
