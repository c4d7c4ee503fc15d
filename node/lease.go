package node

import (
	"time"

	"github.com/coopgrid/coopgrid/runner"
	"github.com/hashicorp/raft"
)

// runLease is the lease this peer holds on its runs (runner.Config.Lease):
// a third of the heartbeat timeout after which the leader declares a
// silent peer's machines lost. A run's supervisor kills it at most 2 × the
// lease after the last contact (executor.SetLease), two thirds of the
// heartbeat timeout, so the task is dead before it may be placed again.
// The peers of a federation must share heartbeat.timeout for this to hold
// (docs/EXECUTOR.md, "The run lease").
func (n *Node) runLease() runner.LeaseConfig {
	return runner.LeaseConfig{Duration: n.cfg.Heartbeat.Timeout / 3, Contact: n.raftContact}
}

// raftContact is when this peer last confirmed contact with its
// federation: now while it leads (a leader cut off from its quorum steps
// down within the leader lease), otherwise the last time it heard from
// the leader.
func (n *Node) raftContact() time.Time {
	if n.cons == nil {
		return time.Now()
	}
	r := n.cons.Raft()
	if r.State() == raft.Leader {
		return time.Now()
	}
	return r.LastContact()
}
