// Package slurmtest starts a private single-host Slurm for tests, the way
// bench/e2e/slurm.sh does for `make bench-e2e`: munged, slurmctld and
// slurmd as children of the test process, with a munge key generated for
// the test, state, spool, logs and slurm.conf in a temporary directory, and
// ports of their own; nothing touches /etc/slurm, /etc/munge or a system
// Slurm. The client commands find it through SLURM_CONF, which Start sets
// in the test's environment.
//
// It needs Debian's slurm-wlm and munge (.ci/run installs them) and root
// (slurmd runs jobs as their users); without them the test is skipped,
// saying why.
package slurmtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Options shape the one node.
type Options struct {
	CPUs      int    // default 4
	MemoryMiB int    // default 4096
	Features  string // e.g. "ssd,coopgridtest"
	Partition string // default "grid"
	// Nodes is the number of nodes (default 1), each a slurmd of its own
	// on this host: one is named after the host, several <host>-n1,
	// <host>-n2... (Cluster.Nodes).
	Nodes int
}

// Cluster is a running private Slurm.
type Cluster struct {
	Dir       string
	Conf      string
	Node      string // the first node
	Nodes     []string
	Partition string
	procs     []*proc
	t         testing.TB
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Binaries are the programs needed.
var Binaries = []string{"munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo"}

// Available says whether a private Slurm can start here, or why not.
func Available() (bool, string) {
	for _, b := range Binaries {
		if _, err := exec.LookPath(b); err != nil {
			return false, fmt.Sprintf("%s not found: install Debian's slurm-wlm and munge (apt-get install slurm-wlm munge; .ci/run does)", b)
		}
	}
	if os.Geteuid() != 0 {
		return false, "a private Slurm needs root (slurmd runs each job as its user)"
	}
	return true, ""
}

// Start starts a private Slurm for t and stops it at t's end. It sets
// SLURM_CONF in the test's environment (t.Setenv).
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if ok, why := Available(); !ok {
		t.Skip("no private Slurm: " + why)
	}
	if o.CPUs == 0 {
		o.CPUs = 4
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 4096
	}
	if o.Partition == "" {
		o.Partition = "grid"
	}
	var lastErr error
	for try := 0; try < 3; try++ {
		c, err := start(t, o)
		if err == nil {
			return c
		}
		lastErr = err
		t.Logf("private Slurm: start %d failed: %v", try+1, err)
	}
	t.Fatalf("private Slurm: %v", lastErr)
	return nil
}

func start(t testing.TB, o Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "coopgrid-slurmtest-")
	if err != nil {
		return nil, err
	}
	// Jobs run as other users: they must reach the directories under it
	// that the tests give them.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Partition: o.Partition, t: t}
	ok := false
	defer func() {
		if !ok {
			c.stop()
		}
	}()
	for _, d := range []string{"munge", "state", "spool", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	// Every user submits through munged's socket (the key stays 0600).
	if err := os.Chmod(filepath.Join(dir, "munge"), 0o755); err != nil {
		return nil, err
	}
	key := filepath.Join(dir, "munge", "munge.key")
	if out, err := exec.Command("mungekey", "--create", "--keyfile="+key).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mungekey: %v: %s", err, out)
	}
	sock := filepath.Join(dir, "munge", "munge.socket")
	if err := c.spawn("munged", "munged", "--foreground", "--force", "--socket="+sock, "--key-file="+key,
		"--pid-file="+filepath.Join(dir, "munge", "munged.pid"), "--log-file="+filepath.Join(dir, "log", "munged.log"),
		"--seed-file="+filepath.Join(dir, "munge", "munged.seed")); err != nil {
		return nil, err
	}
	if err := waitFor(10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
		return nil, fmt.Errorf("munged made no socket: %s", c.tail("munged"))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	host, _, _ = strings.Cut(host, ".")
	c.Nodes = []string{host}
	ctld, err := freePort(0)
	if err != nil {
		return nil, err
	}
	slurmd, err := freePort(ctld)
	if err != nil {
		return nil, err
	}
	feat := ""
	if o.Features != "" {
		feat = " Feature=" + o.Features
	}
	// One node: named after the host, as bench/e2e/slurm.sh. Several:
	// each a slurmd of its own on this host, with its own port, spool,
	// pid and log files (%n).
	nodeLines := fmt.Sprintf("NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=%d%s State=UNKNOWN", host, o.CPUs, o.MemoryMiB, feat)
	perNode := ""
	if o.Nodes > 1 {
		c.Nodes, nodeLines, perNode = nil, "", "-%n"
		used := []int{ctld, slurmd}
		for i := 1; i <= o.Nodes; i++ {
			port, err := freePort(used...)
			if err != nil {
				return nil, err
			}
			used = append(used, port)
			name := fmt.Sprintf("%s-n%d", host, i)
			c.Nodes = append(c.Nodes, name)
			nodeLines += fmt.Sprintf("NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=%d%s State=UNKNOWN\n",
				name, host, port, o.CPUs, o.MemoryMiB, feat)
		}
		nodeLines = strings.TrimSuffix(nodeLines, "\n")
	}
	c.Node = c.Nodes[0]
	conf := fmt.Sprintf(`ClusterName=coopgridtest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool%[10]s
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd%[10]s.pid
SlurmctldLogFile=%[5]s/log/slurmctld.log
SlurmdLogFile=%[5]s/log/slurmd%[10]s.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=1
KillWait=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
SlurmdParameters=config_overrides
%[6]s
PartitionName=%[9]s Nodes=%[7]s Default=YES MaxTime=INFINITE State=UP
`, host, ctld, slurmd, sock, dir, nodeLines, strings.Join(c.Nodes, ","), "", o.Partition, perNode)
	if err := os.WriteFile(c.Conf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	t.Setenv("SLURM_CONF", c.Conf)
	if err := c.spawn("slurmctld", "slurmctld", "-D", "-c", "-f", c.Conf); err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if o.Nodes > 1 {
			if err := os.MkdirAll(filepath.Join(dir, "spool-"+n), 0o700); err != nil {
				return nil, err
			}
		}
		name := "slurmd"
		if o.Nodes > 1 {
			name = "slurmd-" + n
		}
		if err := c.spawn(name, "slurmd", "-D", "-f", c.Conf, "-N", n); err != nil {
			return nil, err
		}
	}
	var state string
	if err := waitFor(60*time.Second, func() bool {
		for _, p := range c.procs {
			if p.exited() {
				return true
			}
		}
		out, _ := exec.Command("sinfo", "-h", "-N", "-o", "%t").Output()
		state = strings.Join(strings.Fields(string(out)), " ")
		return state == strings.TrimSpace(strings.Repeat("idle ", len(c.Nodes)))
	}); err != nil || state != strings.TrimSpace(strings.Repeat("idle ", len(c.Nodes))) {
		return nil, fmt.Errorf("node not idle (state %q): %s %s", state, c.tail("slurmctld"), c.tail("slurmd"))
	}
	ok = true
	t.Cleanup(c.stop)
	t.Logf("private Slurm up in %s (nodes %s, %d CPUs, %d MiB each)", dir, strings.Join(c.Nodes, ","), o.CPUs, o.MemoryMiB)
	return c, nil
}

