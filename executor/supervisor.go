package executor

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

// A run is three processes, the runc-init pattern with one more level:
//
//	peer ──exec──► coopgrid-supervisor ──exec──► coopgrid-task-init ──execve──► task
//	               (peer's user, stays)          (run user, gone at execve)
//
// Both helpers are the running binary itself (/proc/self/exe), selected by
// argv[0] together with helperEnv. The dispatch is in this package's init
// function, so that every binary linking the executor — the peer, and every
// package's test binary — serves them: a binary that forgot the dispatch
// would run itself (its tests, its CLI) as the task's supervisor.
//
// The supervisor stays for the whole run: it waits for the task and reports
// its wait status on fd 5, and it enforces the run's lease (fd 4), because
// a stopped or dead peer cannot. The task-init process exists only to do, in
// the task's own process and before its first instruction, what no
// SysProcAttr field does: set the resource limits, set no_new_privs, and
// resolve and check the executable with the credentials it will be
// exec'd with.
const (
	helperEnv      = "COOPGRID_EXEC_HELPER"
	supervisorArg0 = "coopgrid-supervisor"
	initArg0       = "coopgrid-task-init"
	// Exit codes of the helpers when they cannot do their job. 125 is
	// also what the old shell gate used: nothing of the task ran.
	exitHelperFailed = 125
	exitInitRefused  = 126
)

// File descriptors of the supervisor (fds 3-5) and of the task init (3-4).
const (
	fdConfig  = 3 // supervisor and init: the JSON config, read to EOF (the gate)
	fdLease   = 4 // supervisor: one byte per renewal; EOF when the peer dies
	fdStatus  = 5 // supervisor: its report, written once
	fdInitErr = 4 // init: why the execve did not happen (close-on-exec)
)

func init() {
	mode := os.Getenv(helperEnv)
	a0 := filepath.Base(os.Args[0])
	switch {
	case mode == "supervisor" && a0 == supervisorArg0:
		os.Exit(superviseMain())
	case mode == "init" && a0 == initArg0:
		os.Exit(taskInitMain())
	}
}

// superConfig is what the peer tells a run's supervisor.
type superConfig struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Policy is the part of the owner's policy the task init checks the
	// executable against.
	Allow    []string `json:"allow,omitempty"`
	AllowAny bool     `json:"allow_any,omitempty"`
	Path     string   `json:"path"`
	Rlimits  []rlimit `json:"rlimits,omitempty"`
	// RunAs: the task's credentials; nil keeps the supervisor's.
	RunAs *credential `json:"run_as,omitempty"`
	// Cgroups are cgroup.procs files the task init is written into before
	// it runs anything (one per v1 controller, one for v2).
	Cgroups []string `json:"cgroups,omitempty"`
	// LeaseMs, when positive, kills the run when no renewal byte arrived on
	// fdLease for that long.
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// EndMarker is the file where the supervisor records, durably, when
	// it killed the run for want of a lease: a peer killed with SIGKILL
	// reads it at its next boot as the run's end (journal.go).
	EndMarker string `json:"end_marker,omitempty"`
}

type credential struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// superStatus is the supervisor's report on fdStatus.
type superStatus struct {
	// WaitStatus is the task's raw wait status; valid when Exited.
	Exited     bool   `json:"exited"`
	WaitStatus uint32 `json:"wait_status"`
	UserUs     int64  `json:"user_us"`
	SysUs      int64  `json:"sys_us"`
	// InitReason/InitErr: the task init refused to exec (reason code and
	// detail); the task never ran.
	InitReason string `json:"init_reason,omitempty"`
	InitErr    string `json:"init_err,omitempty"`
	// LeaseLapsed: the supervisor killed the run because the peer stopped
	// renewing its lease (or died).
	LeaseLapsed string `json:"lease_lapsed,omitempty"`
	// KilledAtUs: when the run was found dead after that kill (unix µs).
	KilledAtUs int64 `json:"killed_at_us,omitempty"`
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
	var cfg superConfig
	if err := readConfig(fdConfig, &cfg); err != nil {
		return helperFail(supervisorArg0, err)
	}
	status := os.NewFile(fdStatus, "status")
	st, err := supervise(&cfg)
	if err != nil {
		return helperFail(supervisorArg0, err)
	}
	_ = json.NewEncoder(status).Encode(st)
	return 0
}

