package executor

import (
	"errors"
	"fmt"
	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Each run in progress lives in a cgroup no other live run holds
// (containerd/cgroups: v2 where the host has the unified hierarchy, v1
// with the freezer, pids, memory and cpu controllers otherwise), named
// <CgroupParent>/<slot>.<k>-<peer pid>-<tag> and kept for the machine's
// next runs once it is checked vacant (cgroupPool). The
// supervisor writes the task into it while it is held before its first
// instruction, so every
// process of the task is counted and limited from its first instruction,
// and killing the cgroup kills every one of them — a setsid child
// included, which a process group cannot reach.

// DefaultCgroupParent is where the runs' cgroups are made, relative to the
// root of each hierarchy.
const DefaultCgroupParent = "coopgrid"

// cgroupLimits are one run's limits; 0 means none.
type cgroupLimits struct {
	memoryBytes int64
	pids        int64
	// cpuQuotaUs per cpuPeriodUs.
	cpuQuotaUs int64
}

const cpuPeriodUs = 100_000

// runCgroup is one run's cgroup.
type runCgroup interface {
	// procsFiles are the cgroup.procs files a process is written into.
	procsFiles() []string
	// signal sends sig to every process in it, best effort.
	signal(sig unix.Signal)
	// kill freezes it, SIGKILLs every process, thaws it, until it is
	// empty or wait has passed; it reports whether processes are left.
	kill(wait time.Duration) (survivors bool)
	// remove deletes the (empty) cgroup.
	remove() error
	// vacant reports whether it may serve another run (cgroupPool): no
	// process left and no cgroup under it in any hierarchy, and never
	// frozen nor killed whole (a kill that had to act leaves it to be
	// removed, not reused).
	vacant() bool
	// acted says whether kill found processes to kill.
	acted() bool
}

// cgroupMaker makes the runs' cgroups.
type cgroupMaker interface {
	make(name string, l cgroupLimits) (runCgroup, error)
	version() string
}

// newCgroupMaker checks that this host lets the peer make cgroups under
// parent, by making parent itself.
func newCgroupMaker(root, parent string) (cgroupMaker, error) {
	if cgroups.Mode() == cgroups.Unified {
		m := &cgroupV2Maker{root: root, parent: "/" + parent}
		if _, err := cgroup2.NewManager(root, m.parent, &cgroup2.Resources{}); err != nil {
			return nil, fmt.Errorf("cgroup v2 %s: %w", filepath.Join(root, parent), err)
		}
		return m, nil
	}
	m := &cgroupV1Maker{root: root, parent: "/" + parent}
	for _, c := range v1Controllers {
		p := filepath.Join(root, string(c), parent)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s controller: %w", c, err)
		}
	}
	return m, nil
}

// v1Controllers are the v1 hierarchies a run joins: freezer to stop it
// whole, pids, memory and cpu for the limits.
var v1Controllers = []cgroup1.Name{cgroup1.Freezer, cgroup1.Pids, cgroup1.Memory, cgroup1.Cpu}

type cgroupV1Maker struct{ root, parent string }

func (m *cgroupV1Maker) version() string { return "v1" }

func (m *cgroupV1Maker) make(name string, l cgroupLimits) (runCgroup, error) {
	res := &specs.LinuxResources{}
	if l.memoryBytes > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &l.memoryBytes}
	}
	if l.pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: &l.pids}
	}
	if l.cpuQuotaUs > 0 {
		period := uint64(cpuPeriodUs)
		res.CPU = &specs.LinuxCPU{Quota: &l.cpuQuotaUs, Period: &period}
	}
	root := m.root
	hier := func() ([]cgroup1.Subsystem, error) {
		return []cgroup1.Subsystem{cgroup1.NewFreezer(root), cgroup1.NewPids(root), cgroup1.NewMemory(root), cgroup1.NewCpu(root)}, nil
	}
	path := m.parent + "/" + name
	cg, err := cgroup1.New(cgroup1.StaticPath(path), res, cgroup1.WithHierarchy(hier))
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 %s: %w", path, err)
	}
	files := make([]string, len(v1Controllers))
	for i, c := range v1Controllers {
		files[i] = filepath.Join(root, string(c), path, "cgroup.procs")
	}
	return &cgroupV1{cg: cg, files: files}, nil
}