// spawn starts one daemon, its output in log/<name>.out. Its environment
// carries the cluster's directory as a marker, so that stop finds what it
// left (slurmstepd carries SLURM_CONF).
func (c *Cluster) spawn(name string, args ...string) error {
	f, err := os.Create(filepath.Join(c.Dir, "log", name+".out"))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "COOPGRID_SLURMTEST="+c.Dir, "SLURM_CONF="+c.Conf)
	// No Pdeathsig: it fires when the spawning OS thread ends, and the
	// executor's output copier ends the threads it locks.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	c.procs = append(c.procs, p)
	go func() { _ = cmd.Wait(); close(p.done) }()
	return nil
}

func (c *Cluster) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "log", name+".log"))
	if len(b) == 0 {
		b, _ = os.ReadFile(filepath.Join(c.Dir, "log", name+".out"))
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return name + ": " + string(b)
}

// Run runs a client command against the cluster and returns its output.
func (c *Cluster) Run(args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Jobs lists the jobs squeue shows (pending, running), as "ID|STATE|NAME".
func (c *Cluster) Jobs() []string {
	out, err := c.Run("squeue", "-h", "-o", "%i|%T|%j")
	if err != nil {
		return nil
	}
	return strings.Fields(out)
}

// stop cancels every job, then ends the daemons and whatever of this
// cluster is left (slurmstepd), by pid.
func (c *Cluster) stop() {
	if len(c.procs) > 0 {
		_, _ = c.Run("scancel", "--state=PENDING")
		_, _ = c.Run("scancel", "--state=RUNNING")
		_ = waitFor(10*time.Second, func() bool { return len(c.Jobs()) == 0 })
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		_ = c.procs[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	_ = waitFor(10*time.Second, func() bool {
		for _, p := range c.procs {
			if !p.exited() {
				return false
			}
		}
		return true
	})
	for _, p := range c.procs {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	for _, pid := range c.marked() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	c.procs = nil
	if os.Getenv("KEEP_SLURMTEST") == "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// marked lists the processes that carry this cluster's marker.
func (c *Cluster) marked() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			s := string(kv)
			if s == "COOPGRID_SLURMTEST="+c.Dir || s == "SLURM_CONF="+c.Conf {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// SetNode runs scontrol update on the node: state=down, drain, resume...
func (c *Cluster) SetNode(state, reason string) error {
	args := []string{"scontrol", "update", "nodename=" + c.Node, "state=" + state}
	if reason != "" {
		args = append(args, "reason="+reason)
	}
	out, err := c.Run(args...)
	if err != nil {
		return fmt.Errorf("scontrol update %s: %v: %s", state, err, out)
	}
	return nil
}

func waitFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// freePort picks a TCP port nothing listens on, below the ephemeral range,
// other than not.
func freePort(not ...int) (int, error) {
	for i := 0; i < 200; i++ {
		p := 15000 + rand.IntN(15000)
		if slices.Contains(not, p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port")
}