// supervise starts the task init, releases it, and waits for the task
// while watching the lease.
func supervise(cfg *superConfig) (superStatus, error) {
	var st superStatus
	initCfgR, initCfgW, err := os.Pipe()
	if err != nil {
		return st, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return st, err
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{initArg0},
		Env:        []string{helperEnv + "=init"},
		Dir:        cfg.Dir,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{initCfgR, errW},
		// The task dies with its supervisor: the death signal is tied to
		// the forking thread, hence the lock until the task is reaped.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if cfg.RunAs != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: cfg.RunAs.UID, Gid: cfg.RunAs.GID, Groups: []uint32{}}
	}
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		return st, fmt.Errorf("start the task init: %w", err)
	}
	initCfgR.Close()
	errW.Close()
	pid := cmd.Process.Pid
	for _, procs := range cfg.Cgroups {
		if err := os.WriteFile(procs, []byte(fmt.Sprint(pid)), 0); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return st, fmt.Errorf("join cgroup %s: %w", procs, err)
		}
	}
	// Release the init: from here on the cgroup holds it.
	if err := json.NewEncoder(initCfgW).Encode(cfg); err != nil {
		_ = cmd.Process.Kill()
	}
	initCfgW.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	initErr := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(errR, 64<<10))
		errR.Close()
		initErr <- b
	}()
	lapsed := watchLease(os.NewFile(fdLease, "lease"), time.Duration(cfg.LeaseMs)*time.Millisecond)
	select {
	case <-waited:
	case why := <-lapsed:
		// The peer is stopped, cut off or dead: it cannot stop the run
		// itself. Report first, then take the whole group, supervisor
		// included (the peer's cgroup kill catches what left it).
		st.LeaseLapsed = why
		killCgroupProcs(cfg.Cgroups, 5*time.Second)
		st.KilledAtUs = time.Now().UnixMicro()
		writeEndMarker(cfg.EndMarker, st.KilledAtUs)
		writeStatusNow(st)
		_ = unix.Kill(-unix.Getpgrp(), unix.SIGKILL)
		<-waited
	}
	ps := cmd.ProcessState
	if b := <-initErr; len(b) > 0 {
		var ie struct{ Reason, Detail string }
		if json.Unmarshal(b, &ie) == nil {
			st.InitReason, st.InitErr = ie.Reason, ie.Detail
		} else {
			st.InitReason, st.InitErr = ReasonStartFailed, string(b)
		}
	}
	st.Exited = true
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		st.WaitStatus = uint32(ws)
	}
	st.UserUs = ps.UserTime().Microseconds()
	st.SysUs = ps.SystemTime().Microseconds()
	return st, nil
}

// writeStatusNow writes a report before the supervisor kills its own group.
func writeStatusNow(st superStatus) {
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

// taskInitMain runs in the task init process, as the task's user, in the
// task's cgroup and process group: it becomes the task.
func taskInitMain() int {
	unix.CloseOnExec(fdConfig)
	unix.CloseOnExec(fdInitErr)
	errf := os.NewFile(fdInitErr, "init-err")
	refuse := func(reason, format string, args ...any) int {
		b, _ := json.Marshal(struct{ Reason, Detail string }{reason, fmt.Sprintf(format, args...)})
		_, _ = errf.Write(b)
		return exitInitRefused
	}
	var cfg superConfig
	if err := readConfig(fdConfig, &cfg); err != nil {
		return refuse(ReasonStartFailed, "task init: %v", err)
	}
	if len(cfg.Argv) == 0 {
		return refuse(ReasonStartFailed, "task init: empty argv")
	}
	// Resolved and checked here, with the credentials, the working
	// directory and the file system view the execve below will use.
	pol := Policy{Allow: cfg.Allow, AllowAny: cfg.AllowAny, Path: cfg.Path}
	exe, te := pol.resolveExecutable(cfg.Argv[0], cfg.Dir)
	if te != nil {
		return refuse(te.reason, "%s", te.detail)
	}
	env := stripLoaderEnv(cfg.Env)
	if err := setOwnRlimits(cfg.Rlimits); err != nil {
		return refuse(ReasonStartFailed, "resource limits: %v", err)
	}
	// No setuid or file-capability gain for anything the task runs.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return refuse(ReasonStartFailed, "no_new_privs: %v", err)
	}
	err := unix.Exec(exe, cfg.Argv, env)
	return refuse(ReasonStartFailed, "start %s: %v", exe, err)
}

// setOwnRlimits lowers this process's limits, never above the hard limit
// it has (raising it needs privileges, and the owner's intent is a
// ceiling).
func setOwnRlimits(ls []rlimit) error {
	for _, l := range ls {
		var old unix.Rlimit
		if err := unix.Getrlimit(l.Resource, &old); err != nil {
			return fmt.Errorf("getrlimit %s: %w", l.Name, err)
		}
		nl := unix.Rlimit{Cur: min(l.Cur, old.Max), Max: min(l.Max, old.Max)}
		if err := unix.Setrlimit(l.Resource, &nl); err != nil {
			return fmt.Errorf("setrlimit %s: %w", l.Name, err)
		}
	}
	return nil
}

// killCgroupProcs SIGKILLs every process listed in the run's cgroup.procs
// files until they list none (the pids limit bounds a fork race), or wait
// has passed. The supervisor is not in the cgroup.
func killCgroupProcs(files []string, wait time.Duration) {
	killUntilEmpty(wait, func() int {
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

// writeEndMarker records when the run was killed, fsync'd, for a peer that
// may be dead and read it only at its next boot.
func writeEndMarker(path string, atUs int64) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintf(f, "%d\n", atUs)
	_ = f.Sync()
	_ = f.Close()
}

// readEndMarker is writeEndMarker's time, if the file holds one.
func readEndMarker(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil && v > 0
}

// endMarkerFile is where the supervisor of attempt's run writes its marker.
func endMarkerFile(tasksDir, task string, attempt int) string {
	return filepath.Join(tasksDir, task, "attempt-"+strconv.Itoa(attempt), "supervisor.end")
}
