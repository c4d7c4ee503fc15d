package jobfile

import "github.com/coopgrid/coopgrid/internal/yamlfile"

// Error is one problem found in a job file: the file, the position (1-based
// line and column; 0 when unknown) and the field path, e.g.
//
//	sweep.yaml:12:7: tasks[3].wall_clock_limit: must be > 0, got "-5m"
//
// Err is the underlying error when there is one (a missing input file:
// errors.Is(err, fs.ErrNotExist) holds).
type Error = yamlfile.Error

// maxErrors caps how many problems one Parse reports.
const maxErrors = yamlfile.MaxErrors