type cgroupV1 struct {
	cg    cgroup1.Cgroup
	files []string
	// froze: kill found processes and froze it (not reused).
	froze atomic.Bool
}

func (c *cgroupV1) procsFiles() []string { return c.files }

// pids lists the processes of the run's freezer cgroup and of the
// cgroups the run made under it.
func (c *cgroupV1) pids() []int { return procsUnder(filepath.Dir(c.files[0])) }

// procsUnder lists the processes in cgroup dir and its descendants: one
// read of cgroup.procs per cgroup, and a directory read only for a cgroup
// whose link count says it has cgroups under it. (The library's
// recursive Processes stats every control file of every cgroup on the
// way: a fifth of a short run's cost in the peer, twice per run.)
func procsUnder(dir string) []int {
	var out []int
	var buf [512]byte
	if b, err := supervise.ReadSmall(dir+"/cgroup.procs", buf[:]); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err == nil && st.Nlink == 2 {
		return out // no cgroup under it
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, procsUnder(filepath.Join(dir, e.Name()))...)
		}
	}
	return out
}

func (c *cgroupV1) signal(sig unix.Signal) {
	for _, pid := range c.pids() {
		_ = unix.Kill(pid, sig)
	}
}

func (c *cgroupV1) kill(wait time.Duration) bool {
	return supervise.KillUntilEmpty(wait, func() int {
		if len(c.pids()) == 0 {
			return 0 // the common case: nothing left, nothing to freeze
		}
		// Frozen, nothing in it can fork while the list is killed.
		c.froze.Store(true)
		_ = c.cg.Freeze()
		pids := c.pids()
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = c.cg.Thaw()
		return len(pids)
	})
}

func (c *cgroupV1) acted() bool { return c.froze.Load() }

func (c *cgroupV1) vacant() bool {
	if c.froze.Load() {
		return false
	}
	for _, f := range c.files {
		if !cgroupDirEmpty(filepath.Dir(f)) {
			return false
		}
	}
	return true
}

// remove deletes the run's cgroup in each hierarchy, the cgroups the run
// made under it first. It is called once kill found the run empty, so it
// removes the directories straight away; whatever it cannot remove is left
// to the library's Delete, which checks for processes and retries.
func (c *cgroupV1) remove() error {
	for _, f := range c.files {
		if err := removeCgroupDir(filepath.Dir(f)); err != nil {
			return c.cg.Delete()
		}
	}
	return nil
}

// removeCgroupDir removes cgroup dir and the cgroups under it. An empty
// cgroup's directory goes with one rmdir, its control files with it.
func removeCgroupDir(dir string) error {
	err := unix.Rmdir(dir)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	ents, rerr := os.ReadDir(dir)
	if rerr != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroupDir(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return unix.Rmdir(dir)
}

type cgroupV2Maker struct{ root, parent string }

func (m *cgroupV2Maker) version() string { return "v2" }

func (m *cgroupV2Maker) make(name string, l cgroupLimits) (runCgroup, error) {
	res := &cgroup2.Resources{}
	if l.memoryBytes > 0 {
		res.Memory = &cgroup2.Memory{Max: &l.memoryBytes}
	}
	if l.pids > 0 {
		res.Pids = &cgroup2.Pids{Max: l.pids}
	}
	if l.cpuQuotaUs > 0 {
		period := uint64(cpuPeriodUs)
		res.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&l.cpuQuotaUs, &period)}
	}
	path := m.parent + "/" + name
	mg, err := cgroup2.NewManager(m.root, path, res)
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 %s: %w", path, err)
	}
	return &cgroupV2{m: mg, file: filepath.Join(m.root, path, "cgroup.procs")}, nil
}

