// Package slurm is an executor backend that runs each task placed on this
// peer's machines as a job of the institution's own Slurm cluster
// (docs/SLURM.md): the machines are the cluster's nodes, the federation
// chooses the node, Slurm runs the job there.
//
// A run: the attempt directory is prepared as the process executor's
// (executor.BatchKit: inputs, environment, the owner's policy), the job is
// submitted held (`sbatch --hold`, pinned to the node, with the task's
// CPUs, memory, GPUs and wall-clock limit, the configured partition,
// account and QoS, as the policy's run_as user) and its ID journaled; the
// job is released (`scontrol release`) only once the run's gate opens, so
// nothing of the task runs before the ledger has recorded its start, and
// not at all when the gate opens after the run's StartBy (start_late:
// the held job is cancelled). The peer's COOPGRID_* variables (a gang
// part's rank, hosts and hostfile) are in the job's environment. The
// executor follows its jobs with one squeue per poll interval, stops a job
// with `scancel --full --signal=TERM` then, after the grace, `scancel`,
// reads the end from `scontrol show job` (state, exit code), the energy
// from `sacct` (ConsumedEnergy) when the cluster accounts for it, and has
// the outputs copied as the run's user. A job that Slurm ends by itself
// (node failure, preemption, a cancellation by the cluster's own people)
// is a machine failure (Result.MachineFailed), not the task's. A peer cut
// off from its federation for a lease kills its jobs (lease.go).
package slurm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coopgrid/coopgrid/executor"
)

// Config configures an Executor.
type Config struct {
	Settings Settings
	// Machines are the machines offered (Machines/Discover).
	Machines []executor.MachineConfig
	// Policy is the owner's policy: what may run, as which user, limits.
	Policy executor.Policy
	// TasksDir holds the attempt directories; it must be on a file system
	// the nodes share (Settings.TasksDir, else DATA/tasks).
	TasksDir string
	// JournalPath is the job journal (DATA/slurm-jobs.jsonl); required.
	JournalPath string
	// CommandTimeout bounds one client command (default 30s).
	CommandTimeout time.Duration
	Logger         *slog.Logger
}

// Executor runs tasks as Slurm jobs. It satisfies executor.Executor.
type Executor struct {
	cfg      Config
	log      *slog.Logger
	cli      cli
	kit      *executor.BatchKit
	journal  *jobJournal
	machines map[string]executor.MachineConfig
	q        *resultQueue

	mu     sync.Mutex
	closed bool
	runs   map[string]*run // by task ID
	busy   map[string]int  // machine → runs
	wg     sync.WaitGroup  // runs whose Result is not queued yet

	// avail is the latest availability of each machine's node (reason
	// when unavailable); availCh is poked when it changes.
	availMu sync.Mutex
	avail   map[string]string
	availCh chan struct{}
	// noAccounting: sacct said the cluster keeps no accounting; energy
	// is declared without asking again.
	noAccounting atomic.Bool
	// nodeFailures counts the node listings failed in a row (poll's).
	nodeFailures int

	// leftovers are the runs a previous daemon left open whose job was
	// found, by task ID, until the runner adopts or ends them (adopt.go).
	leftovers map[string]JobRecord
	// detach, closed by Close after Detach, lets the followed jobs run on.
	detach   chan struct{}
	detached atomic.Bool

	stop     chan struct{}
	pollDone chan struct{}
	once     sync.Once

	// leaseOnce starts watchLease (SetLease), which closes leaseDone.
	leaseOnce sync.Once
	leaseDone chan struct{}
}

var _ executor.Executor = (*Executor)(nil)

func newCLI(s Settings) cli { return cli{binDir: s.BinDir, timeout: 30 * time.Second} }

// New checks the configuration, opens the job journal, finds the jobs a
// previous daemon left (Leftovers: the runner adopts or ends them) and
// starts following the cluster.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.JournalPath == "" {
		return nil, errors.New("slurm executor: no job journal")
	}
	if len(cfg.Machines) == 0 {
		return nil, errors.New("slurm executor: no machines")
	}
	ms := map[string]executor.MachineConfig{}
	for _, m := range cfg.Machines {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("slurm executor: %w", err)
		}
		ms[m.Name] = m
	}
	kit, err := executor.NewBatchKit(cfg.TasksDir, cfg.Policy, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("slurm executor: %w", err)
	}
	c := newCLI(cfg.Settings)
	if cfg.CommandTimeout > 0 {
		c.timeout = cfg.CommandTimeout
	}
	if cfg.Settings.PollInterval <= 0 {
		cfg.Settings.PollInterval = DefaultPollInterval
	}
	j, open, err := openJobJournal(cfg.JournalPath)
	if err != nil {
		return nil, fmt.Errorf("slurm executor: %w", err)
	}
	e := &Executor{cfg: cfg, log: cfg.Logger.With("executor", "slurm"), cli: c, kit: kit, journal: j, machines: ms, q: newResultQueue(),
		runs: map[string]*run{}, busy: map[string]int{}, avail: map[string]string{}, availCh: make(chan struct{}, 1),
		leftovers: map[string]JobRecord{}, detach: make(chan struct{}), stop: make(chan struct{}), pollDone: make(chan struct{})}
	if err := e.findLeftovers(ctx, open); err != nil {
		j.close()
		return nil, fmt.Errorf("slurm executor: %w", err)
	}
	if err := j.append(JobRecord{Event: EventBoot, AtUs: time.Now().UnixMicro()}); err != nil {
		j.close()
		return nil, fmt.Errorf("slurm executor: %w", err)
	}
	e.pollNodes(ctx)
	go e.poll()
	return e, nil
}

