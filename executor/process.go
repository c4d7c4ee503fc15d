package executor

import (
	"context"
	"errors"
	"fmt"
	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessConfig configures a ProcessExecutor.
type ProcessConfig struct {
	// TasksDir holds one directory per task: TasksDir/<id>/attempt-N/
	// (see docs/EXECUTOR.md). Created if missing. The daemon uses
	// DATA/tasks.
	TasksDir string
	// Machines are the machines this executor runs tasks for. A process
	// executor runs every task on the local host: machines are the slots
	// the owner offers on it.
	Machines []MachineConfig
	// Policy is the owner's policy for these machines.
	Policy Policy
	// RAPLRoot is where the powercap zones are read (default
	// DefaultRAPLRoot); DisableRAPL forces declared power.
	RAPLRoot    string
	DisableRAPL bool
	// EnergySampleInterval is how often RAPL is read while tasks run
	// (default DefaultEnergySampleInterval).
	EnergySampleInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// SupervisorPath is the binary re-executed, once, as the executor's
	// run supervisor (internal/supervise); default /proc/self/exe, the
	// running binary even if it was replaced on disk since.
	SupervisorPath string
	// Lease, when positive, is how long a run may go without the peer
	// renewing it before its supervisor kills it (docs/EXECUTOR.md, "The
	// run lease"). The executor renews every Lease/4 while Contact says
	// the peer is in touch with its federation.
	Lease time.Duration
	// Contact is when the peer last confirmed contact with its federation;
	// nil means always (the lease then only catches a stopped peer).
	Contact func() time.Time
	// CgroupRoot is where the cgroup hierarchies are mounted (default
	// /sys/fs/cgroup) and CgroupParent the cgroup, relative to each
	// hierarchy's root, under which every run gets its own (default
	// DefaultCgroupParent). DisableCgroups runs without: then no memory
	// or CPU limit can be enforced, and a process that leaves the run's
	// process group is out of reach (docs/EXECUTOR.md).
	CgroupRoot     string
	CgroupParent   string
	DisableCgroups bool
	// Landlock decides whether tasks that run as the peer's own user (no
	// run_as) run in a Landlock sandbox that hides HideDir (default: the
	// parent of TasksDir, the data directory) but their own directories:
	// LandlockAuto (the default) for a peer that is not root,
	// LandlockAlways, or LandlockOff. A non-root peer with a sandbox needs
	// neither run_as nor the unsafe opt-in.
	Landlock LandlockMode
	HideDir  string
	// DiskCheckInterval paces the check of each run's disk use against
	// the policy's MaxDiskBytes (default DefaultDiskCheckInterval).
	DiskCheckInterval time.Duration
	// JournalPath, when set, is the run journal (docs/EXECUTOR.md): every
	// run's start (with its pid) is appended and fsync'd before Start
	// returns, and its end once its process group is gone. The daemon uses
	// DATA/runs.jsonl (RunJournalFile). Journal bounds its growth.
	JournalPath string
	Journal     JournalOptions
}

// ProcessExecutor runs each task as a process group on the local host.
type ProcessExecutor struct {
	cfg   ProcessConfig
	log   *slog.Logger
	reg   *registry[*procRun]
	q     *resultQueue
	meter *raplMeter // nil: declared power
	// journal is nil without ProcessConfig.JournalPath.
	journal *runJournal
	// cgroups is nil when runs get no cgroup; cgpool hands its cgroups to
	// the runs and keeps them between runs.
	cgroups cgroupMaker
	cgpool  *cgroupPool
	// sandbox: tasks without run_as run in a Landlock sandbox.
	sandbox bool
	// markers hands out the machines' end markers, relative to TasksDir
	// (supervise.SlotMarker): each machine's runs reuse them, one per run
	// in progress (a machine with several CPUs runs several at once).
	markers *markerSet
	// copyBufs are the captures' buffers (*copyBuf), reused across runs.
	copyBufs sync.Pool
	// umask is the process's file mode creation mask, read once (-1:
	// unknown); nothing in the peer changes it.
	umask int
	// copierPath, when set (tests), replaces the output copier's binary
	// (the supervisor's); afterListing, for tests, runs between the
	// listing and the copy.
	copierPath   string
	afterListing func(work string)
	// lease and contact: ProcessConfig's, or SetLease's.
	lease   atomic.Int64 // nanoseconds
	contact atomic.Pointer[func() time.Time]

	// sup is the run supervisor, started on first use (supervisor); none
	// starts once supClosed.
	supMu     sync.Mutex
	sup       *supervise.Client
	supClosed bool

	seq         atomic.Uint64
	stopSampler chan struct{}
	closeOnce   sync.Once
}

var _ Executor = (*ProcessExecutor)(nil)

// procRun is one run in progress. The mutex orders the signals sent to the
// process group against its reaping: once groupDone is set no signal is
// sent, so a recycled process group ID is never signalled.
type procRun struct {
	id, machine string
	done        chan struct{}
	// launched is closed once the run's process is spawned and journaled,
	// or the run has ended before spawning one; Start waits for it.
	// launchErr (set before) means no Result will come.
	launched   chan struct{}
	launchOnce sync.Once
	launchErr  error
	// stopped is closed on the first stop request, to end a wait at the
	// gate (TaskSpec.Gate).
	stopped chan struct{}

	mu         sync.Mutex
	pgid       int            // 0 until the process started
	sr         *supervise.Run // with pgid: the run in the supervisor, which signals its group
	groupDone  bool
	stopReason string
	stopDetail string
	stopGrace  time.Duration // of the first stop request
	signalled  bool          // SIGTERM or SIGKILL sent on a stop
	killTimer  *time.Timer
	cg         runCgroup // nil without cgroups
}

// NewProcessExecutor checks the configuration, creates TasksDir and opens
// the RAPL counters if they are readable.
func NewProcessExecutor(cfg ProcessConfig) (*ProcessExecutor, error) {
	if cfg.TasksDir == "" {
		return nil, errors.New("process executor: empty tasks directory")
	}
	dir, err := filepath.Abs(cfg.TasksDir)
	if err != nil {
		return nil, fmt.Errorf("process executor: tasks directory: %w", err)
	}
	cfg.TasksDir = dir
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("process executor: policy: %w", err)
	}
	if cfg.EnergySampleInterval < 0 {
		return nil, fmt.Errorf("process executor: negative energy sample interval %v", cfg.EnergySampleInterval)
	}
	if cfg.EnergySampleInterval == 0 {
		cfg.EnergySampleInterval = DefaultEnergySampleInterval
	}
	if cfg.RAPLRoot == "" {
		cfg.RAPLRoot = DefaultRAPLRoot
	}
	if cfg.SupervisorPath == "" {
		cfg.SupervisorPath = "/proc/self/exe"
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = DefaultCgroupParent
	}
	if cfg.DiskCheckInterval <= 0 {
		cfg.DiskCheckInterval = DefaultDiskCheckInterval
	}
	if cfg.Lease < 0 {
		return nil, fmt.Errorf("process executor: negative lease %v", cfg.Lease)
	}
	if cfg.HideDir == "" {
		cfg.HideDir = filepath.Dir(dir)
	}
	sandbox := cfg.sandboxed()
	if err := checkProtection(cfg.Policy, sandbox); err != nil {
		return nil, fmt.Errorf("process executor: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	reg, err := newRegistry[*procRun](cfg.Machines)
	if err != nil {
		return nil, fmt.Errorf("process executor: %w", err)
	}
	// Searchable but not listable by others, so that a run-as user can
	// reach its own work directory.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("process executor: %w", err)
	}
	if err := os.Mkdir(filepath.Join(dir, supervise.MarkersDir), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("process executor: %w", err)
	}
	slots := map[string]int{}
	for i, m := range machineList(reg.machines) {
		slots[m.Name] = i
	}
	markers := &markerSet{slots: slots, inUse: map[string][]bool{}}
	cg, err := openCgroups(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("process executor: %w", err)
	}
	e := &ProcessExecutor{cfg: cfg, log: log, reg: reg, q: newResultQueue(), stopSampler: make(chan struct{}), cgroups: cg, sandbox: sandbox, markers: markers,
		umask: readUmask()}
	if cg != nil {
		e.cgpool = newCgroupPool(cg, cfg.Policy.cgroupLimits(), slots)
	}
	e.SetLease(cfg.Lease, cfg.Contact)
	if cfg.JournalPath != "" {
		if e.journal, err = openRunJournal(cfg.JournalPath, cfg.Journal, dir); err != nil {
			return nil, fmt.Errorf("process executor: %w", err)
		}
	}
	go e.renewLeases(e.stopSampler)
	if !cfg.DisableRAPL {
		m, err := newRAPLMeter(cfg.RAPLRoot)
		if err != nil {
			log.Info("energy: RAPL counters not usable, using declared busy power", "err", err)
		} else {
			e.meter = m
			go m.runSampler(cfg.EnergySampleInterval, e.stopSampler)
			log.Info("energy: reading RAPL counters", "zones", len(m.zones), "root", cfg.RAPLRoot)
		}
	}
	if cfg.Policy.UnsafeRunAsPeerUser {
		log.Warn("executor: UNSAFE: the machines file's policy sets unsafe_run_as_peer_user: tasks run as the peer's own user and can read its keys and write its data directory",
			"uid", os.Geteuid())
	}
	return e, nil
}

// Unprotected says whether this executor's tasks run with the peer's own
// user and privileges: the policy allows something, there is no run_as
// user and no sandbox, which NewProcessExecutor accepts only with the
// owner's UnsafeRunAsPeerUser. The peer declares it in its machines'
// registration, so that every member's `peer machines` shows it.
func (e *ProcessExecutor) Unprotected() bool {
	p := e.cfg.Policy
	return p.RunAs == "" && !e.sandbox && (len(p.Allow) > 0 || p.AllowAny)
}

// EnergySource is where this executor's energy figures come from: RAPL
// when the counters were readable at start, otherwise declared.
func (e *ProcessExecutor) EnergySource() EnergySource {
	if e.meter != nil {
		return EnergyRAPL
	}
	return EnergyDeclared
}

// MeasuredPowerMilliW is the whole host's draw, averaged between the two
// latest RAPL readings (every EnergySampleInterval), and whether RAPL gives
// one. It is the host's, not a machine's: a peer whose machines file
// declares several machines cannot split it.
func (e *ProcessExecutor) MeasuredPowerMilliW() (int64, bool) {
	if e.meter == nil {
		return 0, false
	}
	return e.meter.power()
}

// Machines returns the executor's machines, sorted by name.
func (e *ProcessExecutor) Machines() []MachineConfig { return machineList(e.reg.machines) }

// Results delivers one Result per accepted Start.
func (e *ProcessExecutor) Results() <-chan Result { return e.q.out }

// Running lists the tasks started and not yet ended.
func (e *ProcessExecutor) Running() []string { return e.reg.ids() }

// Start launches spec on machine in the background. See the package
// documentation for when it returns an error.
func (e *ProcessExecutor) Start(ctx context.Context, machine string, spec TaskSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start %s: %w", spec.ID, err)
	}
	spec = cloneSpec(spec)
	run := &procRun{id: spec.ID, machine: machine, done: make(chan struct{}), launched: make(chan struct{}), stopped: make(chan struct{})}
	m, err := e.reg.reserve(machine, spec.ID, run)
	if err != nil {
		return err
	}
	go func() {
		defer e.reg.runs.Done()
		res := e.execute(m, run, &spec)
		// The machine is free before the result is visible, so a consumer
		// may start the next task on it as soon as it reads this one.
		e.reg.release(run.machine, run.id)
		if run.launchErr == nil {
			e.q.push(res)
		}
		close(run.done)
		e.log.Debug("task ended", "task", res.ID, "machine", res.Machine, "reason", res.Reason, "exit", res.ExitCode)
	}()
	// Wait until the run's first journal record is durable (or the run
	// has failed before anything ran), so that whoever reports the start
	// onward reports something this host has recorded. The wait is
	// bounded by local work (directories, inputs, one fsync), not by the
	// task.
	<-run.launched
	return run.launchErr
}

