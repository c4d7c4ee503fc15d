package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// What a backend that hands runs to another system (a batch scheduler:
// executor/slurm) shares with the process executor: the checks of a spec
// against the owner's policy, the attempt directory's layout and inputs,
// the environment given to tasks, and the outputs' copy by the output
// copier as the run's user (docs/EXECUTOR.md). The backend runs the task
// its own way in between.

// RunError is a failure of a run that becomes a Result: Reason is one of
// the Reason* codes.
type RunError struct {
	Reason, Detail string
}

func (e *RunError) Error() string { return e.Reason + ": " + e.Detail }

func runError(te *taskError) *RunError {
	if te == nil {
		return nil
	}
	return &RunError{Reason: te.reason, Detail: te.detail}
}

// BatchKit prepares and finishes runs in a tasks directory laid out as
// the process executor's (TasksDir/<id>/attempt-N/{work,tmp,stdout,
// stderr}), under an owner's policy.
type BatchKit struct {
	p *ProcessExecutor
}

// BatchRun is one prepared attempt.
type BatchRun struct {
	Attempt int
	// Root is the attempt directory; Work the task's working directory;
	// Tmp its $TMPDIR; Stdout and Stderr the files its streams go to
	// (created empty, owned by the run's user); Checkpoint the directory
	// exported as $CHECKPOINT_DIR ("" for none).
	Root, Work, Tmp, Stdout, Stderr, Checkpoint string
	// Exe is argv[0] resolved and allowed by the policy, as found on this
	// host.
	Exe string
	// Env is the task's whole environment, KEY=VALUE, sorted.
	Env []string
	// RunAs says the run belongs to the policy's run_as user UID:GID;
	// otherwise to the peer's own user.
	RunAs    bool
	UID, GID uint32
}

// NewBatchKit checks the policy (including that tasks do not run as the
// peer's own user without the owner's unsafe opt-in) and creates
// tasksDir.
func NewBatchKit(tasksDir string, pol Policy, log *slog.Logger) (*BatchKit, error) {
	if tasksDir == "" {
		return nil, errors.New("empty tasks directory")
	}
	dir, err := filepath.Abs(tasksDir)
	if err != nil {
		return nil, fmt.Errorf("tasks directory: %w", err)
	}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := checkProtection(pol, false); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &BatchKit{p: &ProcessExecutor{cfg: ProcessConfig{TasksDir: dir, Policy: pol, SupervisorPath: "/proc/self/exe"}, log: log}}, nil
}

// TasksDir is the absolute tasks directory.
func (k *BatchKit) TasksDir() string { return k.p.cfg.TasksDir }

// Policy is the owner's policy.
func (k *BatchKit) Policy() Policy { return k.p.cfg.Policy }

// Check validates spec on its own and against the policy (shape, inputs'
// size, executable, run-as user) without touching the file system: a
// refused task leaves nothing behind.
func (k *BatchKit) Check(spec *TaskSpec) *RunError {
	pol := k.p.cfg.Policy
	if te := validateSpec(spec, true); te != nil {
		return runError(te)
	}
	var inBytes int64
	for _, b := range spec.Inputs {
		inBytes += int64(len(b))
	}
	if max := pol.maxInputBytes(); inBytes > max {
		return &RunError{ReasonInputTooLarge, fmt.Sprintf("inputs take %d bytes, the machine owner's limit is %d", inBytes, max)}
	}
	if _, te := pol.resolveExecutable(spec.Argv[0], ""); te != nil {
		return runError(te)
	}
	if _, _, _, te := pol.runAs(); te != nil {
		return runError(te)
	}
	return nil
}

// Prepare creates the attempt's directories, writes the inputs, creates
// the stream files and gives it all to the run's user. Call Check first.
func (k *BatchKit) Prepare(spec *TaskSpec, m MachineConfig) (BatchRun, *RunError) {
	pol := k.p.cfg.Policy
	uid, gid, runAs, te := pol.runAs()
	if te != nil {
		return BatchRun{}, runError(te)
	}
	dirs, te := k.p.prepareDirs(spec, runAs, uid, gid)
	r := BatchRun{Attempt: dirs.attempt, Root: dirs.root, Work: dirs.work, Tmp: dirs.tmp, Stdout: dirs.stdout, Stderr: dirs.stderr,
		Checkpoint: dirs.checkpoint, RunAs: runAs, UID: uid, GID: gid}
	if te != nil {
		return r, runError(te)
	}
	exe, te := pol.resolveExecutable(spec.Argv[0], dirs.work)
	if te != nil {
		return r, runError(te)
	}
	r.Exe = exe
	r.Env = k.p.environment(spec, m, dirs)
	for _, p := range []string{r.Stdout, r.Stderr} {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return r, &RunError{ReasonStartFailed, fmt.Sprintf("stream file: %v", err)}
		}
		f.Close()
		if runAs {
			if err := os.Chown(p, int(uid), int(gid)); err != nil {
				return r, &RunError{ReasonStartFailed, fmt.Sprintf("give %s to the run-as user: %v", p, err)}
			}
		}
	}
	return r, nil
}

