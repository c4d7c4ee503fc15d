package node

import (
	"context"
	"fmt"

	"github.com/coopgrid/coopgrid/gossip"
)

// startGossip joins the heartbeat topic (package gossip): heartbeats are
// validated against this peer's view of the ledger from now on. This
// peer's own heartbeats start here too, but until it is ready (setup) they
// carry only its addresses, no machines: a peer restarted on a new port
// must be reachable by a leader that moved too, or neither can dial the
// other and the peer never catches up (e2e.TestNoQuorum, seen in CI: the
// restarted old leader and the new one each knew only the other's old
// port). The leader's view of the machines does not change before ready.
func (n *Node) startGossip() error {
	if err := n.gossip.Join(n.host, n.cons); err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	n.gossip.StartPublishing(heartbeatSource{n})
	return nil
}

// heartbeatSource is what this peer's heartbeats say (gossip.Source).
type heartbeatSource struct{ n *Node }

// Telemetry is this peer's machines with the task running on each, and
// the host's draw as the executor measures it; no machines before the peer
// is ready (the heartbeat then carries only its addresses); nothing while
// the peer stops or after a (simulated) crash.
func (s heartbeatSource) Telemetry() (machines []gossip.MachineTelemetry, hostPowerMilliW int64, ok bool) {
	n := s.n
	if n.crashed.Load() || n.closing.Load() {
		return nil, 0, false
	}
	if !n.isReady() {
		return nil, 0, true
	}
	running := map[string]string{}
	if n.runner != nil {
		running = n.runner.RunningByMachine()
	}
	if m, ok := n.exec.(interface{ MeasuredPowerMilliW() (int64, bool) }); ok {
		if mw, ok := m.MeasuredPowerMilliW(); ok {
			hostPowerMilliW = mw
		}
	}
	for _, name := range n.machineNames() {
		m := n.machines[name]
		mt := gossip.MachineTelemetry{Name: name, PowerMilliW: m.IdleMilliW()}
		if task := running[name]; task != "" {
			mt.Task, mt.PowerMilliW = task, m.BusyMilliW()
		}
		machines = append(machines, mt)
	}
	return machines, hostPowerMilliW, true
}

// Published brings back up, after each heartbeat once ready, the machines
// the ledger holds as lost (after a restart, or after the leader lost sight
// of this peer).
func (s heartbeatSource) Published(ctx context.Context) {
	n := s.n
	if len(n.machines) == 0 || !n.isReady() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Heartbeat.Timeout)
	defer cancel()
	n.bringUp(ctx)
}