// launch releases Start; err means no Result will come.
func (r *procRun) launch(err error) {
	r.launchOnce.Do(func() {
		r.launchErr = err
		close(r.launched)
	})
}

// Stop ends task id: SIGTERM to its process group, then SIGKILL after
// grace (at once if grace <= 0). It returns when the task's Result is
// queued, or with ctx's error (the kill still proceeds).
func (e *ProcessExecutor) Stop(ctx context.Context, id string, grace time.Duration) error {
	run, ok := e.reg.get(id)
	if !ok {
		return fmt.Errorf("stop %s: %w", id, ErrUnknownTask)
	}
	run.requestStop(ReasonStopped, "stopped on request", grace)
	select {
	case <-run.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
}

// Close refuses new tasks, stops the running ones with the policy's kill
// grace and waits for them to end (or for ctx). Results stays open until
// every result has been read, then is closed: Close does not wait for the
// consumer.
func (e *ProcessExecutor) Close(ctx context.Context) error {
	var err error
	e.closeOnce.Do(func() {
		running, _ := e.reg.close()
		ids := make([]string, len(running))
		for i, r := range running {
			ids[i] = r.id
		}
		err = stopAll(ctx, ids, e.cfg.Policy.killGrace(), e.Stop)
		// Results is closed after the last run has queued its result,
		// even if ctx ends first, so no result is lost. The journal stays
		// open until the last run has recorded its end.
		go func() {
			e.reg.runs.Wait()
			close(e.stopSampler)
			e.closeSupervisor()
			if e.cgpool != nil {
				e.cgpool.close()
			}
			if e.journal != nil {
				if jerr := e.journal.close(); jerr != nil {
					e.log.Warn("run journal: close", "err", jerr)
				}
			}
			e.q.finish()
		}()
		waitGroup(ctx, &e.reg.runs)
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("close executor: %w", ctx.Err())
		}
	})
	return err
}

