package node

import "github.com/coopgrid/coopgrid/config"

// What moved out of node (issue 13) and is still named here by node files
// that other changes are editing at the same time. Remove each once its
// users name the new package.

// CheckpointConfig: checkpoint.go.
type CheckpointConfig = config.CheckpointConfig

// TasksDir: checkpoint.go.
const TasksDir = config.TasksDir

// validName: heartbeat.go, fuzz_heartbeat_test.go.
func validName(s string) bool { return config.ValidName(s) }