// Machines are the machines offered, sorted by name.
func (e *Executor) Machines() []executor.MachineConfig {
	out := make([]executor.MachineConfig, 0, len(e.machines))
	for _, m := range e.machines {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// EnergySource is where the declared part of the energy comes from.
func (e *Executor) EnergySource() executor.EnergySource { return executor.EnergyDeclared }

// Results delivers one Result per accepted Start.
func (e *Executor) Results() <-chan executor.Result { return e.q.out }

// Running lists the tasks started and not yet ended, sorted.
func (e *Executor) Running() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.runs))
	for id := range e.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// TasksDir is the directory of the runs' attempt directories.
func (e *Executor) TasksDir() string { return e.kit.TasksDir() }

// Discard removes a delivered run's directories after keep_task_dirs.
func (e *Executor) Discard(res executor.Result) { e.kit.Discard(res) }

// Unprotected is false: a Slurm job runs as the run_as user, or (with the
// owner's unsafe opt-in) as the peer's user on the cluster's nodes.
func (e *Executor) Unprotected() bool {
	p := e.cfg.Policy
	return p.RunAs == "" && (len(p.Allow) > 0 || p.AllowAny)
}

// Start submits spec as a held job pinned to machine's node and returns
// once its job ID is journaled (or the run has failed: a Result says why).
func (e *Executor) Start(ctx context.Context, machine string, spec executor.TaskSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start %s: %w", spec.ID, err)
	}
	spec = executor.CloneSpec(spec)
	r := &run{id: spec.ID, machine: machine, launched: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{}), update: make(chan struct{}, 1)}
	m, err := e.reserve(machine, r)
	if err != nil {
		return err
	}
	go func() {
		defer e.wg.Done()
		res := e.execute(m, r, &spec)
		e.release(r)
		if r.launchErr == nil && !r.isDetached() {
			e.q.push(res)
		}
		close(r.done)
	}()
	<-r.launched
	return r.launchErr
}

func (e *Executor) reserve(machine string, r *run) (executor.MachineConfig, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.machines[machine]
	switch {
	case e.closed:
		return m, executor.ErrClosed
	case !ok:
		return m, fmt.Errorf("start %s on %q: %w", r.id, machine, executor.ErrUnknownMachine)
	case e.busy[machine] >= int(max(1, m.CPUs)):
		return m, fmt.Errorf("start %s on %q: %w", r.id, machine, executor.ErrMachineBusy)
	}
	if _, dup := e.runs[r.id]; dup {
		return m, fmt.Errorf("start %s: %w", r.id, executor.ErrTaskRunning)
	}
	e.runs[r.id] = r
	e.busy[machine]++
	e.wg.Add(1)
	return m, nil
}

func (e *Executor) release(r *run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.runs, r.id)
	if e.busy[r.machine]--; e.busy[r.machine] <= 0 {
		delete(e.busy, r.machine)
	}
}

// Stop ends task id: SIGTERM to the job's processes (scancel --full
// --signal=TERM), then scancel after grace (at once if grace <= 0). It
// returns once the task's Result is queued, or with ctx's error.
func (e *Executor) Stop(ctx context.Context, id string, grace time.Duration) error {
	e.mu.Lock()
	r, ok := e.runs[id]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("stop %s: %w", id, executor.ErrUnknownTask)
	}
	r.requestStop(executor.ReasonStopped, "stopped on request", grace)
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
}