func waitGroup(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func cloneSpec(s TaskSpec) TaskSpec {
	s.Argv = append([]string(nil), s.Argv...)
	if s.Env != nil {
		env := make(map[string]string, len(s.Env))
		for k, v := range s.Env {
			env[k] = v
		}
		s.Env = env
	}
	if s.Inputs != nil {
		in := make(map[string][]byte, len(s.Inputs))
		for k, v := range s.Inputs {
			in[k] = v
		}
		s.Inputs = in
	}
	s.OutputPatterns = append([]string(nil), s.OutputPatterns...)
	return s
}

// requestStop records why the task is being stopped and signals its group
// if it has started. A run not started yet sees stopReason before starting
// and never starts.
func (r *procRun) requestStop(reason, detail string, grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopReason == "" {
		r.stopReason, r.stopDetail, r.stopGrace = reason, detail, grace
		close(r.stopped)
	}
	if r.pgid == 0 || r.groupDone {
		return
	}
	r.signalLocked(grace)
}

func (r *procRun) signalLocked(grace time.Duration) {
	if grace <= 0 {
		r.killLocked()
		return
	}
	if r.signalled {
		// A second stop with a grace keeps the first deadline.
		return
	}
	r.signalled = true
	r.signalGroup(unix.SIGTERM)
	if r.cg != nil {
		// Processes that left the group (setsid) get it too.
		r.cg.signal(unix.SIGTERM)
	}
	r.killTimer = time.AfterFunc(grace, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.killLocked()
	})
}

func (r *procRun) killLocked() {
	if r.groupDone {
		return
	}
	r.signalled = true
	r.signalGroup(unix.SIGKILL)
	if r.cg != nil {
		r.cg.signal(unix.SIGKILL)
	}
}

// signalGroup signals the run's process group through its supervisor,
// which sends nothing once the task is reaped (the group ID may be
// recycled then). A supervisor gone took the task with it; its group
// gets the signal directly.
func (r *procRun) signalGroup(sig unix.Signal) {
	if err := r.sr.Signal(sig); err != nil {
		_ = unix.Kill(-r.pgid, sig)
	}
}

