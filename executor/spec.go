package executor

import (
	"context"
	"errors"
	"fmt"
	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Executor is what the daemon needs from an executor. ProcessExecutor and
// SimExecutor satisfy it.
type Executor interface {
	// Start launches spec on the named machine and returns without waiting
	// for it. ctx bounds Start itself, not the task's lifetime.
	Start(ctx context.Context, machine string, spec TaskSpec) error
	// Stop ends a running task (SIGTERM, grace, SIGKILL) and returns once
	// its Result is queued.
	Stop(ctx context.Context, taskID string, grace time.Duration) error
	// Results delivers one Result per accepted Start. After Close it is
	// closed once the last result has been read.
	Results() <-chan Result
	// Running lists the IDs of the tasks started and not yet ended, sorted.
	Running() []string
	// Close refuses new starts, stops every running task and waits for
	// them to end (or for ctx).
	Close(ctx context.Context) error
}

// TaskSpec is one run of a task on a machine.
type TaskSpec struct {
	// ID names the task; it is also a directory name, so it is limited to
	// 1-128 characters of [A-Za-z0-9._-] starting with a letter or digit
	// (the ledger's "<org>-<n>" fits).
	ID string
	// Argv is the command. Argv[0] is an absolute path, a name looked up in
	// the policy's PATH, or (only with Policy.AllowAny) a path relative to
	// the work directory, e.g. a script shipped as an input.
	Argv []string
	// Env is added to the task's base environment (see docs/EXECUTOR.md).
	// CHECKPOINT_DIR and COOPGRID_* are reserved.
	Env map[string]string
	// PeerEnv holds reserved variables (COOPGRID_*) the peer sets for this
	// run beside the executor's own, which win: a parallel job's part gets
	// its gang's host list there (docs/JOBS.md, "Parallel jobs"). Every
	// key must be reserved. A value starting with "./" names a file of
	// the work directory (an input): the process executor makes it
	// absolute, since the work directory is the attempt's own.
	PeerEnv map[string]string
	// WallClockLimit bounds this run; 0 means no limit of its own (the
	// policy's MaxWallClock still applies).
	WallClockLimit time.Duration
	// Inputs are written into the work directory before the task starts:
	// file name (relative, may contain subdirectories) → content.
	Inputs map[string][]byte
	// OutputPatterns are filepath.Match globs relative to the work
	// directory; a pattern that matches a directory collects the files
	// under it.
	OutputPatterns []string
	// Checkpointable says the task writes its state under $CHECKPOINT_DIR
	// and reads it back at start.
	Checkpointable bool
	// CheckpointDir, when set, is an absolute directory exported as
	// $CHECKPOINT_DIR (created if missing). When empty and Checkpointable is
	// set, the executor uses <tasks dir>/<id>/checkpoint.
	CheckpointDir string
	// SizeMFlop is the task's whole work and DoneMFlop the part already done
	// (restored from a checkpoint). The simulated executor runs
	// SizeMFlop−DoneMFlop; the process executor only uses them to estimate
	// Result.DoneMFlop.
	SizeMFlop int64
	DoneMFlop int64
	// Gate, when set, holds the task until a value arrives: true lets it
	// run, false (or a closed channel, or a Stop meanwhile) ends the run
	// `stopped` with nothing of the task run. The process executor spawns
	// the supervisor and journals the start first, so the wait costs only
	// what the sender takes. The peer sends true once the ledger has
	// recorded the start: a peer resuming with a stale view (after a
	// pause, say) must not run a task the leader has meanwhile placed
	// elsewhere, even for the moment its start report takes to be refused.
	Gate <-chan bool
	// CPUs, MemoryBytes and GPUs are what the task asked of the machine
	// (0: not given). The process executor does not use them; a batch
	// backend (executor/slurm) asks its scheduler for them.
	CPUs, MemoryBytes, GPUs int64
	// StartBy, when set, is read once Gate says true: the latest time the
	// task may start (zero: none). A gate that opens later runs nothing,
	// and the run ends as a lapsed lease (Result.LeaseLapsed). The peer
	// sets it to two leases after it sent its start report: a peer paused
	// between the report's commit and the gate must not start the task
	// after the leader may have placed it elsewhere (docs/EXECUTOR.md,
	// "The run lease"). The process executor enforces it in the
	// supervisor, which a paused peer cannot hold up; the simulated
	// executor at the gate; the Slurm executor ignores it.
	StartBy func() time.Time
}

// Reason codes of a Result. They are stable: the daemon stores them in the
// log and scripts match on them.
const (
	// ReasonOK: the task exited with status 0 and its outputs were collected.
	ReasonOK = "ok"
	// ReasonExitNonzero: the task exited with a nonzero status.
	ReasonExitNonzero = "exit_nonzero"
	// ReasonSignaled: the task was killed by a signal the executor did not
	// send (e.g. SIGSEGV).
	ReasonSignaled = "killed_signal"
	// ReasonTimeout: the wall-clock limit (the spec's or the policy's,
	// whichever is smaller) was reached and the group was killed.
	ReasonTimeout = "killed_timeout"
	// ReasonCPULimit: the policy's CPU-time limit was reached (SIGXCPU, then
	// SIGKILL).
	ReasonCPULimit = "cpu_limit"
	// ReasonDiskLimit: the run's task directory grew over the policy's
	// max_disk_bytes; the run was killed.
	ReasonDiskLimit = "disk_limit"
	// ReasonStopped: Stop (or Close) ended the task.
	ReasonStopped = "stopped"
	// ReasonNotAllowed: the machine owner's policy does not allow the
	// executable. Nothing ran.
	ReasonNotAllowed = "not_allowed"
	// ReasonRunAsUnavailable: the policy says to run as another user and
	// that is impossible (the peer is not root, or the user is unknown or
	// privileged). Nothing ran.
	ReasonRunAsUnavailable = "run_as_unavailable"
	// ReasonBadSpec: the spec is malformed (bad ID, input name escaping the
	// work directory, output pattern escaping it, reserved environment
	// variable...). Nothing ran.
	ReasonBadSpec = "bad_spec"
	// ReasonInputTooLarge: the inputs exceed the policy's size limit.
	ReasonInputTooLarge = "input_too_large"
	// ReasonStartFailed: the process could not be started (executable
	// missing, directory not writable...).
	ReasonStartFailed = "start_failed"
	// ReasonOutputTooLarge: the task succeeded but its matched outputs
	// exceed the policy's size or count limit; none are listed.
	ReasonOutputTooLarge = "output_too_large"
	// ReasonOutputFailed: the task succeeded but its outputs could not be
	// listed (e.g. the work directory vanished); none are listed.
	ReasonOutputFailed = "output_failed"
)

// EnergySource says where Result.EnergyMilliJ comes from. The values are
// the ledger's.
type EnergySource string

const (
	// EnergyRAPL is measured by hardware counters: Linux powercap RAPL,
	// or a Slurm cluster's energy plugin (docs/SLURM.md, "Energy").
	EnergyRAPL EnergySource = "rapl"
	// EnergyDeclared is the machine's declared busy power times the run's
	// duration.
	EnergyDeclared EnergySource = "declared"
	// EnergySimulated comes from SimExecutor: busy power times the
	// simulated duration.
	EnergySimulated EnergySource = "simulated"
)

// Result is the end of one run.
type Result struct {
	ID      string
	Machine string
	// Attempt numbers the runs of this task ID on this executor's tasks
	// directory, from 1 (attempt-N in the directory layout).
	Attempt int
	// ExitCode is the process's exit status, or -1 when it did not exit
	// normally (signal) or never started.
	ExitCode int
	// Reason is one of the Reason* codes; Detail is a human-readable
	// explanation (empty for ReasonOK).
	Reason string
	Detail string
	// LeaseLapsed: the run's supervisor killed it because this peer did
	// not renew its lease (cut off from its federation, or stopped); the
	// Reason is ReasonStopped. The federation may already have placed the
	// task elsewhere.
	LeaseLapsed bool
	// MachineFailed: the run ended because of the machine, not the task
	// (a batch scheduler's node failed, or its own users preempted or
	// cancelled the job). The peer reports no end of the task: the
	// machine is declared lost and the task queued again, as for a
	// lapsed lease.
	MachineFailed bool
	// Start and End bound the run (process start to reaping). For a task
	// that never started both are the time of the failure.
	Start, End   time.Time
	EnergyMilliJ int64
	EnergySource EnergySource
	// DoneMFlop is the task's total work done at the end of this run,
	// DoneMFlop of the spec included: exact for the simulated executor; for
	// a process, SizeMFlop on success and otherwise an estimate from the run
	// time and the machine's speed (what a checkpoint taken at the end would
	// hold at best). 0 when the spec gave no size.
	DoneMFlop int64
	// Outputs maps each collected output, relative to the work directory,
	// to the absolute path of the file to ship back.
	Outputs map[string]string
	// StdoutPath and StderrPath are the captured streams, cut at the
	// policy's MaxLogBytes (the Truncated flags say so).
	StdoutPath, StderrPath           string
	StdoutTruncated, StderrTruncated bool
	// WorkDir is the task's working directory; CheckpointDir the directory
	// exported as $CHECKPOINT_DIR ("" if none), to be packed by the
	// checkpoint layer after a stop.
	WorkDir       string
	CheckpointDir string
}

// OK reports whether the run succeeded.
func (r Result) OK() bool { return r.Reason == ReasonOK }

// Errors returned by Start and Stop. Start returns them only when no Result
// will be delivered.
var (
	ErrClosed         = errors.New("executor closed")
	ErrUnknownMachine = errors.New("unknown machine")
	ErrMachineBusy    = errors.New("machine busy")
	ErrTaskRunning    = errors.New("task already running")
	ErrUnknownTask    = errors.New("task not running")
)

// taskError is a failure of the task itself, turned into a Result.
type taskError struct {
	reason string
	detail string
}

func (e *taskError) Error() string { return e.reason + ": " + e.detail }

func failf(reason, format string, args ...any) *taskError {
	return &taskError{reason: reason, detail: fmt.Sprintf(format, args...)}
}

// Limits on the shape of a spec, independent of the owner's policy.
const (
	maxTaskIDLen      = 128
	maxArgs           = 4096
	maxArgBytes       = 1 << 20 // argv + env, well under the kernel's ARG_MAX
	maxInputFiles     = 10000
	maxOutputPatterns = 256
	maxNameLen        = 64
)

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validIdent accepts 1-max characters of [A-Za-z0-9._-] starting with a
// letter or digit, so never "." or ".." and never a path.
func validIdent(s string, max int) bool {
	if s == "" || len(s) > max || !isAlnum(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// reservedEnv reports whether the executor owns the variable.
func reservedEnv(k string) bool {
	return k == "CHECKPOINT_DIR" || strings.HasPrefix(k, "COOPGRID_")
}

// validateSpec checks the parts of a spec that do not depend on the
// machine's policy. needArgv is false for the simulated executor.
func validateSpec(s *TaskSpec, needArgv bool) *taskError {
	if !validIdent(s.ID, maxTaskIDLen) {
		return failf(ReasonBadSpec, "task ID %q: want 1-%d characters of [A-Za-z0-9._-] starting with a letter or digit", s.ID, maxTaskIDLen)
	}
	if needArgv && len(s.Argv) == 0 {
		return failf(ReasonBadSpec, "empty argv")
	}
	if len(s.Argv) > maxArgs {
		return failf(ReasonBadSpec, "argv has %d elements, limit %d", len(s.Argv), maxArgs)
	}
	total := 0
	for i, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return failf(ReasonBadSpec, "argv[%d] contains a NUL byte", i)
		}
		total += len(a) + 1
	}
	if needArgv && s.Argv[0] == "" {
		return failf(ReasonBadSpec, "argv[0] is empty")
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return failf(ReasonBadSpec, "environment variable name %q: must be non-empty without '=' or NUL", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return failf(ReasonBadSpec, "environment variable %s contains a NUL byte", k)
		}
		if reservedEnv(k) {
			return failf(ReasonBadSpec, "environment variable %s is reserved for the executor", k)
		}
		if supervise.LoaderEnv(k) {
			return failf(ReasonBadSpec, "environment variable %s can make a program load code the machine owner did not allow; it is refused (docs/EXECUTOR.md lists these)", k)
		}
		total += len(k) + len(v) + 2
	}
	for k, v := range s.PeerEnv {
		if !strings.HasPrefix(k, "COOPGRID_") || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return failf(ReasonBadSpec, "peer environment variable %q: want COOPGRID_* without '=' or NUL", k)
		}
		total += len(k) + len(v) + 2
	}
	if total > maxArgBytes {
		return failf(ReasonBadSpec, "argv and environment take %d bytes, limit %d", total, maxArgBytes)
	}
	if s.WallClockLimit < 0 {
		return failf(ReasonBadSpec, "negative wall-clock limit %v", s.WallClockLimit)
	}
	if err := validateInputNames(s.Inputs); err != nil {
		return err
	}
	if err := validateOutputPatterns(s.OutputPatterns); err != nil {
		return err
	}
	if s.CheckpointDir != "" && (!filepath.IsAbs(s.CheckpointDir) || filepath.Clean(s.CheckpointDir) != s.CheckpointDir) {
		return failf(ReasonBadSpec, "checkpoint directory %q: want a clean absolute path", s.CheckpointDir)
	}
	if s.SizeMFlop < 0 || s.DoneMFlop < 0 || (s.SizeMFlop > 0 && s.DoneMFlop > s.SizeMFlop) {
		return failf(ReasonBadSpec, "size %d MFlop with %d done: want 0 <= done <= size", s.SizeMFlop, s.DoneMFlop)
	}
	return nil
}