// Close refuses new tasks, stops the running ones with the policy's kill
// grace and waits for them (or ctx). Results is closed once the last
// Result has been read.
func (e *Executor) Close(ctx context.Context) error {
	var err error
	e.once.Do(func() {
		e.mu.Lock()
		e.closed = true
		var runs []*run
		for _, r := range e.runs {
			runs = append(runs, r)
		}
		e.mu.Unlock()
		if e.detached.Load() {
			// As if the peer died: released jobs run on (the next daemon
			// adopts or ends them); a held one is cancelled below.
			close(e.detach)
		}
		for _, r := range runs {
			r.requestStop(executor.ReasonStopped, "the executor is closing", e.cfg.Policy.Grace())
		}
		done := make(chan struct{})
		go func() {
			e.wg.Wait()
			close(e.stop)
			<-e.pollDone
			e.leaseOnce.Do(func() {}) // no lease watcher from now on
			if e.leaseDone != nil {
				<-e.leaseDone
			}
			if jerr := e.journal.close(); jerr != nil {
				e.log.Warn("job journal: close", "err", jerr)
			}
			e.q.finish()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("close slurm executor: %w", ctx.Err())
		}
	})
	return err
}

// NodeAvailability is the latest view of the offered machines' nodes:
// machine → why it is unavailable; a machine absent is available.
// Changed is poked whenever the view changes.
func (e *Executor) NodeAvailability() map[string]string {
	e.availMu.Lock()
	defer e.availMu.Unlock()
	out := make(map[string]string, len(e.avail))
	for k, v := range e.avail {
		out[k] = v
	}
	return out
}

// AvailabilityChanged is poked when NodeAvailability changes.
func (e *Executor) AvailabilityChanged() <-chan struct{} { return e.availCh }

// poll follows the submitted jobs and the nodes, every poll interval.
func (e *Executor) poll() {
	defer close(e.pollDone)
	t := time.NewTicker(e.cfg.Settings.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.cli.timeout)
		e.pollJobs(ctx)
		e.pollNodes(ctx)
		cancel()
	}
}

// pollJobs asks squeue for every submitted job and hands each run its
// job's state.
func (e *Executor) pollJobs(ctx context.Context) {
	e.mu.Lock()
	byJob := map[string]*run{}
	for _, r := range e.runs {
		if job := r.jobID(); job != "" {
			byJob[job] = r
		}
	}
	e.mu.Unlock()
	if len(byJob) == 0 {
		return
	}
	ids := make([]string, 0, len(byJob))
	for id := range byJob {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	states, err := e.cli.squeue(ctx, ids)
	if err != nil {
		e.log.Warn("squeue", "err", err)
		return
	}
	for id, r := range byJob {
		st, ok := states[id]
		if !ok {
			st = jobState{id: id, state: stateGone}
		}
		r.setState(st)
	}
}

// pollNodes updates the nodes' availability.
func (e *Executor) pollNodes(ctx context.Context) {
	nodes, err := e.cli.nodes(ctx)
	now := map[string]string{}
	if err != nil {
		e.log.Warn("scontrol show node", "err", err)
		// A controller out of reach for a few polls takes every machine
		// away: nothing could be submitted there.
		if e.nodeFailures++; e.nodeFailures < unreachablePolls {
			return
		}
		for name := range e.machines {
			now[name] = "slurm controller unreachable: " + clip(err.Error(), 200)
		}
		e.setAvail(now)
		return
	}
	e.nodeFailures = 0
	seen := map[string]bool{}
	for _, n := range nodes {
		if _, ok := e.machines[n.Name]; !ok {
			continue
		}
		seen[n.Name] = true
		if !n.Available() {
			why := "slurm node " + strings.ToLower(n.State)
			if n.Reason != "" {
				why += ": " + n.Reason
			}
			now[n.Name] = why
		}
	}
	for name := range e.machines {
		if !seen[name] {
			now[name] = "slurm node gone from the cluster"
		}
	}
	e.setAvail(now)
}

// unreachablePolls is how many failed node listings in a row make every
// machine unavailable.
const unreachablePolls = 3

func (e *Executor) setAvail(now map[string]string) {
	e.availMu.Lock()
	changed := len(now) != len(e.avail)
	for k, v := range now {
		if old, ok := e.avail[k]; !ok || (old != v && !strings.HasPrefix(v, old)) {
			changed = true
		}
	}
	e.avail = now
	e.availMu.Unlock()
	if changed {
		select {
		case e.availCh <- struct{}{}:
		default:
		}
	}
}

// stateGone: squeue no longer knows the job.
const stateGone = "GONE"

func terminal(state string) bool {
	switch state {
	case "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD":
		return false
	}
	return true
}

// run is one job in progress.
type run struct {
	id, machine string
	launched    chan struct{}
	launchOnce  sync.Once
	launchErr   error
	stopped     chan struct{}
	done        chan struct{}
	update      chan struct{} // poked by setState and requestStop

	mu         sync.Mutex
	job        string
	state      jobState
	stopReason string
	stopDetail string
	stopGrace  time.Duration
	detached   bool // left running by a detached Close: no Result
	// adopted: a previous daemon's job (Adopt); its times are the job's.
	adopted bool
	// leaseLapsed: the peer lost contact with its federation for a lease
	// (lease.go); the job is killed at once.
	leaseLapsed bool
}

func (r *run) isDetached() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.detached
}