// execute runs one task to its end and returns its result. It runs on its
// own goroutine.
// When the executor keeps a journal, the run's records are written here:
// no_process for a run that fails before spawning, start (before the gate
// lets the task run) and end (once the group is gone) for the others. A
// start or no_process record that cannot be written ends the run with
// launchErr set: nothing of the task ran, and no Result is delivered.
func (e *ProcessExecutor) execute(m MachineConfig, run *procRun, spec *TaskSpec) (res Result) {
	pol := e.cfg.Policy
	res = Result{ID: spec.ID, Machine: m.Name, ExitCode: -1, EnergySource: EnergyDeclared}
	// Every path releases Start; the ones below do it with their own error.
	defer run.launch(nil)
	var runNo uint64
	if e.journal != nil {
		runNo = e.journal.newRun()
	}
	spawned := false
	fail := func(te *taskError) Result {
		res.Reason, res.Detail = te.reason, te.detail
		res.DoneMFlop = priorDone(spec)
		if res.Start.IsZero() {
			res.Start = time.Now()
		}
		if res.End.IsZero() {
			res.End = res.Start
		}
		e.log.Info("task failed", "task", spec.ID, "machine", m.Name, "reason", te.reason, "detail", te.detail)
		if !spawned && e.journal != nil {
			err := e.journal.append(JournalRecord{Event: JournalNoProcess, Run: runNo, Task: spec.ID, Machine: m.Name,
				Attempt: res.Attempt, AtUs: res.End.UnixMicro(), Reason: te.reason})
			if err != nil {
				e.log.Error("run journal: cannot record a run that ended before starting; the run is dropped", "task", spec.ID, "err", err)
				run.launch(fmt.Errorf("start %s: %w: %v", spec.ID, ErrJournal, err))
			}
		}
		return res
	}

	// Everything that needs no file system comes first, so a refused task
	// leaves nothing behind.
	if te := validateSpec(spec, true); te != nil {
		return fail(te)
	}
	var inBytes int64
	for _, b := range spec.Inputs {
		inBytes += int64(len(b))
	}
	if max := pol.maxInputBytes(); inBytes > max {
		return fail(failf(ReasonInputTooLarge, "inputs take %d bytes, the machine owner's limit is %d", inBytes, max))
	}
	// Checked here so that a refused task leaves nothing behind; the
	// supervisor checks again, as it execs.
	if _, te := pol.resolveExecutable(spec.Argv[0], ""); te != nil {
		return fail(te)
	}
	uid, gid, runAs, te := pol.runAs()
	if te != nil {
		return fail(te)
	}

	dirs, te := e.prepareDirs(spec, runAs, uid, gid)
	if te != nil {
		return fail(te)
	}
	res.Attempt, res.WorkDir, res.CheckpointDir = dirs.attempt, dirs.work, dirs.checkpoint
	res.StdoutPath, res.StderrPath = dirs.stdout, dirs.stderr

	env := e.environment(spec, m, dirs)
	stdout, err := newCapture(dirs.stdout, pol.maxLogBytes(), &e.copyBufs)
	if err != nil {
		return fail(failf(ReasonStartFailed, "stdout: %v", err))
	}
	defer stdout.abandon()
	stderr, err := newCapture(dirs.stderr, pol.maxLogBytes(), &e.copyBufs)
	if err != nil {
		return fail(failf(ReasonStartFailed, "stderr: %v", err))
	}
	defer stderr.abandon()

	// The supervisor (internal/supervise, one per executor) holds the run:
	// it starts the task and holds it before its first instruction until
	// the gate opens, which happens only once the start is journaled; it
	// kills the run when the lease lapses or this peer dies.
	sc := &supervise.Config{Argv: spec.Argv, Env: env, Dir: dirs.work, Allow: pol.Allow, AllowAny: pol.AllowAny,
		Path: pol.path(), Rlimits: pol.rlimits(e.cgroups == nil), LeaseMs: time.Duration(e.lease.Load()).Milliseconds()}
	if runAs {
		sc.RunAs = &supervise.Credential{UID: uid, GID: gid}
	} else if e.sandbox {
		sc.Landlock = &supervise.Landlock{Hide: e.cfg.HideDir, Allow: []string{dirs.root}}
		if dirs.checkpoint != "" {
			sc.Landlock.Allow = append(sc.Landlock.Allow, dirs.checkpoint)
		}
	}
	var goneAt time.Time // when the group was found empty
	var survivors bool   // live processes left in the group or cgroup after SIGKILL
	var supErr error     // the supervisor died under the run
	var supVacant bool   // the supervisor found the run's cgroups vacant at its end
	if e.cgpool != nil {
		// A cgroup no other live run holds; it goes back to the machine's
		// pool only once this run is over and it is checked vacant.
		cg, err := e.cgpool.take(m.Name)
		if err != nil {
			return fail(failf(ReasonStartFailed, "%v", err))
		}
		defer func() {
			if survivors {
				e.log.Warn("task: processes of the run's cgroup survive SIGKILL; the cgroup is left", "task", spec.ID)
				return
			}
			// Kept only when the run ended known and whole: its supervisor
			// (which writes tasks into it) alive to report it.
			if err := e.cgpool.give(m.Name, cg, supErr == nil, supVacant); err != nil {
				e.log.Warn("task: remove the run's cgroup", "task", spec.ID, "err", err)
			}
		}()
		run.mu.Lock()
		run.cg = cg
		run.mu.Unlock()
		sc.Cgroups = cg.procsFiles()
		if sc.Landlock != nil {
			for _, f := range sc.Cgroups {
				sc.Landlock.Allow = append(sc.Landlock.Allow, filepath.Dir(f))
			}
		}
	}

	run.mu.Lock()
	if run.stopReason != "" {
		reason, detail := run.stopReason, run.stopDetail
		run.mu.Unlock()
		return fail(failf(reason, "%s before the process started", detail))
	}
	run.mu.Unlock()

	sup, err := e.supervisor()
	if err != nil {
		return fail(failf(ReasonStartFailed, "%v", err))
	}
	key := spec.ID + "#" + strconv.FormatUint(e.seq.Add(1), 10)
	if e.meter != nil {
		e.meter.begin(key)
	}
	meterEnd := func() (uint64, bool) {
		if e.meter != nil {
			return e.meter.end(key)
		}
		return 0, false
	}
	res.Start = time.Now()
	// The end marker is where the supervisor records when the run was
	// over, for a next boot to read should this peer die first: the
	// machine's, which its previous run released before it ended.
	marker, releaseMarker := e.markers.take(m.Name)
	// The supervisor has released the marker's lock when the run is over,
	// which is when execute returns.
	defer releaseMarker()
	sr, err := sup.OpenFds(filepath.Join(e.cfg.TasksDir, marker), sc, stdout.w, stderr.w)
	if err != nil {
		supErr = err
		meterEnd()
		return fail(failf(ReasonStartFailed, "%v", err))
	}
	pid, refused, err := sr.Held()
	if err != nil || refused != nil {
		supErr = err
		// Nothing of the task ran: refused before its first instruction
		// (not allowed, limits that cannot be set), or no supervisor.
		meterEnd()
		if err != nil {
			return fail(failf(ReasonStartFailed, "%v", err))
		}
		return fail(failf(refused.InitReason, "%s", refused.InitErr))
	}
	spawned = true
	// The task is held stopped; its process group is its pid.
	killRun := func() {
		_ = unix.Kill(-pid, unix.SIGKILL)
		if run.cg != nil {
			run.cg.kill(5 * time.Second)
		}
	}
	// abort ends a run whose gate never opened: nothing of the task ran.
	abort := func() {
		_ = sr.Abort()
		if _, err := sr.Wait(); err != nil {
			supErr = err
		}
		killRun()
		killGroup(pid, 5*time.Second)
		meterEnd()
		res.End = time.Now()
	}
	notRun := false // the gate stayed closed (journaled with the end)
	stdout.started()
	stderr.started()
	if e.journal != nil {
		err := e.journal.append(JournalRecord{Event: JournalStart, Run: runNo, Task: spec.ID, Machine: m.Name,
			Attempt: dirs.attempt, PID: pid, AtUs: res.Start.UnixMicro(), Marker: marker})
		if err != nil {
			// The gate is closed: nothing of the task ran. Without a
			// start record it must not run at all.
			abort()
			e.log.Error("run journal: cannot record a start; the task is not run", "task", spec.ID, "err", err)
			run.launch(fmt.Errorf("start %s: %w: %v", spec.ID, ErrJournal, err))
			return fail(failf(ReasonStartFailed, "run journal: %v", err))
		}
		defer func() {
			if goneAt.IsZero() {
				goneAt = time.Now()
			}
			code := res.ExitCode
			err := e.journal.appendEnd(JournalRecord{Event: JournalEnd, Run: runNo, Task: spec.ID, Machine: m.Name,
				Attempt: dirs.attempt, PID: pid, AtUs: goneAt.UnixMicro(), ExitUs: res.End.UnixMicro(),
				Reason: res.Reason, ExitCode: &code, Survivors: survivors, NotRun: notRun})
			if err != nil {
				// The result still goes out: the run happened. The record
				// is written with the next append that succeeds (or at
				// close); if none does, the next boot marks the run
				// abandoned, with a later (still upper-bound) time.
				e.log.Error("run journal: cannot record a run's end yet", "task", spec.ID, "err", err)
			}
		}()
	}
	run.launch(nil)
	if spec.Gate != nil && !awaitGate(spec.Gate, run.stopped) {
		abort()
		notRun = true
		return fail(failf(ReasonStopped, "the start was not confirmed: nothing of the task ran"))
	}
	if spec.Gate != nil {
		res.Start = time.Now() // the task's own start; the journal has the spawn's
	}
	var startByUs int64
	if spec.StartBy != nil {
		if by := spec.StartBy(); !by.IsZero() {
			startByUs = by.UnixMicro()
		}
	}
	// Open the gate.
	if err := sr.Release(startByUs); err != nil {
		e.log.Warn("task gate", "task", spec.ID, "err", err)
	}
	stopDiskWatch := e.watchDisk(run, dirs, pol.MaxDiskBytes)
	defer stopDiskWatch()

	run.mu.Lock()
	run.pgid, run.sr = pid, sr
	if run.stopReason != "" {
		// Stopped while starting.
		run.signalLocked(run.stopGrace)
	}
	run.mu.Unlock()

	var wallTimer *time.Timer
	if limit := pol.wallClock(spec.WallClockLimit); limit > 0 {
		wallTimer = time.AfterFunc(limit, func() {
			run.requestStop(ReasonTimeout, fmt.Sprintf("wall-clock limit %v reached", limit), pol.killGrace())
		})
	}

	st, err := sr.Wait()
	supErr, supVacant = err, st.CgroupsVacant
	res.End = time.Now()
	microJ, raplOK := meterEnd()
	if wallTimer != nil {
		wallTimer.Stop()
	}

	run.mu.Lock()
	run.groupDone = true
	if run.killTimer != nil {
		run.killTimer.Stop()
	}
	stopReason, stopDetail, signalled := run.stopReason, run.stopDetail, run.signalled
	run.mu.Unlock()
	if supErr != nil {
		// The supervisor died: the task died with it (its death signal);
		// what it left dies now. The run ended because of this host, not
		// because of the task.
		killRun()
	}
	// The leader is gone; whatever it left in its group goes too.
	if survivors = killGroup(pid, 5*time.Second); survivors {
		e.log.Warn("task: processes of the group survive SIGKILL", "task", spec.ID, "pgid", pid)
	}
	// The cgroup holds every process of the run, those that left the
	// group (setsid) included.
	if run.cg != nil && run.cg.kill(5*time.Second) {
		survivors = true
	}
	goneAt = time.Now()
	// One shared deadline for both streams.
	cut := time.Now().Add(2 * time.Second)
	res.StdoutTruncated = stdout.finish(cut)
	res.StderrTruncated = stderr.finish(cut)

	if raplOK {
		res.EnergyMilliJ, res.EnergySource = int64((microJ+500)/1000), EnergyRAPL
	} else {
		res.EnergyMilliJ, res.EnergySource = milliJ(m.BusyMilliW(), res.End.Sub(res.Start)), EnergyDeclared
	}

	if supErr != nil {
		e.log.Error("task: its run supervisor died; the run was killed with it", "task", spec.ID, "err", supErr)
		res.Reason, res.Detail, res.MachineFailed = ReasonStopped, supErr.Error()+": the task was killed with it", true
		res.DoneMFlop = estimateDone(spec, m.MFLOPS(), res.End.Sub(res.Start))
		return res
	}
	ws := syscall.WaitStatus(st.WaitStatus)
	cpu := time.Duration(st.UserUs+st.SysUs) * time.Microsecond
	if st.InitReason != "" {
		// The supervisor refused to let the task run: nothing of it ran.
		notRun = true
		res.Reason, res.Detail = st.InitReason, st.InitErr
		switch {
		case st.InitReason == supervise.InitStartLate:
			res.Reason, res.LeaseLapsed = ReasonStopped, true
		case st.LeaseLapsed != "":
			// Killed at the gate: the peer stopped renewing the lease.
			res.Reason, res.Detail, res.LeaseLapsed = ReasonStopped, "lease lapsed at the gate: "+st.LeaseLapsed, true
		case st.InitReason == supervise.InitNotRun:
			res.Reason = ReasonStopped
		}
		res.DoneMFlop = priorDone(spec)
		return res
	}
	// The run ended while this peer could not see it (paused, or busy):
	// it ended when the supervisor found it gone, which the journal and
	// the result record (and the declared estimate follows), not when
	// this peer noticed.
	if at := time.UnixMicro(st.GoneAtUs); st.GoneAtUs > 0 && at.Before(goneAt) && at.After(res.Start) {
		goneAt = at
		if at.Before(res.End) {
			res.End = at
			if res.EnergySource == EnergyDeclared {
				res.EnergyMilliJ = milliJ(m.BusyMilliW(), res.End.Sub(res.Start))
			}
		}
	}
	if st.LeaseLapsed != "" {
		res.LeaseLapsed = true
		if stopReason == "" {
			stopReason, stopDetail, signalled = ReasonStopped, "lease lapsed: "+st.LeaseLapsed, true
		}
		// The supervisor killed the run while this peer could not act
		// (stopped, or cut off): its end is when it died, not when the
		// peer came back to see it.
		if at := time.UnixMicro(st.KilledAtUs); st.KilledAtUs > 0 && at.Before(goneAt) && at.After(res.Start) {
			goneAt = at
			if at.Before(res.End) {
				res.End = at
			}
		}
	}
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	default:
		res.ExitCode = -1
	}
	switch {
	case stopReason != "" && signalled:
		res.Reason, res.Detail = stopReason, stopDetail
	case ws.Signaled() && pol.MaxCPUSeconds > 0 && (ws.Signal() == syscall.SIGXCPU ||
		ws.Signal() == syscall.SIGKILL && cpu >= time.Duration(pol.MaxCPUSeconds)*time.Second):
		res.Reason = ReasonCPULimit
		res.Detail = fmt.Sprintf("CPU-time limit %ds reached (%v used)", pol.MaxCPUSeconds, cpu.Round(time.Millisecond))
	case ws.Signaled():
		res.Reason, res.Detail = ReasonSignaled, "killed by signal "+unix.SignalName(ws.Signal())
	case res.ExitCode != 0:
		res.Reason, res.Detail = ReasonExitNonzero, fmt.Sprintf("exit status %d", res.ExitCode)
	default:
		res.Reason = ReasonOK
	}

	outs, skipped, te := e.outputs(spec, dirs, runAs, uid, gid)
	if len(skipped) > 0 {
		note := "outputs skipped: " + strings.Join(skipped, "; ")
		if res.Detail != "" {
			note = res.Detail + "; " + note
		}
		res.Detail = note
	}
	if te != nil {
		if res.Reason == ReasonOK {
			res.Reason, res.Detail = te.reason, te.detail
		} else {
			res.Detail += "; " + te.detail
		}
	} else {
		res.Outputs = outs
	}
	if res.Reason == ReasonOK {
		res.DoneMFlop = spec.SizeMFlop
	} else {
		res.DoneMFlop = estimateDone(spec, m.MFLOPS(), res.End.Sub(res.Start))
	}
	return res
}

