package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Progress files a task may leave in $CHECKPOINT_DIR to say how much of its
// work the checkpoint holds, as JSON {"done_mflop": N} (an optional "task"
// field must then name the task). They travel inside the archive with the
// rest of the state.
const (
	// ProgressFile is the file for real tasks.
	ProgressFile = "coopgrid-progress.json"
	// SimProgressFile is the file the simulated executor writes
	// (executor.SimCheckpointFile).
	SimProgressFile = "coopgrid-sim-progress.json"
)

// ErrNoProgress: the directory has no progress file.
var ErrNoProgress = errors.New("no progress file")

const maxProgressFile = 4 << 10

type progressFile struct {
	Task      string `json:"task,omitempty"`
	DoneMFlop *int64 `json:"done_mflop"`
}

// ReadProgress returns the work, in MFlop, that the checkpoint in dir says
// it holds, from ProgressFile or else SimProgressFile. The value must be in
// [0, sizeMFlop] and the file, if it names a task, must name task. The file
// must be a regular file (a link is refused) of at most 4 KiB. Without a
// file it returns ErrNoProgress; the daemon then falls back on its own
// estimate (see docs/CHECKPOINTS.md).
func ReadProgress(dir, task string, sizeMFlop int64) (int64, error) {
	for _, name := range []string{ProgressFile, SimProgressFile} {
		n, err := readProgressFile(filepath.Join(dir, name), task, sizeMFlop)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: %w", dir, ErrNoProgress)
}

func readProgressFile(p, task string, sizeMFlop int64) (int64, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxProgressFile+1))
	if err != nil {
		return 0, err
	}
	if len(b) > maxProgressFile {
		return 0, fmt.Errorf("over %d bytes", maxProgressFile)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var pf progressFile
	if err := dec.Decode(&pf); err != nil {
		return 0, err
	}
	switch {
	case pf.DoneMFlop == nil:
		return 0, errors.New("no done_mflop field")
	case pf.Task != "" && pf.Task != task:
		return 0, fmt.Errorf("belongs to task %q", truncate(pf.Task, 80))
	case *pf.DoneMFlop < 0 || *pf.DoneMFlop > sizeMFlop:
		return 0, fmt.Errorf("progress %d MFlop out of [0, %d]", *pf.DoneMFlop, sizeMFlop)
	}
	return *pf.DoneMFlop, nil
}
