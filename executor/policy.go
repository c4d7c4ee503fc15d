package executor

import (
	"errors"
	"fmt"
	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Policy is what the owner of the machines lets run on them. The zero
// Policy allows nothing: the owner opts in with Allow or AllowAny.
//
// Size limits that are 0 take the Default* values; time, CPU, address-space
// and process limits that are 0 mean "no limit".
type Policy struct {
	// Allow lists the executables tasks may start: absolute paths, or bare
	// names looked up in Path when a task is checked. A task's argv[0] is
	// allowed if it resolves to the same file (device and inode) as an
	// entry. Allowing a shell or an interpreter allows whatever it runs.
	Allow []string
	// AllowAny allows every executable, including files shipped as inputs.
	AllowAny bool
	// Orgs names the organisations that may use the machines besides their
	// owner; empty lets every organisation. The scheduler enforces it (it
	// is part of the machines' registration); the executor does not see
	// who submitted a task.
	Orgs []string
	// RunAs is the unprivileged user tasks run as: a user name, "uid" or
	// "uid:gid". It needs the peer to run as root; otherwise tasks fail with
	// ReasonRunAsUnavailable. Empty runs tasks as the peer's own user.
	RunAs string
	// UnsafeRunAsPeerUser lets tasks run as the peer's own user when there
	// is no RunAs: they can then read the peer's keys and API token and
	// write its data directory. Without it such a peer refuses to start
	// its executor (checkProtection). Only for a peer alone on a
	// throw-away machine, or tests.
	UnsafeRunAsPeerUser bool
	// Path is the PATH given to tasks and used to resolve bare names
	// (default DefaultPath). Every element must be absolute.
	Path string
	// MaxWallClock caps every task's wall-clock time.
	MaxWallClock time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL when the wall-clock
	// limit is reached and when the executor is closed (default
	// DefaultKillGrace).
	KillGrace time.Duration
	// MaxCPUSeconds is RLIMIT_CPU of each process of the task: SIGXCPU at
	// the limit, SIGKILL one second later.
	MaxCPUSeconds uint64
	// MaxAddressSpaceBytes is RLIMIT_AS of each process of the task.
	MaxAddressSpaceBytes uint64
	// MaxProcesses is RLIMIT_NPROC. The kernel counts it per real user ID
	// and does not apply it to root, so it only bites together with RunAs.
	MaxProcesses uint64
	// MaxMemoryBytes bounds the memory (RSS and page cache) of a run's
	// processes together: its cgroup's memory limit. Over it the kernel
	// kills a process of the run. Needs cgroups.
	MaxMemoryBytes uint64
	// MaxCPUs bounds the CPU a run's processes use together, in CPUs
	// (1.5 = one and a half cores): its cgroup's CPU quota. Needs cgroups.
	MaxCPUs float64
	// MaxDiskBytes bounds the disk a run uses in its task directory (work
	// directory, $TMPDIR, checkpoint directory, captured logs), checked
	// every ProcessConfig.DiskCheckInterval: over it the run is killed
	// with ReasonDiskLimit.
	MaxDiskBytes int64
	// KeepTaskDirs is how long a run's attempt directory is kept after
	// its outputs were delivered (ProcessExecutor.Discard); 0 removes it
	// at once.
	KeepTaskDirs time.Duration
	// MaxInputBytes bounds the total size of a task's input files.
	MaxInputBytes int64
	// MaxOutputBytes and MaxOutputFiles bound the collected outputs.
	MaxOutputBytes int64
	MaxOutputFiles int
	// MaxLogBytes bounds each of stdout and stderr; the rest is discarded.
	MaxLogBytes int64
}

// Defaults of Policy.
const (
	DefaultPath           = "/usr/local/bin:/usr/bin:/bin"
	DefaultKillGrace      = 5 * time.Second
	DefaultMaxInputBytes  = 64 << 20
	DefaultMaxOutputBytes = 1 << 30
	DefaultMaxOutputFiles = 10000
	DefaultMaxLogBytes    = 16 << 20
)

// Validate checks the policy's own shape (not whether the named users and
// executables exist: that is checked per task, so the owner can install
// them later).
func (p Policy) Validate() error {
	for _, a := range p.Allow {
		if a == "" || strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("allow: empty or malformed entry %q", a)
		}
		if strings.Contains(a, "/") && !filepath.IsAbs(a) {
			return fmt.Errorf("allow: %q: want an absolute path or a bare name", a)
		}
	}
	if p.MaxCPUs < 0 || p.MaxCPUs != p.MaxCPUs || p.MaxCPUs > 1<<20 {
		return fmt.Errorf("max_cpus: want a number of CPUs ≥ 0, got %v", p.MaxCPUs)
	}
	if p.Path != "" {
		for _, d := range filepath.SplitList(p.Path) {
			if !filepath.IsAbs(d) {
				return fmt.Errorf("path: element %q is not absolute", d)
			}
		}
	}
	if p.RunAs != "" {
		if _, _, err := parseRunAs(p.RunAs, true); err != nil {
			return fmt.Errorf("run_as: %w", err)
		}
	}
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"max_wall_clock", int64(p.MaxWallClock)},
		{"kill_grace", int64(p.KillGrace)},
		{"max_input_bytes", p.MaxInputBytes},
		{"max_output_bytes", p.MaxOutputBytes},
		{"max_output_files", int64(p.MaxOutputFiles)},
		{"max_log_bytes", p.MaxLogBytes},
		{"max_disk_bytes", p.MaxDiskBytes},
		{"keep_task_dirs", int64(p.KeepTaskDirs)},
	} {
		if c.v < 0 {
			return fmt.Errorf("%s: must not be negative, got %d", c.name, c.v)
		}
	}
	return nil
}

