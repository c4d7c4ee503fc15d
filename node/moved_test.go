package node

import (
	"context"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/transfer"
	"github.com/libp2p/go-libp2p/core/peer"
)

// What moved to config and transfer (issue 13) and is still named here by
// node's tests that other changes are editing at the same time. Remove each
// once its users name the new package.

// Config: checkpoint_test.go, federation_test.go, helpers_test.go,
// reporter_test.go, rerun_test.go.
type Config = config.Config

// InitOptions and Init: helpers_test.go.
type InitOptions = config.InitOptions

var Init = config.Init

// InputError: faultinject_test.go.
type InputError = config.InputError

// OutputsDir: checkpoint_test.go, federation_test.go. MachinesFile:
// faults_test.go.
const (
	OutputsDir   = config.OutputsDir
	MachinesFile = config.MachinesFile
)

// ProtoOutputs and handleOutputs: rerun_test.go, which wraps the handler.
const ProtoOutputs = transfer.ProtoOutputs

func (n *Node) handleOutputs(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
	return n.files.HandleOutputs(ctx, remote, req)
}
