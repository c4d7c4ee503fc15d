// Package supervise is the part of a run that is not the peer: the run's
// supervisor, the running binary re-executed (docs/EXECUTOR.md, "The
// supervisor").
//
// The same binary, re-executed as coopgrid-copier, is a run's output
// copier (copier.go).
//
// It is a package of its own, with the standard library, x/sys and
// internal/safeopen (itself the standard library and x/sys) as its only
// dependencies, so that its init function — the dispatch — runs
// before most packages of the rest of the binary are initialized: every
// supervisor pays less start-up for them.
//
// A run is two processes besides the peer:
//
//	peer ──exec──► coopgrid-supervisor ──fork, setuid, execve──► task
//	               (peer's user, stays)       (run user; held at its first
//	                                           instruction until confined)
//
// The supervisor is the running binary itself (/proc/self/exe), selected
// by argv[0] together with Env. The dispatch is in this package's init
// function, so that every binary linking the executor — the peer, and
// every package's test binary — serves it: a binary that forgot the
// dispatch would run itself (its tests, its CLI) as the task's supervisor.
//
// The supervisor starts the task traced, so that the kernel stops it right
// after its execve, before its first instruction; it checks the executable
// that was exec'd, sets the limits and joins the cgroup while the task is
// stopped, then lets it go (startTask). It then waits for the task,
// reports its wait status on fd 5, and enforces the run's lease (fd 4),
// because a stopped or dead peer cannot.
package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	Env            = "COOPGRID_EXEC_HELPER"
	SupervisorArg0 = "coopgrid-supervisor"
	// exitHelperFailed: the supervisor could not do its job; nothing of
	// the task ran (125, as the old shell gate).
	exitHelperFailed = 125
)

// File descriptors of the supervisor.
const (
	fdConfig = 3 // the JSON config, read to EOF (the gate)
	fdLease  = 4 // supervisor: one byte per renewal; EOF when the peer dies
	fdStatus = 5 // supervisor: its report, written once
)

func init() {
	mode := os.Getenv(Env)
	a0 := filepath.Base(os.Args[0])
	if mode == "supervisor" && a0 == SupervisorArg0 {
		os.Exit(superviseMain())
	}
	if mode == CopierMode && a0 == CopierArg0 {
		os.Exit(copierMain())
	}
}

// Config is what the peer tells a run's supervisor.
type Config struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Policy is the part of the owner's policy the task init checks the
	// executable against.
	Allow    []string `json:"allow,omitempty"`
	AllowAny bool     `json:"allow_any,omitempty"`
	Path     string   `json:"path"`
	Rlimits  []Rlimit `json:"rlimits,omitempty"`
	// RunAs: the task's Credentials; nil keeps the supervisor's.
	RunAs *Credential `json:"run_as,omitempty"`
	// Cgroups are cgroup.procs files the task init is written into before
	// it runs anything (one per v1 controller, one for v2).
	Cgroups []string `json:"cgroups,omitempty"`
	// LeaseMs, when positive, kills the run when no renewal byte arrived on
	// fdLease for that long.
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// StartByUs, when positive, is the latest wall time (unix µs) at
	// which the task may start: a gate opened later (the peer was paused
	// between confirming the start and opening it) runs nothing, with
	// InitReason InitStartLate.
	StartByUs int64 `json:"start_by_us,omitempty"`
	// Landlock, when set, hides the peer's data directory from the task.
	Landlock *Landlock `json:"landlock,omitempty"`
}

type Credential struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Status is the supervisor's report on fdStatus.
type Status struct {
	// WaitStatus is the task's raw wait status; valid when Exited.
	Exited     bool   `json:"exited"`
	WaitStatus uint32 `json:"wait_status"`
	UserUs     int64  `json:"user_us"`
	SysUs      int64  `json:"sys_us"`
	// InitReason/InitErr: the supervisor refused to let the task run
	// (reason code and detail); it never ran an instruction of its own.
	InitReason string `json:"init_reason,omitempty"`
	InitErr    string `json:"init_err,omitempty"`
	// LeaseLapsed: the supervisor killed the run because the peer stopped
	// renewing its lease (or died).
	LeaseLapsed string `json:"lease_lapsed,omitempty"`
	// KilledAtUs: when the run was found dead after that kill (unix µs).
	KilledAtUs int64 `json:"killed_at_us,omitempty"`
	// GoneAtUs: when the task's leader had exited and nothing of the run
	// was left in its cgroup (unix µs); zero without a cgroup. The peer may
	// have been paused then, and only see the end later.
	GoneAtUs int64 `json:"gone_at_us,omitempty"`
}