// localPath is the supervisor's check of a path inside the work
// directory (supervise.LocalPath).
func localPath(name string) error { return supervise.LocalPath(name) }

func validateInputNames(in map[string][]byte) *taskError {
	if len(in) > maxInputFiles {
		return failf(ReasonBadSpec, "%d input files, limit %d", len(in), maxInputFiles)
	}
	// Sorted so that the error names the same file on every run.
	names := make([]string, 0, len(in))
	for n := range in {
		names = append(names, n)
	}
	sort.Strings(names)
	clean := make(map[string]string, len(in))
	for _, n := range names {
		if err := localPath(n); err != nil {
			return failf(ReasonBadSpec, "input file name %q: %v", n, err)
		}
		c := filepath.Clean(n)
		if prev, dup := clean[c]; dup {
			return failf(ReasonBadSpec, "input file names %q and %q name the same file", prev, n)
		}
		clean[c] = n
	}
	// A name cannot be both a file and a directory ("a" and "a/b").
	for c, n := range clean {
		for d := filepath.Dir(c); d != "."; d = filepath.Dir(d) {
			if other, ok := clean[d]; ok {
				return failf(ReasonBadSpec, "input file %q is also the directory of %q", other, n)
			}
		}
	}
	return nil
}

func validateOutputPatterns(pats []string) *taskError {
	if len(pats) > maxOutputPatterns {
		return failf(ReasonBadSpec, "%d output patterns, limit %d", len(pats), maxOutputPatterns)
	}
	for _, p := range pats {
		if err := localPath(p); err != nil {
			return failf(ReasonBadSpec, "output pattern %q: %v", p, err)
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return failf(ReasonBadSpec, "output pattern %q: %v", p, err)
		}
	}
	return nil
}

// milliJ returns power × duration in millijoules, rounded, without
// overflow up to the 10 MW a machine may declare (milliwatts ×
// nanoseconds would overflow int64 within seconds at that power, so whole
// seconds and the microseconds of the rest are multiplied separately).
func milliJ(milliW int64, d time.Duration) int64 {
	if milliW <= 0 || d <= 0 {
		return 0
	}
	us := int64(d / time.Microsecond)
	sec, rest := us/1e6, us%1e6
	return milliW*sec + (milliW*rest+5e5)/1e6
}

// priorDone is the progress a run starts from, reported when it ends
// before doing anything.
func priorDone(s *TaskSpec) int64 {
	if s.SizeMFlop <= 0 || s.DoneMFlop < 0 {
		return 0
	}
	return min(s.DoneMFlop, s.SizeMFlop)
}

// estimateDone is the work done at the end of a run of duration d on a
// machine of mflops, capped at the task's size.
func estimateDone(s *TaskSpec, mflops int64, d time.Duration) int64 {
	if s.SizeMFlop <= 0 {
		return 0
	}
	done := s.DoneMFlop + int64(float64(mflops)*d.Seconds())
	if done > s.SizeMFlop || done < 0 {
		done = s.SizeMFlop
	}
	return done
}