// taskDirs is the layout of one attempt.
type taskDirs struct {
	attempt                         int
	root, work, tmp, stdout, stderr string
	checkpoint                      string
}

// prepareDirs creates TasksDir/<id>/attempt-N/{work,tmp} with a fresh N,
// the checkpoint directory, and writes the inputs.
func (e *ProcessExecutor) prepareDirs(spec *TaskSpec, runAs bool, uid, gid uint32) (taskDirs, *taskError) {
	var d taskDirs
	taskDir := filepath.Join(e.cfg.TasksDir, spec.ID)
	// One mkdir, not MkdirAll's stat and mkdir: TasksDir exists.
	if err := os.Mkdir(taskDir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		if err := os.MkdirAll(taskDir, 0o711); err != nil {
			return d, failf(ReasonStartFailed, "task directory: %v", err)
		}
	}
	for n := 1; ; n++ {
		if n > 100000 {
			return d, failf(ReasonStartFailed, "task directory %s: too many attempts", taskDir)
		}
		p := filepath.Join(taskDir, "attempt-"+strconv.Itoa(n))
		err := os.Mkdir(p, 0o711)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return d, failf(ReasonStartFailed, "attempt directory: %v", err)
		}
		// Explicit mode: the umask must not make it unsearchable for a
		// run-as user (a umask that leaves 0711 whole needs no chmod).
		if e.umaskStrips(0o711) {
			if err := os.Chmod(p, 0o711); err != nil {
				return d, failf(ReasonStartFailed, "attempt directory: %v", err)
			}
		}
		d.attempt, d.root = n, p
		break
	}
	d.work = filepath.Join(d.root, "work")
	d.tmp = filepath.Join(d.root, "tmp")
	d.stdout = filepath.Join(d.root, "stdout")
	d.stderr = filepath.Join(d.root, "stderr")
	for _, p := range []string{d.work, d.tmp} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return d, failf(ReasonStartFailed, "%v", err)
		}
	}
	d.checkpoint = spec.CheckpointDir
	if d.checkpoint == "" && spec.Checkpointable {
		d.checkpoint = filepath.Join(taskDir, "checkpoint")
	}
	if d.checkpoint != "" {
		if err := os.MkdirAll(d.checkpoint, 0o700); err != nil {
			return d, failf(ReasonStartFailed, "checkpoint directory: %v", err)
		}
	}
	if te := writeInputs(d.work, spec); te != nil {
		return d, te
	}
	if runAs {
		for _, p := range []string{d.work, d.tmp, d.checkpoint} {
			if p == "" {
				continue
			}
			if err := checkTraversable(filepath.Dir(p), uid, gid); err != nil {
				return d, failf(ReasonStartFailed, "run-as user cannot reach %s: %v", p, err)
			}
			if err := chownTree(p, uid, gid); err != nil {
				return d, failf(ReasonStartFailed, "give %s to the run-as user: %v", p, err)
			}
		}
	}
	return d, nil
}

