package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/executor/slurm"
	"github.com/coopgrid/coopgrid/ledger"
)

// The wiring of the Slurm backend (executor.kind: slurm, docs/SLURM.md):
// the machines come from the cluster, the executor submits jobs, and the
// nodes' availability in Slurm becomes the machines' drain flag.

// slurmDiscoverTimeout bounds the listing of the cluster's nodes at start.
const slurmDiscoverTimeout = 30 * time.Second

// slurmMachines fills mf.Machines from the cluster for a slurm executor,
// and refuses a slurm section under another kind.
func slurmMachines(kind, path string, mf *executor.MachinesFile, log *slog.Logger) error {
	if kind != "slurm" {
		if mf.Slurm != nil {
			return fmt.Errorf("machines file %s has a slurm section, but executor.kind in config.yaml is %q (want slurm)", path, kind)
		}
		return nil
	}
	s, err := slurm.ParseSettings(path, mf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), slurmDiscoverTimeout)
	defer cancel()
	ms, skipped, err := slurm.Discover(ctx, s)
	if err != nil {
		return fmt.Errorf("machines from the Slurm cluster (%s): %w", path, err)
	}
	if len(skipped) > 0 {
		log.Warn("slurm: nodes not offered", "nodes", skipped)
	}
	mf.Machines = ms
	return nil
}

// newSlurmExecutor builds the Slurm executor of the machines file.
func newSlurmExecutor(cfg config.Config, dir string, mf *executor.MachinesFile, log *slog.Logger) (executor.Executor, error) {
	s, err := slurm.ParseSettings(cfg.MachinesPath(dir), mf)
	if err != nil {
		return nil, err
	}
	tasks := s.TasksDir
	if tasks == "" {
		tasks = filepath.Join(dir, config.TasksDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), slurmDiscoverTimeout)
	defer cancel()
	e, err := slurm.New(ctx, slurm.Config{Settings: s, Machines: mf.Machines, Policy: mf.Policy, TasksDir: tasks,
		JournalPath: filepath.Join(dir, slurm.JobJournalFile), Logger: log})
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return e, nil
}

// tasksDir is where the executor keeps its runs' directories (the logs
// are served from there): DATA/tasks, or the Slurm executor's tasks_dir.
func (n *Node) tasksDir() string {
	if t, ok := n.exec.(interface{ TasksDir() string }); ok {
		return t.TasksDir()
	}
	return filepath.Join(n.dir, config.TasksDir)
}

// nodeAvailability is an executor whose machines can become unavailable
// by themselves (the Slurm executor's nodes).
type nodeAvailability interface {
	NodeAvailability() map[string]string
	AvailabilityChanged() <-chan struct{}
}

// followAvailability starts draining the machines the executor says are
// unavailable, if it says so.
func (n *Node) followAvailability() {
	a, ok := n.exec.(nodeAvailability)
	if !ok {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.drainUnavailable(a)
	}()
}

// slurmDrainedFile lists the machines drainUnavailable drained and has
// not undrained yet, across restarts.
const slurmDrainedFile = "slurm-drained.json"

// drainUnavailable drains each machine whose node is unavailable and
// undrains it once it is back, only if this loop drained it (kept in
// DATA/slurm-drained.json): a drain of the organisation's own (peer
// machines drain) is left alone.
func (n *Node) drainUnavailable(a nodeAvailability) {
	path := filepath.Join(n.dir, slurmDrainedFile)
	drained := map[string]bool{} // by this loop, not yet undrained
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &drained); err != nil {
			n.log.Warn("slurm: unreadable list of drained machines; starting afresh", "file", path, "err", err)
		}
	}
	save := func() {
		b, _ := json.Marshal(drained)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			n.log.Warn("slurm: save the list of drained machines", "file", path, "err", err)
		}
	}
	tick := time.NewTicker(n.cfg.Heartbeat.Interval)
	defer tick.Stop()
	for {
		down := a.NodeAvailability()
		for _, name := range n.machineNames() {
			why, unavailable := down[name]
			id := n.org + "/" + name
			var m ledger.Machine
			var known bool
			n.cons.View(func(l *ledger.Ledger) { m, known = l.Machine(id) })
			if !known {
				continue
			}
			switch {
			case unavailable && !m.Drained:
				if n.setDrained(id, true) {
					drained[name] = true
					save()
					n.log.Warn("slurm: node unavailable, machine drained", "machine", id, "why", why)
				}
			case !unavailable && drained[name]:
				if !m.Drained || n.setDrained(id, false) {
					delete(drained, name)
					save()
					n.log.Info("slurm: node available again, machine undrained", "machine", id)
				}
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-a.AvailabilityChanged():
		case <-tick.C:
		}
	}
}

func (n *Node) setDrained(id string, drained bool) bool {
	if n.crashed.Load() || n.closing.Load() {
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if _, err := n.propose(ctx, func(c *ledger.Command) {
		c.DrainMachine = &ledger.DrainMachine{Machine: id, Drained: drained}
	}); err != nil {
		n.log.Warn("slurm: drain machine", "machine", id, "drained", drained, "err", err)
		return false
	}
	return true
}