// Reopen is the BatchRun of an attempt of spec that a previous daemon
// prepared and submitted (a batch job that outlived it): its directories
// must still be there; nothing is created or written. Exe and Env are
// left empty: the job has them already.
func (k *BatchKit) Reopen(spec *TaskSpec, attempt int) (BatchRun, *RunError) {
	uid, gid, runAs, te := k.p.cfg.Policy.runAs()
	if te != nil {
		return BatchRun{}, runError(te)
	}
	if attempt < 1 || validateSpec(spec, false) != nil {
		return BatchRun{}, &RunError{ReasonStartFailed, fmt.Sprintf("reopen %s attempt %d: not a valid run", spec.ID, attempt)}
	}
	taskDir := filepath.Join(k.p.cfg.TasksDir, spec.ID)
	root := filepath.Join(taskDir, "attempt-"+strconv.Itoa(attempt))
	r := BatchRun{Attempt: attempt, Root: root, Work: filepath.Join(root, "work"), Tmp: filepath.Join(root, "tmp"),
		Stdout: filepath.Join(root, "stdout"), Stderr: filepath.Join(root, "stderr"), Checkpoint: spec.CheckpointDir,
		RunAs: runAs, UID: uid, GID: gid}
	if r.Checkpoint == "" && spec.Checkpointable {
		r.Checkpoint = filepath.Join(taskDir, "checkpoint")
	}
	if fi, err := os.Stat(r.Work); err != nil || !fi.IsDir() {
		return r, &RunError{ReasonStartFailed, fmt.Sprintf("reopen %s attempt %d: no work directory %s", spec.ID, attempt, r.Work)}
	}
	return r, nil
}

// Outputs lists the finished run's outputs and has them copied, as the
// run's user, into a staging directory the peer owns (the process
// executor's copier). skipped names what was left out and why.
func (k *BatchKit) Outputs(spec *TaskSpec, r BatchRun) (outs map[string]string, skipped []string, err *RunError) {
	dirs := taskDirs{attempt: r.Attempt, root: r.Root, work: r.Work, tmp: r.Tmp, stdout: r.Stdout, stderr: r.Stderr, checkpoint: r.Checkpoint}
	outs, skipped, te := k.p.outputs(spec, dirs, r.RunAs, r.UID, r.GID)
	return outs, skipped, runError(te)
}

// CutLog cuts a finished run's stream file at the policy's max_log_bytes
// and reports whether it did.
func (k *BatchKit) CutLog(path string) bool {
	max := k.p.cfg.Policy.maxLogBytes()
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() <= max {
		return false
	}
	return os.Truncate(path, max) == nil
}

// Discard removes a delivered run's directories after keep_task_dirs
// (ProcessExecutor.Discard).
func (k *BatchKit) Discard(res Result) { k.p.Discard(res) }

// WallClock is a run's effective limit: the smaller of the spec's and the
// policy's max_wall_clock, 0 for none.
func (p Policy) WallClock(spec time.Duration) time.Duration { return p.wallClock(spec) }

// Grace is the policy's kill grace (default DefaultKillGrace).
func (p Policy) Grace() time.Duration { return p.killGrace() }

// DeclaredMilliJ is power × duration in millijoules, rounded.
func DeclaredMilliJ(milliW int64, d time.Duration) int64 { return milliJ(milliW, d) }

// PriorDone is the work a run starts from (restored from a checkpoint).
func PriorDone(s *TaskSpec) int64 { return priorDone(s) }

// EstimateDone is the work done at the end of a run of duration d on a
// machine of mflops, capped at the task's size.
func EstimateDone(s *TaskSpec, mflops int64, d time.Duration) int64 {
	return estimateDone(s, mflops, d)
}

// CloneSpec copies a spec's slices and maps, so the caller may reuse its
// own.
func CloneSpec(s TaskSpec) TaskSpec { return cloneSpec(s) }

// ValidMachineName says whether s can name a machine.
func ValidMachineName(s string) bool { return validIdent(s, maxNameLen) }

// AwaitGate waits for a run's gate: true lets the task run; false, a
// closed channel or stopped closing does not. A nil gate is open.
func AwaitGate(gate <-chan bool, stopped <-chan struct{}) bool {
	if gate == nil {
		return true
	}
	return awaitGate(gate, stopped)
}
