package node

import (
	"fmt"
	"github.com/coopgrid/coopgrid/consensus"
	"path/filepath"

	"github.com/coopgrid/coopgrid/runner"
)

// CheckpointsDir holds this peer's checkpoint archives (checkpoint.Store).
const CheckpointsDir = "checkpoints"

// newRunner wires the runner of this peer's machines (allocations →
// executor → reports, with the checkpoint glue) to the node: the ledger
// replica, proposals for this organisation, the file transfers, and the
// configuration. It serves the checkpoint replication protocol from now
// on; setup starts the rest once the peer has caught up.
func (n *Node) newRunner() (*runner.Runner, error) {
	ck := n.cfg.Checkpoint
	r, err := runner.New(runner.Config{
		Org:            n.org,
		Self:           n.self,
		Machines:       n.machineNames(),
		Hosts:          n.machineHosts(),
		Executor:       n.exec,
		StopGrace:      n.cfg.Executor.StopGrace,
		Lease:          n.runLease(),
		Ledger:         n.cons,
		Propose:        n.propose,
		Retryable:      consensus.Retryable,
		DeclareLost:    n.declareLost,
		FetchInputs:    n.files.FetchInputs,
		ShipOutputs:    n.files.ShipOutputs,
		Host:           n.host,
		TasksDir:       n.tasksDir(),
		CheckpointsDir: filepath.Join(n.dir, CheckpointsDir),
		Checkpoint: runner.CheckpointConfig{
			Replication:     ck.Replication,
			Grace:           ck.Grace,
			MaxArchiveBytes: ck.MaxArchiveBytes,
			MaxTaskBytes:    ck.MaxTaskBytes,
			MaxPeerBytes:    ck.MaxPeerBytes,
			TransferTimeout: ck.TransferTimeout,
			GCInterval:      ck.GCInterval,
			Interval:        ck.Interval,
		},
		ReconcileInterval: n.opts.ReconcileInterval,
		Progress:          runner.ProgressConfig{Interval: n.opts.ProgressInterval},
		Now:               n.now,
		Logger:            n.log,
		Observer:          n.metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return r, nil
}
