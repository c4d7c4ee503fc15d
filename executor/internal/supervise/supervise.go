// Package supervise is the part of a run that is not the peer: the run
// supervisor, the running binary re-executed once per executor
// (docs/EXECUTOR.md, "The supervisor").
//
// The same binary, re-executed as coopgrid-copier, is a run's output
// copier (copier.go).
//
// It is a package of its own, with the standard library, x/sys and
// internal/safeopen (itself the standard library and x/sys) as its only
// dependencies, so that its init function — the dispatch — runs before
// most packages of the rest of the binary are initialized.
//
// The peer starts one supervisor (Client), which outlives its runs:
//
//	peer ──exec, once──► coopgrid-supervisor ──per run: fork, setuid, execve──► task
//	     ◄──socket────►  (peer's user)            (run user; held at its first
//	                     one locked thread a run    instruction until the gate)
//
// The supervisor is the running binary itself (/proc/self/exe), selected
// by argv[0] together with Env. The dispatch is in this package's init
// function, so that every binary linking the executor — the peer, and
// every package's test binary — serves it: a binary that forgot the
// dispatch would run itself (its tests, its CLI) as the supervisor.
//
// For each run the peer opens, the supervisor starts the task traced on a
// fresh OS thread, so that the kernel stops it right after its execve,
// before its first instruction; it checks the executable that was exec'd,
// sets the limits and joins the cgroup while the task is stopped, and
// holds it so until the peer opens the run's gate. It then lets it go,
// waits for it, ends what it left, marks the end, and reports its wait
// status; it enforces every run's lease, because a stopped or dead peer
// cannot (server.go).
package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	Env            = "COOPGRID_EXEC_HELPER"
	SupervisorArg0 = "coopgrid-supervisor"
	// exitHelperFailed: a helper could not do its job (125, as the old
	// shell gate).
	exitHelperFailed = 125
)

// fdConfig is the copier's config descriptor, read to EOF.
const fdConfig = 3

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

// Config is what the peer tells the supervisor of a run.
type Config struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Policy is the part of the owner's policy the executable is checked
	// against.
	Allow    []string `json:"allow,omitempty"`
	AllowAny bool     `json:"allow_any,omitempty"`
	Path     string   `json:"path"`
	Rlimits  []Rlimit `json:"rlimits,omitempty"`
	// RunAs: the task's Credentials; nil keeps the supervisor's.
	RunAs *Credential `json:"run_as,omitempty"`
	// Cgroups are cgroup.procs files the task is written into before it
	// runs anything (one per v1 controller, one for v2).
	Cgroups []string `json:"cgroups,omitempty"`
	// LeaseMs, when positive, kills the run when no renewal came from the
	// peer for that long.
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// Landlock, when set, hides the peer's data directory from the task.
	Landlock *Landlock `json:"landlock,omitempty"`
}

type Credential struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Status is the supervisor's report of a run's end.
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
	// CgroupsVacant: the task's exit found the run's cgroups with no
	// process left in them (nothing to kill) and no cgroup under them, in
	// every hierarchy: the executor may keep them for another run without
	// reading them again.
	CgroupsVacant bool `json:"cgroups_vacant,omitempty"`
}

// readConfig reads a JSON config from fd to EOF.
func readConfig(fd int, v any) error {
	f := os.NewFile(uintptr(fd), "config")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<20))
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errors.New("no config: the peer went away before sending it")
	}
	return json.Unmarshal(b, v)
}

