package executor

import (
	"crypto/rand"
	"encoding/hex"
	"os"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"strconv"
	"sync"
	"syscall"
)

// cgroupPool hands each run in progress a cgroup that no other live run
// holds, and keeps the cgroups of runs that are over for the machine's
// next runs: making a cgroup (a directory and its limits in each v1
// hierarchy) and removing it cost about as much CPU as the short task
// itself (issue 22). A machine with several CPUs runs several tasks at
// once, each with a cgroup of its own (<slot>.<k>, k from 0, as the end
// markers); a cgroup goes back to its machine's free list only once its
// run is over and it is checked vacant — no process left and no cgroup
// under it in any hierarchy, not frozen — and is never handed to a second
// run before that. One that is not vacant is removed (or, with survivors,
// left), and its name is never used again.
//
// A run's limits are the owner's policy, the same for every run of the
// executor, so a kept cgroup keeps them. What a kept cgroup also keeps is
// its counters and, on v1, the page cache its runs' files left charged to
// its memory cgroup, which the kernel reclaims under the next run's limit
// as it would any cache.
type cgroupPool struct {
	maker  cgroupMaker
	limits cgroupLimits
	slots  map[string]int
	// tag tells this executor's cgroups from those of another executor in
	// the same process (tests and demos run several).
	tag string

	mu   sync.Mutex
	free map[string][]runCgroup // by machine
	next map[string]int         // the next k of each machine
}

func newCgroupPool(maker cgroupMaker, limits cgroupLimits, slots map[string]int) *cgroupPool {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &cgroupPool{maker: maker, limits: limits, slots: slots, tag: hex.EncodeToString(b),
		free: map[string][]runCgroup{}, next: map[string]int{}}
}

// take returns a cgroup for a run on machine that no live run holds: a
// kept one, or a new one.
func (p *cgroupPool) take(machine string) (runCgroup, error) {
	p.mu.Lock()
	if fl := p.free[machine]; len(fl) > 0 {
		cg := fl[len(fl)-1]
		p.free[machine] = fl[:len(fl)-1]
		p.mu.Unlock()
		return cg, nil
	}
	k := p.next[machine]
	p.next[machine] = k + 1
	p.mu.Unlock()
	return p.maker.make(p.name(machine, k), p.limits)
}

// name is the k-th cgroup of machine: <slot>.<k>-<peer pid>-<tag>, which
// the sweep of a later peer reads the pid from (ownerGone).
func (p *cgroupPool) name(machine string, k int) string {
	return strconv.Itoa(p.slots[machine]) + "." + strconv.Itoa(k) + "-" + strconv.Itoa(os.Getpid()) + "-" + p.tag
}

// give takes back the cgroup of a run that is over. keep says the run
// ended known and whole (its processes found gone, its supervisor alive);
// the cgroup is then kept if it is vacant, and removed otherwise.
// supVacant says the run's supervisor found it vacant as the task ended
// (supervise.Status.CgroupsVacant), which then need not be read again:
// only the peer's own kill since (which found it empty, or froze it)
// counts.
func (p *cgroupPool) give(machine string, cg runCgroup, keep, supVacant bool) error {
	if keep && (supVacant && !cg.acted() || cg.vacant()) {
		p.mu.Lock()
		p.free[machine] = append(p.free[machine], cg)
		p.mu.Unlock()
		return nil
	}
	return cg.remove()
}

// close removes the kept cgroups (the executor's runs are over).
func (p *cgroupPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for m, fl := range p.free {
		for _, cg := range fl {
			_ = cg.remove()
		}
		delete(p.free, m)
	}
}

// cgroupDirEmpty reports whether cgroup directory dir has no cgroup under
// it (a directory's link count is 2 plus its subdirectories, on the
// cgroup file system as on others) and no process in it.
func cgroupDirEmpty(dir string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil || st.Nlink != 2 {
		return false
	}
	return procsEmpty(dir + "/cgroup.procs")
}

// procsEmpty reports whether a cgroup.procs file lists no process (and
// could be read).
func procsEmpty(file string) bool {
	var buf [64]byte
	b, err := supervise.ReadSmall(file, buf[:])
	return err == nil && len(b) == 0
}
