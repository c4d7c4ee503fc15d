package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
)

// Automatic reclaim on local load (seed 004's opportunistic machines;
// docs/OPERATIONS.md, "Reclaim on load"). A machine declared
// opportunistic with reclaim_load in the machines file is watched by its
// owner's peer: while the owner's load on the host stays above
// reclaim_load for reclaim_after, the peer reclaims the machine with the
// ledger's reclaim_machine (what `peer machines reclaim` proposes: its grid
// tasks are checkpointed and go back to the queue); once the load stays
// under half of reclaim_load for release_after, it releases it again. The
// two thresholds and the two hold times are the hysteresis: a load that
// hovers around the threshold does not reclaim and release the machine in
// turn. The monitor releases only what it reclaimed (kept in
// DATA/load-reclaimed.json across restarts): a machine its owner reclaimed
// by hand stays reclaimed until released by hand.
//
// The same monitor records, for every opportunistic machine of this peer,
// the owner's load in the ledger (machine_load) whenever it moved by
// loadReportStep or more since the last record: the deadline predictor
// takes it off the machine's speed on every peer alike (docs/POLICY.md §9,
// "Local load in the predictor").

// LoadSource is where the load monitor reads the owner's load.
type LoadSource interface {
	// OwnerLoad is the load of the host's own users: CPUs busy with work
	// other than the grid's, per CPU of the host (0 idle, 1 every CPU
	// busy, more when work waits). gridCPUs is how many CPUs this peer's
	// grid tasks on the host hold, to be taken off.
	OwnerLoad(ctx context.Context, gridCPUs float64) (float64, error)
}

// ProcLoad reads the host's one-minute load average from /proc/loadavg
// (Path; empty: that file) and takes the grid's tasks off it: one runnable
// task per CPU they hold. A grid task that waits on I/O counts less in the
// load average than the CPU it holds, so the owner's load is then
// underestimated (the machine is reclaimed later), never overestimated.
type ProcLoad struct {
	Path string
	// CPUs is the host's CPU count (0: runtime.NumCPU()).
	CPUs int
}

// OwnerLoad implements LoadSource.
func (p ProcLoad) OwnerLoad(_ context.Context, gridCPUs float64) (float64, error) {
	path := p.Path
	if path == "" {
		path = "/proc/loadavg"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read the host's load: %w", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0, fmt.Errorf("read the host's load: %s is empty", path)
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || load < 0 {
		return 0, fmt.Errorf("read the host's load: %s: %q is not a load average", path, fields[0])
	}
	cpus := p.CPUs
	if cpus <= 0 {
		cpus = runtime.NumCPU()
	}
	return max(0, load-gridCPUs) / float64(cpus), nil
}

// Default hold times of the reclaim keys.
const (
	defaultReclaimAfter = time.Minute
	defaultReleaseAfter = 5 * time.Minute
)

// loadHold is one watched machine's hysteresis: pure, so that its rules
// are tested without a clock.
type loadHold struct {
	threshold                  float64
	reclaimAfter, releaseAfter time.Duration
	// aboveSince and belowSince are when the load last went above the
	// threshold (while available) and under half of it (while reclaimed
	// by the monitor); zero while it is not.
	aboveSince, belowSince time.Time
}

func newLoadHold(m executor.MachineConfig) *loadHold {
	h := &loadHold{threshold: m.ReclaimLoad, reclaimAfter: m.ReclaimAfter, releaseAfter: m.ReleaseAfter}
	if h.reclaimAfter == 0 {
		h.reclaimAfter = defaultReclaimAfter
	}
	if h.releaseAfter == 0 {
		h.releaseAfter = defaultReleaseAfter
	}
	return h
}

// loadAction is what the monitor does to a machine.
type loadAction int

const (
	loadKeep loadAction = iota
	loadReclaim
	loadRelease
)

// step observes load at now on a machine that is reclaimed (by anyone) or
// not, ours saying the monitor reclaimed it, and says what to do: reclaim
// an available machine once the load stayed above the threshold for
// reclaimAfter, release one the monitor reclaimed once the load stayed
// under half of it for releaseAfter.
func (h *loadHold) step(now time.Time, load float64, reclaimed, ours bool) loadAction {
	if !reclaimed {
		h.belowSince = time.Time{}
		if sustained(&h.aboveSince, load > h.threshold, now, h.reclaimAfter) {
			return loadReclaim
		}
		return loadKeep
	}
	h.aboveSince = time.Time{}
	if sustained(&h.belowSince, ours && load < h.threshold/2, now, h.releaseAfter) {
		return loadRelease
	}
	return loadKeep
}

// sustained is one half of the hysteresis: it says whether a condition
// on the load (beyond its threshold) has held without a break for after
// by now. since is when it began to hold, kept across calls: set at the
// first observation that holds, zeroed by one that does not.
func sustained(since *time.Time, holds bool, now time.Time, after time.Duration) bool {
	if !holds {
		*since = time.Time{}
		return false
	}
	if since.IsZero() {
		*since = now
	}
	return now.Sub(*since) >= after
}

// loadReportStep is the smallest change of the owner's load (per mille)
// the monitor records: the dead band that keeps a fluctuating load from
// writing an entry at every reading.
const loadReportStep = 100

// loadReclaimedFile lists the machines the load monitor reclaimed and has
// not released yet, across restarts.
const loadReclaimedFile = "load-reclaimed.json"

// watchLoad starts the load monitor when this peer has an opportunistic
// machine.
func (n *Node) watchLoad() {
	holds := map[string]*loadHold{}
	var watched []string
	for name, m := range n.machines {
		if !m.Opportunistic {
			continue
		}
		watched = append(watched, name)
		if m.ReclaimLoad > 0 {
			holds[name] = newLoadHold(m)
		}
	}
	if len(watched) == 0 {
		return
	}
	src := n.opts.LoadSource
	if src == nil {
		src = ProcLoad{}
	}
	every := n.opts.LoadInterval
	if every <= 0 {
		every = 10 * time.Second
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.monitorLoad(src, every, watched, holds)
	}()
}

// monitorLoad reads the owner's load every interval and reclaims or
// releases the watched machines.
func (n *Node) monitorLoad(src LoadSource, every time.Duration, watched []string, holds map[string]*loadHold) {
	path := filepath.Join(n.dir, loadReclaimedFile)
	ours := map[string]bool{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &ours); err != nil {
			n.log.Warn("load monitor: unreadable list of reclaimed machines; starting afresh", "file", path, "err", err)
		}
	}
	save := func() {
		b, _ := json.Marshal(ours)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			n.log.Warn("load monitor: save the list of reclaimed machines", "file", path, "err", err)
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lastErr time.Time
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		local, grid := n.localMachines(watched)
		load, err := src.OwnerLoad(n.ctx, grid)
		if err != nil {
			if time.Since(lastErr) > time.Minute {
				lastErr = time.Now()
				n.log.Warn("load monitor: no load reading; machines left as they are", "err", err)
			}
			continue
		}
		now := n.now()
		permille := int64(min(load, 1)*1000 + 0.5)
		for _, name := range watched {
			if m, ok := local[name]; ok && abs(permille-m.OwnerLoadPermille) >= loadReportStep {
				n.recordLoad(name, permille)
			}
		}
		for name, h := range holds {
			m, known := local[name]
			if !known {
				continue
			}
			r := m.Reclaimed
			if !r && ours[name] {
				delete(ours, name) // released by hand
				save()
			}
			switch h.step(now, load, r, ours[name]) {
			case loadReclaim:
				if n.setReclaimed(name, true, load) {
					ours[name] = true
					save()
				}
			case loadRelease:
				if n.setReclaimed(name, false, load) {
					delete(ours, name)
					save()
				}
			}
		}
	}
}

