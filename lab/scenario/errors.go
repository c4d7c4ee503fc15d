package scenario

import "github.com/coopgrid/coopgrid/internal/yamlfile"

// Error is one problem found in a scenario file: the file, the position
// (1-based line and column; 0 when unknown) and the field path, so a
// researcher can go straight to the mistake:
//
//	model1.yaml:14:9: orgs[1].machines[0].watts: must be > 0, got -3
type Error = yamlfile.Error

// maxErrors caps how many problems one Parse reports.
const maxErrors = yamlfile.MaxErrors