// readConfig reads a JSON config from fd to EOF: the EOF is the gate.
func readConfig(fd int, v any) error {
	f := os.NewFile(uintptr(fd), "config")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<20))
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errors.New("no config: the peer went away before releasing the run")
	}
	return json.Unmarshal(b, v)
}

func helperFail(who string, err error) int {
	fmt.Fprintf(os.Stderr, "%s: %v\n", who, err)
	return exitHelperFailed
}

// superviseMain runs in the supervisor process.
func superviseMain() int {
	// The inherited descriptors must not leak into the task.
	for _, fd := range []int{fdConfig, fdLease, fdStatus} {
		unix.CloseOnExec(fd)
	}
	// SIGTERM and friends reach the task through the process group; the
	// supervisor must outlive them to report. Notify (not Ignore), so the
	// task does not inherit an ignored disposition.
	signal.Notify(make(chan os.Signal, 1), unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT)
	// The marker comes first, named on the command line rather than in
	// the config, so that a run whose peer died before opening the gate
	// has its end recorded too (nothing of the task ran).
	var marker *endMarker
	if len(os.Args) > 1 {
		marker = openEndMarker(os.Args[1])
	}
	var cfg Config
	if err := readConfig(fdConfig, &cfg); err != nil {
		marker.mark(time.Now().UnixMicro(), false)
		return helperFail(SupervisorArg0, err)
	}
	status := os.NewFile(fdStatus, "status")
	st, err := supervise(&cfg, marker)
	// Every way out that did not mark (the task never ran) marks now.
	marker.mark(time.Now().UnixMicro(), false)
	if err != nil {
		return helperFail(SupervisorArg0, err)
	}
	_ = json.NewEncoder(status).Encode(st)
	return 0
}

// supervise starts the task, and waits for it while watching the lease.
// A refused task (not allowed, limits that cannot be set) is a Status with
// InitReason, not an error: nothing of it ran.
//
// The end marker gets the time the run was over, every process of it
// gone, before the peer can learn of the end: a peer killed in between
// finds it at its next boot.
func supervise(cfg *Config, marker *endMarker) (Status, error) {
	var st Status
	// The task's death signal and this thread's no_new_privs are tied to
	// the thread that forks it, and only that thread may detach it: the
	// supervisor stays on it.
	runtime.LockOSThread()
	if now := time.Now().UnixMicro(); cfg.StartByUs > 0 && now > cfg.StartByUs {
		st.Exited, st.InitReason = true, InitStartLate
		st.InitErr = fmt.Sprintf("the gate opened %v after the start's deadline: the peer was held up (paused?) after confirming the start, and its view of the ledger may be stale",
			time.Duration(now-cfg.StartByUs)*time.Microsecond)
		return st, nil
	}
	// Without a cgroup the run is the supervisor's process group, which
	// only a scan of /proc can list. As a child subreaper, the supervisor
	// adopts whatever the task leaves orphaned: once the task is reaped,
	// no child left means nothing of its tree is left, and the scan is
	// skipped (endRest). The adopted are reaped as they die (reapOrphans).
	subreaper := len(cfg.Cgroups) == 0 && unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
	cmd, reason, detail := startTask(cfg)
	if reason != "" {
		st.Exited, st.InitReason, st.InitErr = true, reason, detail
		return st, nil
	}
	if subreaper {
		stopReaping := reapOrphans(cmd.Process.Pid)
		defer stopReaping()
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	lapsed := watchLease(os.NewFile(fdLease, "lease"), time.Duration(cfg.LeaseMs)*time.Millisecond)
	select {
	case <-waited:
		// The peer may be paused, cut off or dead and see this end only
		// later, or never: end what the task left in its cgroup (or, without
		// one, its process group) now, as the peer would when it looks, and
		// stamp when the run was gone, so that the peer's journal records
		// when the run ended, not when it noticed.
		endRest(cfg.Cgroups, subreaper)
		gone := time.Now().UnixMicro()
		if len(cfg.Cgroups) > 0 {
			st.GoneAtUs = gone
		}
		marker.mark(gone, false)
	case why := <-lapsed:
		// The peer is stopped, cut off or dead: it cannot stop the run
		// itself. Kill it whole, stamp when it is gone, record that, report,
		// then take the group, supervisor included (the peer's cgroup kill
		// catches what left it).
		st.LeaseLapsed = why
		_ = cmd.Process.Kill() // not by pid: it may be reaped already
		endRest(cfg.Cgroups, subreaper)
		<-waited
		st.KilledAtUs = time.Now().UnixMicro()
		marker.mark(st.KilledAtUs, true)
		writeStatusNow(st)
		_ = unix.Kill(-unix.Getpgrp(), unix.SIGKILL)
	}
	ps := cmd.ProcessState
	st.Exited = true
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		st.WaitStatus = uint32(ws)
	}
	st.UserUs = ps.UserTime().Microseconds()
	st.SysUs = ps.SystemTime().Microseconds()
	return st, nil
}