func helperFail(who string, err error) int {
	fmt.Fprintf(os.Stderr, "%s: %v\n", who, err)
	return exitHelperFailed
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
	var buf [512]byte
	b, err := ReadSmall(name, buf[:])
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
// has passed. The supervisor is not in the cgroup. It reports whether
// the first reading found none (vacant, with no cgroup under any of
// them).
func killCgroupProcs(files []string, wait time.Duration) (vacant bool) {
	rounds := 0
	survivors := KillUntilEmpty(wait, func() int {
		rounds++
		n := 0
		var buf [512]byte
		for _, f := range files {
			b, err := ReadSmall(f, buf[:])
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
	if survivors || rounds != 1 {
		return false
	}
	for _, f := range files {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Dir(f), &st); err != nil || st.Nlink != 2 {
			return false // a cgroup under it (a directory's links: 2 and one per subdirectory)
		}
	}
	return true
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
//   - no_new_privs, and the run's Landlock domain, come from the forker's
//     thread, which forks it (spawn.go);
//   - the resource limits are set on it with prlimit, and it joins the
//     run's cgroup, while it is stopped.
//
// It stays held (traced and stopped) until the caller releases it on its
// forker's thread once the run's gate opens. No shell, no helper process
// per run.
func (s *server) startTask(cfg *Config, stdout, stderr int, r *srvRun) (t *heldTask, reason, detail string) {
	if len(cfg.Argv) == 0 {
		return nil, ReasonStartFailed, "empty argv"
	}
	exe, checked, reason, detail := resolveStat(cfg.Argv[0], cfg.Dir, cfg.Allow, cfg.AllowAny, cfg.Path)
	if reason != "" {
		return nil, reason, detail
	}
	f, own, err := s.forkerFor(cfg.Landlock)
	if err != nil {
		return nil, ReasonStartFailed, err.Error()
	}
	pid, w, err := s.spawn(f, cfg, exe, stdout, stderr, r)
	if err != nil {
		if own {
			f.stop()
		}
		return nil, ReasonStartFailed, fmt.Sprintf("start %s: %v", exe, err)
	}
	t = &heldTask{pid: pid, w: w, f: f, own: own}
	select {
	case <-w.stopped:
	case x := <-w.exited:
		t.exit = &x
		t.done()
		return nil, ReasonStartFailed, fmt.Sprintf("start %s: not stopped after its execve (status %#x)", exe, uint32(x.ws))
	}
	if reason, detail := s.confine(cfg, pid, exe, checked); reason != "" {
		t.kill(r)
		t.done()
		return nil, reason, detail
	}
	// Held: the caller releases it once the gate opens.
	return t, "", ""
}

// heldTask is a started task and what the reaper says of it.
type heldTask struct {
	pid  int
	w    *taskWatch
	f    *forker // its parent and tracer
	own  bool    // f serves this run only: stopped once the task is reaped
	exit *taskExit
}

// waitExit waits until the task is reaped.
func (t *heldTask) waitExit() taskExit {
	if t.exit == nil {
		x := <-t.w.exited
		t.exit = &x
	}
	return *t.exit
}

// kill kills the task (held or not; no signal to its group any more) and
// waits until it is reaped.
func (t *heldTask) kill(r *srvRun) {
	r.mu.Lock()
	r.reaped = true
	_ = unix.Kill(t.pid, unix.SIGKILL)
	r.mu.Unlock()
	t.waitExit()
}

// done ends the run's own forker, once the task is reaped.
func (t *heldTask) done() {
	if t.own {
		t.f.stop()
	}
}

// confine checks and confines the stopped task pid. checked is the stat
// of the file exe that was checked against the allow list (nil: none was,
// allow_any): /proc/PID/exe must be that very file.
func (s *server) confine(cfg *Config, pid int, exe string, checked os.FileInfo) (reason, detail string) {
	want := checked
	if want == nil {
		var err error
		if want, err = os.Stat(exe); err != nil {
			return ReasonNotAllowed, fmt.Sprintf("executable %s changed between its check and its execve", exe)
		}
	}
	if !s.scripts.isScript(exe, want) {
		got, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || !os.SameFile(want, got) {
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
	spid := []byte(strconv.Itoa(pid))
	for _, procs := range cfg.Cgroups {
		if err := s.procs.write(procs, spid); err != nil {
			return ReasonStartFailed, fmt.Sprintf("join cgroup %s: %v", procs, err)
		}
	}
	return "", ""
}

// scriptCache remembers which executables are #! scripts, by the file's
// identity: a file replaced or rewritten since (another device or inode,
// size, modification or change time) is read again. Most runs exec the
// same few files; reading each one's first bytes again cost an open, a
// read and a close per run (issue 22).
type scriptCache struct {
	mu sync.Mutex
	m  map[fileID]bool
}

// fileID is what tells one version of a file from another.
type fileID struct {
	dev, ino, size uint64
	mtime, ctime   unix.Timespec
}

// scriptCacheMax bounds the cache; it is emptied when full.
const scriptCacheMax = 1024

// isScript reports whether the file exe, whose stat is fi, starts with
// "#!": the kernel then runs its interpreter, so /proc/PID/exe names that.
func (c *scriptCache) isScript(exe string, fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false // not a checked file: compared, not trusted
	}
	id := idOf(st)
	c.mu.Lock()
	v, hit := c.m[id]
	c.mu.Unlock()
	if hit {
		return v
	}
	v, same := isScript(exe, id)
	if !same {
		// Not the file checked: not taken for a script, so /proc/PID/exe
		// is compared with the checked one (and refused).
		return false
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= scriptCacheMax {
		c.m = map[fileID]bool{}
	}
	c.m[id] = v
	c.mu.Unlock()
	return v
}

func idOf(st *syscall.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, size: uint64(st.Size),
		mtime: unix.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}, ctime: unix.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec}}
}

// isScript reports whether path starts with "#!", and whether the file
// it read is the version id (same: false when it is another, or cannot
// be opened).
func isScript(path string, id fileID) (script, same bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, false
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || idOf(&st) != id {
		return false, false
	}
	b := make([]byte, 2)
	n, _ := io.ReadFull(f, b)
	return n == 2 && string(b) == "#!", true
}