type cgroupV2 struct {
	m    *cgroup2.Manager
	file string
	// killed: kill found processes and killed it whole (not reused).
	killed atomic.Bool
}

func (c *cgroupV2) procsFiles() []string { return []string{c.file} }

func (c *cgroupV2) signal(sig unix.Signal) {
	ps, _ := c.m.Procs(true)
	for _, pid := range ps {
		_ = unix.Kill(int(pid), sig)
	}
}

func (c *cgroupV2) kill(wait time.Duration) bool {
	return supervise.KillUntilEmpty(wait, func() int {
		ps, _ := c.m.Procs(true)
		if len(ps) > 0 {
			c.killed.Store(true)
			_ = c.m.Kill() // cgroup.kill, or freeze-kill-thaw before 5.14
		}
		return len(ps)
	})
}

func (c *cgroupV2) remove() error { return c.m.Delete() }

func (c *cgroupV2) acted() bool { return c.killed.Load() }

func (c *cgroupV2) vacant() bool {
	return !c.killed.Load() && cgroupDirEmpty(filepath.Dir(c.file))
}

// errNoCgroups: the policy sets a limit only a cgroup can enforce, and
// this host gives the peer none.
var errNoCgroups = errors.New("cgroups unavailable")

// openCgroups sets up the runs' cgroups, or says why there are none. A
// policy whose limits only a cgroup enforces is refused without them,
// rather than run unlimited.
func openCgroups(cfg ProcessConfig, log interface{ Warn(string, ...any) }) (cgroupMaker, error) {
	needs := cfg.Policy.MaxMemoryBytes > 0 || cfg.Policy.MaxCPUs > 0
	if cfg.DisableCgroups {
		if needs {
			return nil, fmt.Errorf("policy: max_memory_bytes and max_cpus need cgroups, which are disabled")
		}
		return nil, nil
	}
	m, err := newCgroupMaker(cfg.CgroupRoot, cfg.CgroupParent)
	if err == nil {
		sweepCgroups(cfg.CgroupRoot, cfg.CgroupParent)
	}
	if err != nil {
		if needs {
			return nil, fmt.Errorf("policy: max_memory_bytes and max_cpus need cgroups: %w: %v", errNoCgroups, err)
		}
		log.Warn("executor: runs get no cgroup: no memory or CPU limit, and a process that leaves its run's process group (setsid) survives a stop", "err", err)
		return nil, nil
	}
	return m, nil
}

// cgroupLimits are the policy's limits of one run.
func (p Policy) cgroupLimits() cgroupLimits {
	return cgroupLimits{
		memoryBytes: int64(min(p.MaxMemoryBytes, 1<<62)),
		pids:        int64(min(p.MaxProcesses, 1<<30)),
		cpuQuotaUs:  int64(p.MaxCPUs * cpuPeriodUs),
	}
}

// sweepCgroups removes the empty cgroups that peers no longer running
// left under parent (a peer killed with SIGKILL cannot remove its own;
// its supervisors killed their processes). A cgroup with processes in it
// is not removed: rmdir refuses.
func sweepCgroups(root, parent string) {
	dirs := []string{filepath.Join(root, parent)}
	if cgroups.Mode() != cgroups.Unified {
		dirs = dirs[:0]
		for _, c := range v1Controllers {
			dirs = append(dirs, filepath.Join(root, string(c), parent))
		}
	}
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, ent := range ents {
			if ent.IsDir() && ownerGone(ent.Name()) {
				_ = unix.Rmdir(filepath.Join(d, ent.Name()))
			}
		}
	}
}

// ownerGone reports whether the peer whose pid is in a cgroup's name
// (<...>-<pid>-<...>, cgroupPool.name) is dead.
func ownerGone(name string) bool {
	parts := strings.Split(name, "-")
	if len(parts) < 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil || pid <= 0 {
		return false
	}
	return unix.Kill(pid, 0) == unix.ESRCH
}