// umaskStrips says whether the umask may clear bits of mode.
func (e *ProcessExecutor) umaskStrips(mode os.FileMode) bool {
	return e.umask < 0 || os.FileMode(e.umask)&mode != 0
}

// readUmask is the process's umask from /proc/self/status (Linux 4.7+),
// -1 if it cannot be read: reading it with umask(2) would change it for a
// moment under the other goroutines.
func readUmask() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 8, 32); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

// writeInputs creates the input files in a fresh work directory. Names were
// validated; O_EXCL and O_NOFOLLOW keep a write from landing anywhere else.
func writeInputs(work string, spec *TaskSpec) *taskError {
	names := make([]string, 0, len(spec.Inputs))
	for n := range spec.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	exeInput := ""
	if a0 := spec.Argv[0]; !filepath.IsAbs(a0) && strings.Contains(a0, "/") {
		exeInput = filepath.Clean(a0)
	}
	for _, n := range names {
		c := filepath.Clean(n)
		p := filepath.Join(work, c)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return failf(ReasonStartFailed, "input %q: %v", n, err)
		}
		mode := os.FileMode(0o644)
		if c == exeInput {
			mode = 0o755
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
		if err != nil {
			return failf(ReasonStartFailed, "input %q: %v", n, err)
		}
		_, err = f.Write(spec.Inputs[n])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return failf(ReasonStartFailed, "input %q: %v", n, err)
		}
	}
	return nil
}

