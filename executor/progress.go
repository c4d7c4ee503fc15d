package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProgressFile is the name of the file, in a run's work directory, where
// the task may report its progress: the process executor exports its path
// as $COOPGRID_PROGRESS (docs/JOBS.md, "Progress reports"). The peer reads
// it, it never writes it.
const ProgressFile = ".coopgrid-progress"

// ProgressPath is where the run of task id in progress writes its
// progress: $COOPGRID_PROGRESS of its newest attempt. ok is false when no
// run of the task is in progress here. The peer only reads the file (a
// regular file, not followed if a link: runner/progress.go).
func (e *ProcessExecutor) ProgressPath(id string) (string, bool) {
	if _, ok := e.reg.get(id); !ok || !validIdent(id, maxTaskIDLen) {
		return "", false
	}
	taskDir := filepath.Join(e.cfg.TasksDir, id)
	entries, err := os.ReadDir(taskDir)
	if err != nil {
		return "", false
	}
	newest := 0
	for _, en := range entries {
		if n, err := strconv.Atoi(strings.TrimPrefix(en.Name(), "attempt-")); err == nil && en.IsDir() && strings.HasPrefix(en.Name(), "attempt-") && n > newest {
			newest = n
		}
	}
	if newest == 0 {
		return "", false
	}
	return filepath.Join(taskDir, "attempt-"+strconv.Itoa(newest), "work", ProgressFile), true
}
