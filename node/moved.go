package node

import (
	"context"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/transfer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// What moved out of node (issue 13) and is still named here by node files
// that other changes are editing at the same time. Remove each once its
// users name the new package.

// CheckpointConfig: checkpoint.go.
type CheckpointConfig = config.CheckpointConfig

// TasksDir: checkpoint.go.
const TasksDir = config.TasksDir

// validName: heartbeat.go, fuzz_heartbeat_test.go.
func validName(s string) bool { return config.ValidName(s) }

// The file transfers moved to package transfer.

// fetchInputs: bridge.go.
func (n *Node) fetchInputs(ctx context.Context, t ledger.Task) (map[string][]byte, error) {
	return n.files.FetchInputs(ctx, t)
}

// shipOutputs: bridge.go.
func (n *Node) shipOutputs(ctx context.Context, t ledger.Task, machine string, outputs map[string]string) error {
	return n.files.ShipOutputs(ctx, t, machine, outputs)
}

// listOutputs: backend.go, rerun_test.go.
func (n *Node) listOutputs(task string) []string { return n.files.ListOutputs(task) }

// readLocalLog: backend.go.
func (n *Node) readLocalLog(task, stream string) ([]byte, error) {
	return n.files.ReadLocalLog(task, stream)
}

// digestOf, validTaskID, protocolID, ProtoLogs, CodeNotFound: backend.go.
func digestOf(b []byte) string        { return transfer.Digest(b) }
func validTaskID(s string) bool       { return transfer.ValidTaskID(s) }
func protocolID(s string) protocol.ID { return protocol.ID(s) }

const (
	ProtoLogs    = transfer.ProtoLogs
	CodeNotFound = transfer.CodeNotFound
)