// localMachines reads the watched machines this peer has registered, as
// the ledger holds them, and how many CPUs the grid's tasks placed on
// this peer's machines hold (all of them run on this host).
func (n *Node) localMachines(watched []string) (map[string]ledger.Machine, float64) {
	local := map[string]ledger.Machine{}
	var grid float64
	n.cons.View(func(l *ledger.Ledger) {
		for name := range n.machines {
			m, ok := l.Machine(n.org + "/" + name)
			if !ok {
				continue
			}
			for _, id := range m.Tasks() {
				if t, ok := l.Task(id); ok {
					grid += float64(max(t.Spec.CPUs, 1))
				}
			}
		}
		for _, name := range watched {
			if m, ok := l.Machine(n.org + "/" + name); ok {
				local[name] = m
			}
		}
	})
	return local, grid
}

func abs(x int64) int64 { return max(x, -x) }

// recordLoad proposes machine_load for machine name.
func (n *Node) recordLoad(name string, permille int64) {
	if n.crashed.Load() || n.closing.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	id := n.org + "/" + name
	if _, err := n.propose(ctx, func(c *ledger.Command) {
		c.MachineLoad = &ledger.MachineLoad{Machine: id, LoadPermille: permille}
	}); err != nil {
		n.log.Debug("load monitor: record the owner's load", "machine", id, "load_permille", permille, "err", err)
	}
}

// setReclaimed reclaims or releases machine name through the reclaim
// command the API offers its owner.
func (n *Node) setReclaimed(name string, reclaimed bool, load float64) bool {
	if n.crashed.Load() || n.closing.Load() {
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if _, err := n.ReclaimMachine(ctx, api.ReclaimRequest{Machine: name, Reclaimed: reclaimed}); err != nil {
		n.log.Warn("load monitor: reclaim machine", "machine", name, "reclaimed", reclaimed, "owner_load", load, "err", err)
		return false
	}
	verb := map[bool]string{true: "owner's load high, machine reclaimed", false: "owner's load low, machine released"}[reclaimed]
	n.log.Info("load monitor: "+verb, "machine", name, "owner_load", load)
	return true
}