// environment is the task's whole environment: a small base, the reserved
// COOPGRID_* and CHECKPOINT_DIR variables, then the job's own variables
// (which may override the base but not the reserved ones).
func (e *ProcessExecutor) environment(spec *TaskSpec, m MachineConfig, d taskDirs) []string {
	env := map[string]string{
		"PATH":              e.cfg.Policy.path(),
		"HOME":              d.work,
		"TMPDIR":            d.tmp,
		"LANG":              "C.UTF-8",
		"COOPGRID_TASK_ID":  spec.ID,
		"COOPGRID_MACHINE":  m.Name,
		"COOPGRID_ATTEMPT":  strconv.Itoa(d.attempt),
		"COOPGRID_WORK_DIR": d.work,
		"COOPGRID_PROGRESS": filepath.Join(d.work, ProgressFile),
	}
	if d.checkpoint != "" {
		env["CHECKPOINT_DIR"] = d.checkpoint
	}
	for k, v := range spec.PeerEnv {
		if _, own := env[k]; !own {
			if rel, ok := strings.CutPrefix(v, "./"); ok {
				v = filepath.Join(d.work, rel)
			}
			env[k] = v
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// rlimits are the per-process limits of the policy. max_processes is an
// RLIMIT_NPROC only without a cgroup (withNproc): the cgroup's pids limit
// counts the run's own processes, root's included, where RLIMIT_NPROC
// counts every process of the user and spares root.
func (p Policy) rlimits(withNproc bool) []supervise.Rlimit {
	var ls []supervise.Rlimit
	if p.MaxCPUSeconds > 0 {
		// SIGXCPU at the soft limit lets the task save a checkpoint; the
		// hard limit a second later is SIGKILL.
		ls = append(ls, supervise.Rlimit{Resource: unix.RLIMIT_CPU, Name: "RLIMIT_CPU", Cur: p.MaxCPUSeconds, Max: p.MaxCPUSeconds + 1})
	}
	if p.MaxAddressSpaceBytes > 0 {
		ls = append(ls, supervise.Rlimit{Resource: unix.RLIMIT_AS, Name: "RLIMIT_AS", Cur: p.MaxAddressSpaceBytes, Max: p.MaxAddressSpaceBytes})
	}
	if p.MaxProcesses > 0 && withNproc {
		ls = append(ls, supervise.Rlimit{Resource: unix.RLIMIT_NPROC, Name: "RLIMIT_NPROC", Cur: p.MaxProcesses, Max: p.MaxProcesses})
	}
	return ls
}

// killGroup SIGKILLs the process group until no live process is left in
// it, for at most wait. It reports whether some survived. Zombies do not
// count: they are dead, and their parent (the system's init for orphans)
// reaps them.
func killGroup(pgid int, wait time.Duration) (survivors bool) {
	deadline := time.Now().Add(wait)
	for {
		if err := unix.Kill(-pgid, unix.SIGKILL); errors.Is(err, unix.ESRCH) {
			return false
		}
		if !groupAlive(pgid) {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// groupAlive reports whether a process that is not a zombie is in the
// process group, by scanning /proc.
func groupAlive(pgid int) bool { return len(supervise.GroupMembers(pgid)) > 0 }

// capture writes one of the task's streams to a file, keeping at most max
// bytes and draining the rest so the task never blocks on a full pipe.
// The file is created with the stream's first byte: most tasks leave one
// stream, or both, empty, and an inode per stream and run was a good
// part of a short task's cost on ext4 (issue 22). A stream with no file
// is empty.
type capture struct {
	path      string
	file      *os.File // nil until the first byte
	r         *os.File
	w         int // the write end, for the task; -1 once closed
	max       int64
	done      chan struct{}
	truncated bool
	running   bool
	bufs      *sync.Pool // of *copyBuf
}

// copyBuf is a capture's copy buffer, reused across runs.
type copyBuf [32 << 10]byte

// newCapture makes the stream's pipe: the read end non-blocking, read
// through the poller (so that finish can cut it at a deadline), the write
// end a plain blocking descriptor that only the supervisor and the task
// use. (os.Pipe made both ends os.Files, non-blocking, polled, and the
// write end blocking again to be passed on: ten system calls per stream
// and run where four do, issue 22.)
func newCapture(path string, max int64, bufs *sync.Pool) (*capture, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETFL, 0); err != nil { // blocking, for the task
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, fmt.Errorf("pipe: %w", err)
	}
	return &capture{path: path, r: os.NewFile(uintptr(p[0]), "|0"), w: p[1], max: max, done: make(chan struct{}), bufs: bufs}, nil
}

// closeW closes the parent's write end, once.
func (c *capture) closeW() {
	if c.w >= 0 {
		unix.Close(c.w)
		c.w = -1
	}
}

// write keeps b in the file, created on first use; a file that cannot be
// created or written cuts the stream (truncated).
func (c *capture) write(b []byte) bool {
	if c.file == nil {
		f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return false
		}
		c.file = f
	}
	_, err := c.file.Write(b)
	return err == nil
}

// started closes the parent's write end (the child holds its own) and
// starts copying.
func (c *capture) started() {
	c.closeW()
	c.running = true
	go func() {
		defer close(c.done)
		bp, ok := c.bufs.Get().(*copyBuf)
		if !ok {
			bp = new(copyBuf)
		}
		defer c.bufs.Put(bp)
		buf := bp[:]
		var n int64
		for {
			k, err := c.r.Read(buf)
			if k > 0 {
				keep := int64(k)
				if n+keep > c.max {
					keep = c.max - n
					c.truncated = true
				}
				if keep > 0 {
					if !c.write(buf[:keep]) {
						c.truncated = true
						n = c.max // stop writing, keep draining
					} else {
						n += keep
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
}

// finish waits for the copy to end. The group is dead by now, so the pipe
// is closed unless a process escaped the group holding it; then the read
// is cut at the deadline.
func (c *capture) finish(deadline time.Time) (truncated bool) {
	if !c.running {
		return false
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.r.SetReadDeadline(time.Now())
		<-c.done
	}
	c.running = false
	c.r.Close()
	if c.file != nil {
		c.file.Close()
	}
	return c.truncated
}

// abandon releases the capture's files if finish was not reached.
func (c *capture) abandon() {
	if c.running {
		c.finish(time.Now())
		return
	}
	c.closeW()
	c.r.Close()
	if c.file != nil {
		c.file.Close()
	}
}

// markerSet hands each run an end marker that no other run in progress
// holds: a machine's first run in progress gets the machine's marker
// (supervise.SlotMarker), a second one running beside it (a machine with
// several CPUs) the next, and so on; a marker is handed out again once its
// run is over. Its supervisor locks it for the run (a marker found locked
// would leave the run without one).
type markerSet struct {
	slots map[string]int
	mu    sync.Mutex
	inUse map[string][]bool
}

// take returns a free marker of machine and the function that frees it.
func (s *markerSet) take(machine string) (string, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := s.inUse[machine]
	k := slices.Index(used, false)
	if k < 0 {
		k = len(used)
		used = append(used, false)
	}
	used[k] = true
	s.inUse[machine] = used
	release := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inUse[machine][k] = false
	}
	return supervise.SlotRunMarker(s.slots[machine], k), release
}