// writeStatusNow writes a report before the supervisor kills its own group.
func writeStatusNow(st Status) {
	_ = json.NewEncoder(os.NewFile(fdStatus, "status")).Encode(st)
}

// watchLease reports why the run must end: the peer closed the lease pipe
// (it died), or, with a positive lease, no renewal came for that long.
// Every byte read is a renewal.
func watchLease(f *os.File, lease time.Duration) <-chan string {
	out := make(chan string, 1)
	renew := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := f.Read(buf); err != nil {
				out <- "the peer closed the lease (it exited or died)"
				return
			}
			select {
			case renew <- struct{}{}:
			default:
			}
		}
	}()
	if lease <= 0 {
		return out
	}
	go func() {
		t := time.NewTimer(lease)
		for {
			select {
			case <-renew:
				t.Reset(lease)
			case <-t.C:
				select {
				case out <- fmt.Sprintf("the peer did not renew the run's lease for %v", lease):
				default:
				}
				return
			}
		}
	}()
	return out
}

// endRest kills what is left of the run once its leader is gone (reaped)
// or killed: every process of its cgroup, or, without one, of the
// supervisor's process group but the supervisor (a setsid child is out
// of reach then, as it is of the peer's own kill). A subreaper supervisor
// with no child left knows nothing of the task's tree is left and skips
// the scan of /proc, the largest cost of a short run without a cgroup.
// (A process of another run of the same peer that moved itself into this
// group is then left to the peer's own kill of the group.)
func endRest(cgroups []string, subreaper bool) {
	if len(cgroups) > 0 {
		killCgroupProcs(cgroups, 5*time.Second)
		return
	}
	if subreaper && !hasChildren() {
		return
	}
	self, pgid := os.Getpid(), unix.Getpgrp()
	KillUntilEmpty(5*time.Second, func() int {
		n := 0
		for _, pid := range GroupMembers(pgid) {
			if pid != self {
				_ = unix.Kill(pid, unix.SIGKILL)
				n++
			}
		}
		return n
	})
}

// hasChildren reports whether this process has a child, live or not
// reaped yet: waitid answers ECHILD only when it has none.
func hasChildren() bool {
	var si unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &si, unix.WEXITED|unix.WSTOPPED|unix.WCONTINUED|unix.WNOHANG|unix.WNOWAIT, nil)
	return !errors.Is(err, unix.ECHILD)
}

// reapOrphans reaps, as they die, the processes a subreaper supervisor
// adopted from the task's tree, so that a long run whose processes
// daemonize does not fill the process table with zombies. The task itself
// (pid task) is left to its own Wait.
func reapOrphans(task int) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
			case <-done:
				return
			}
			for _, pid := range children() {
				if pid != task {
					var ws unix.WaitStatus
					_, _ = unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, nil)
				}
			}
		}
	}()
	return func() { signal.Stop(sig); close(done) }
}

// children lists this process's children (of every thread).
func children() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// GroupMembers lists the live (not zombie nor dead) processes of process group
// pgid, by scanning /proc.
func GroupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := ReadProcStat(pid)
		if err == nil && st.Pgrp == pgid && st.State != 'Z' && st.State != 'X' {
			out = append(out, pid)
		}
	}
	return out
}

// ProcStat is what /proc/<pid>/stat says of a process's place.
type ProcStat struct {
	State byte
	PPid  int
	Pgrp  int
}

// ReadProcStat parses /proc/<pid>/stat. The command name is in parentheses
// and may itself contain spaces and parentheses, so fields are counted from
// the last ')'.
func ReadProcStat(pid int) (ProcStat, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(name)
	if err != nil {
		return ProcStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("%s: malformed", name)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return ProcStat{}, fmt.Errorf("%s: malformed", name)
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return ProcStat{}, fmt.Errorf("%s: malformed", name)
	}
	return ProcStat{State: f[0][0], PPid: ppid, Pgrp: pgrp}, nil
}

// killCgroupProcs SIGKILLs every process listed in the run's cgroup.procs
// files until they list none (the pids limit bounds a fork race), or wait
// has passed. The supervisor is not in the cgroup.
func killCgroupProcs(files []string, wait time.Duration) {
	KillUntilEmpty(wait, func() int {
		n := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, field := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(field); err == nil {
					_ = unix.Kill(pid, unix.SIGKILL)
					n++
				}
			}
		}
		return n
	})
}

