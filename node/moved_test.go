package node

import "github.com/coopgrid/coopgrid/config"

// What moved to config (issue 13) and is still named here by node's tests
// that other changes are editing at the same time. Remove each once its
// users name config.

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