func (p Policy) path() string {
	if p.Path == "" {
		return DefaultPath
	}
	return p.Path
}

func (p Policy) killGrace() time.Duration {
	if p.KillGrace == 0 {
		return DefaultKillGrace
	}
	return p.KillGrace
}

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

func (p Policy) maxInputBytes() int64  { return orDefault(p.MaxInputBytes, DefaultMaxInputBytes) }
func (p Policy) maxOutputBytes() int64 { return orDefault(p.MaxOutputBytes, DefaultMaxOutputBytes) }
func (p Policy) maxLogBytes() int64    { return orDefault(p.MaxLogBytes, DefaultMaxLogBytes) }
func (p Policy) maxOutputFiles() int {
	return int(orDefault(int64(p.MaxOutputFiles), DefaultMaxOutputFiles))
}

// wallClock is the effective limit of a run: the smaller of the spec's and
// the policy's, 0 when neither sets one.
func (p Policy) wallClock(spec time.Duration) time.Duration {
	switch {
	case spec == 0:
		return p.MaxWallClock
	case p.MaxWallClock == 0 || spec < p.MaxWallClock:
		return spec
	}
	return p.MaxWallClock
}

// resolveExecutable turns argv[0] into the path to execute and checks it
// against the policy. workDir is where relative paths point. The task
// init makes the same check, with the same code, just before the execve.
func (p Policy) resolveExecutable(argv0, workDir string) (string, *taskError) {
	exe, reason, detail := supervise.Resolve(argv0, workDir, p.Allow, p.AllowAny, p.path())
	if reason != "" {
		return "", failf(reason, "%s", detail)
	}
	return exe, nil
}

// parseRunAs reads "name", "uid" or "uid:gid". With syntaxOnly it checks the
// form without looking the user up.
func parseRunAs(s string, syntaxOnly bool) (uid, gid uint32, err error) {
	name, group, hasGroup := strings.Cut(s, ":")
	if name == "" || (hasGroup && group == "") {
		return 0, 0, fmt.Errorf("%q: want a user name, uid or uid:gid", s)
	}
	if hasGroup {
		u, err1 := strconv.ParseUint(name, 10, 32)
		g, err2 := strconv.ParseUint(group, 10, 32)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("%q: uid:gid must both be numbers", s)
		}
		uid, gid = uint32(u), uint32(g)
	} else if syntaxOnly {
		return 0, 0, nil
	} else if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		uid = uint32(n)
		u, err := user.LookupId(name)
		if err != nil {
			return 0, 0, fmt.Errorf("uid %s: no such user to take the group from (give uid:gid): %w", name, err)
		}
		g, err := strconv.ParseUint(u.Gid, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("uid %s: non-numeric gid %q", name, u.Gid)
		}
		gid = uint32(g)
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return 0, 0, fmt.Errorf("user %q: %w", name, err)
		}
		uu, err1 := strconv.ParseUint(u.Uid, 10, 32)
		g, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("user %q: non-numeric uid/gid %s:%s", name, u.Uid, u.Gid)
		}
		uid, gid = uint32(uu), uint32(g)
	}
	if (!syntaxOnly || hasGroup) && (uid == 0 || gid == 0) {
		return 0, 0, errors.New("must be an unprivileged user (uid and gid not 0)")
	}
	return uid, gid, nil
}

// runAs resolves the policy's user for a task. ok is false when tasks run
// as the peer's own user.
func (p Policy) runAs() (uid, gid uint32, ok bool, terr *taskError) {
	if p.RunAs == "" {
		return 0, 0, false, nil
	}
	if euid := os.Geteuid(); euid != 0 {
		return 0, 0, false, failf(ReasonRunAsUnavailable, "the machine owner's policy runs tasks as %q, which needs the peer to run as root (it runs as uid %d)", p.RunAs, euid)
	}
	uid, gid, err := parseRunAs(p.RunAs, false)
	if err != nil {
		return 0, 0, false, failf(ReasonRunAsUnavailable, "run as %v", err)
	}
	return uid, gid, true, nil
}

// checkTraversable verifies that a process running as uid/gid can reach
// dir: every ancestor must be searchable by it. The kernel would refuse the
// chdir after the credential change with a bare EACCES; this names the
// directory.
func checkTraversable(dir string, uid, gid uint32) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := statOwner(fi)
		if ok {
			perm := fi.Mode().Perm()
			var can bool
			switch {
			case st.uid == uid:
				can = perm&0o100 != 0
			case st.gid == gid:
				can = perm&0o010 != 0
			default:
				can = perm&0o001 != 0
			}
			if !can {
				return fmt.Errorf("directory %s (mode %v) is not searchable by uid %d gid %d", d, fi.Mode().Perm(), uid, gid)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// checkProtection refuses a policy under which tasks would run with the
// peer's own privileges: tasks may run only as a dedicated RunAs user, in
// the Landlock sandbox of a peer that is not root, or with the owner's
// explicit UnsafeRunAsPeerUser. A policy that allows
// nothing needs neither. A RunAs the peer cannot switch to is not refused
// here: every task then fails with ReasonRunAsUnavailable, and none runs
// as the peer.
func checkProtection(p Policy, sandbox bool) error {
	if p.UnsafeRunAsPeerUser || p.RunAs != "" || (len(p.Allow) == 0 && !p.AllowAny) {
		return nil
	}
	if sandbox && os.Geteuid() != 0 {
		// The sandbox hides the data directory; switching users is
		// impossible anyway. Root is too strong for a sandbox alone.
		return nil
	}
	return fmt.Errorf("policy: no run_as user, so tasks would run as the peer's own user (uid %d) and could read its keys and write its data directory; "+
		"set run_as to a dedicated unprivileged user (the peer must run as root), or, knowingly, unsafe_run_as_peer_user: true", os.Geteuid())
}