func (r *run) launch(err error) {
	r.launchOnce.Do(func() {
		r.launchErr = err
		close(r.launched)
	})
}

func (r *run) jobID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.job
}

func (r *run) setState(st jobState) {
	r.mu.Lock()
	r.state = st
	r.mu.Unlock()
	r.poke()
}

func (r *run) poke() {
	select {
	case r.update <- struct{}{}:
	default:
	}
}

func (r *run) requestStop(reason, detail string, grace time.Duration) {
	r.mu.Lock()
	if r.stopReason == "" {
		r.stopReason, r.stopDetail, r.stopGrace = reason, detail, grace
		close(r.stopped)
	}
	r.mu.Unlock()
	r.poke()
}

// credential is the run's user for sbatch: the run_as user, or nil for
// the peer's own.
func credential(b executor.BatchRun) *syscall.Credential {
	if !b.RunAs {
		return nil
	}
	return &syscall.Credential{Uid: b.UID, Gid: b.GID, Groups: []uint32{}}
}

// jobName is unique to the run: a restarted peer finds a job it had no
// time to journal by it.
func jobName(runNo uint64, spec *executor.TaskSpec, attempt int) string {
	return "coopgrid-" + spec.ID + "-" + strconv.Itoa(attempt) + "-r" + strconv.FormatUint(runNo, 10)
}

// sbatchArgs are the options of the run's job.
func (e *Executor) sbatchArgs(name string, m executor.MachineConfig, spec *executor.TaskSpec, b executor.BatchRun) []string {
	s := e.cfg.Settings
	args := []string{"--parsable", "--hold", "--job-name=" + name, "--comment=coopgrid task " + spec.ID,
		"--chdir=" + b.Work, "--output=" + b.Stdout, "--error=" + b.Stderr, "--open-mode=append",
		"--no-requeue", "--ntasks=1", "--nodes=1", "--nodelist=" + m.Name,
		"--cpus-per-task=" + strconv.FormatInt(max(1, spec.CPUs), 10)}
	if spec.MemoryBytes > 0 {
		args = append(args, "--mem="+strconv.FormatInt((spec.MemoryBytes+(1<<20)-1)>>20, 10)+"M")
	}
	if spec.GPUs > 0 {
		args = append(args, "--gres=gpu:"+strconv.FormatInt(spec.GPUs, 10))
	}
	if limit := e.cfg.Policy.WallClock(spec.WallClockLimit); limit > 0 {
		args = append(args, "--time="+slurmDuration(limit))
	}
	if s.Partition != "" {
		args = append(args, "--partition="+s.Partition)
	}
	if s.Account != "" {
		args = append(args, "--account="+s.Account)
	}
	if s.QoS != "" {
		args = append(args, "--qos="+s.QoS)
	}
	return args
}

// slurmDuration is d rounded up to a second, as D-HH:MM:SS.
func slurmDuration(d time.Duration) string {
	sec := int64((d + time.Second - 1) / time.Second)
	return fmt.Sprintf("%d-%02d:%02d:%02d", sec/86400, sec%86400/3600, sec%3600/60, sec%60)
}

// script is the job's batch script: it replaces itself with the task, in
// exactly the task's environment (env -i), so that the job's processes are
// the task's and scancel's signals reach it.
func script(spec *executor.TaskSpec, b executor.BatchRun) []byte {
	var sb strings.Builder
	sb.WriteString("#!/bin/sh\n# coopgrid task " + spec.ID + " attempt " + strconv.Itoa(b.Attempt) + "\n")
	sb.WriteString("exec /usr/bin/env -i")
	for _, kv := range b.Env {
		sb.WriteString(" " + shellQuote(kv))
	}
	// What Slurm allocated, in its own words: the job's ID and its node
	// (one: --nodes=1), which a gang part finds at its rank in the
	// hostfile (docs/SLURM.md, "Parallel jobs").
	sb.WriteString(" \"COOPGRID_SLURM_JOB_ID=$SLURM_JOB_ID\" \"COOPGRID_SLURM_NODELIST=$SLURM_JOB_NODELIST\" " + shellQuote(b.Exe))
	for _, a := range spec.Argv[1:] {
		sb.WriteString(" " + shellQuote(a))
	}
	sb.WriteString("\n")
	return []byte(sb.String())
}

// shellQuote quotes s for sh: inside single quotes nothing is special but
// the single quote itself.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// jobIDOf reads sbatch --parsable's "ID" or "ID;cluster".
func jobIDOf(out string) (string, error) {
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return "", fmt.Errorf("sbatch answered %q, not a job ID", clip(out, 100))
	}
	return id, nil
}