// Rlimit is one resource limit the task init sets on itself.
type Rlimit struct {
	Resource int    `json:"resource"`
	Name     string `json:"name"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// KillUntilEmpty repeats round (which kills what it finds and says how
// many it found) until a round finds nothing, or wait has passed; it
// reports whether processes are left.
func KillUntilEmpty(wait time.Duration, round func() int) (survivors bool) {
	deadline := time.Now().Add(wait)
	for round() > 0 {
		if time.Now().After(deadline) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// startTask starts the task and holds it at its first instruction, the
// state in which ptrace stops a traced child right after its execve, to
// check and confine it before letting it go:
//
//   - the executable is resolved and checked against the allow list
//     before the fork, and after the execve /proc/PID/exe must be that
//     very file (a script runs its interpreter: the script was checked);
//   - the credentials (setgroups([]), setgid, setuid) are switched by the
//     fork before the execve;
//   - no_new_privs comes from this thread, which forks it;
//   - the resource limits are set on it with prlimit, and it joins the
//     run's cgroup, while it is stopped.
//
// Then it is detached and runs. No shell, no second helper process.
func startTask(cfg *Config) (cmd *exec.Cmd, reason, detail string) {
	if len(cfg.Argv) == 0 {
		return nil, ReasonStartFailed, "empty argv"
	}
	exe, reason, detail := Resolve(cfg.Argv[0], cfg.Dir, cfg.Allow, cfg.AllowAny, cfg.Path)
	if reason != "" {
		return nil, reason, detail
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, ReasonStartFailed, fmt.Sprintf("no_new_privs: %v", err)
	}
	if cfg.Landlock != nil {
		// This thread too: it only forks the task, writes its cgroup and
		// the end marker, which the ruleset allows.
		if err := cfg.Landlock.apply(); err != nil {
			return nil, ReasonStartFailed, fmt.Sprintf("sandbox: %v", err)
		}
	}
	cmd = &exec.Cmd{
		Path:   exe,
		Args:   cfg.Argv,
		Env:    StripLoaderEnv(cfg.Env),
		Dir:    cfg.Dir,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		// The task dies with its supervisor.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Ptrace: true},
	}
	if cfg.RunAs != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: cfg.RunAs.UID, Gid: cfg.RunAs.GID, Groups: []uint32{}}
	}
	if err := cmd.Start(); err != nil {
		return nil, ReasonStartFailed, fmt.Sprintf("start %s: %v", exe, err)
	}
	pid := cmd.Process.Pid
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, ReasonStartFailed, fmt.Sprintf("start %s: not stopped after its execve (%v, status %#x)", exe, err, uint32(ws))
	}
	if reason, detail := confine(cfg, pid, exe); reason != "" {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = unix.PtraceDetach(pid)
		_ = cmd.Wait()
		return nil, reason, detail
	}
	if err := unix.PtraceDetach(pid); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = cmd.Wait()
		return nil, ReasonStartFailed, fmt.Sprintf("release %s: %v", exe, err)
	}
	return cmd, "", ""
}

// confine checks and confines the stopped task pid.
func confine(cfg *Config, pid int, exe string) (reason, detail string) {
	if !isScript(exe) {
		want, err1 := os.Stat(exe)
		got, err2 := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
		if err1 != nil || err2 != nil || !os.SameFile(want, got) {
			return ReasonNotAllowed, fmt.Sprintf("executable %s changed between its check and its execve", exe)
		}
	}
	for _, l := range cfg.Rlimits {
		var old unix.Rlimit
		if err := unix.Prlimit(pid, l.Resource, nil, &old); err != nil {
			return ReasonStartFailed, fmt.Sprintf("resource limits: prlimit %s: %v", l.Name, err)
		}
		// Never above the hard limit it has: raising it needs privileges,
		// and the owner's intent is a ceiling.
		nl := unix.Rlimit{Cur: min(l.Cur, old.Max), Max: min(l.Max, old.Max)}
		if err := unix.Prlimit(pid, l.Resource, &nl, nil); err != nil {
			if errors.Is(err, unix.EPERM) {
				return ReasonStartFailed, fmt.Sprintf("resource limits: prlimit %s: %v (setting a limit on a task that runs as another user needs CAP_SYS_RESOURCE)", l.Name, err)
			}
			return ReasonStartFailed, fmt.Sprintf("resource limits: prlimit %s: %v", l.Name, err)
		}
	}
	for _, procs := range cfg.Cgroups {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0); err != nil {
			return ReasonStartFailed, fmt.Sprintf("join cgroup %s: %v", procs, err)
		}
	}
	return "", ""
}

// isScript reports whether path starts with "#!": the kernel runs its
// interpreter, so /proc/PID/exe names that.
func isScript(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 2)
	n, _ := io.ReadFull(f, b)
	return n == 2 && string(b) == "#!"
}
