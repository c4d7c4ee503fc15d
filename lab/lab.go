// Package lab is coopgrid's research tooling, kept out of the daemon's path
// and out of the pure policy core: scenario files (lab/scenario), the
// discrete-event simulator (lab/sim) and its charts (lab/plot), and the
// bodies of `peer sim` (lab/simcase), `peer reproduce` (lab/reproduce) and
// `peer demo` (lab/demo).
//
// Its packages may import policy, ledger's types, node and api; nothing
// imports them but cmd/peer and other lab packages.
package lab

import (
	"fmt"

	"github.com/coopgrid/coopgrid/policy"
)

// PolicyNames are the policies `peer sim` and `peer reproduce` accept (the
// command line names them without importing the policy core).
func PolicyNames() []string { return policy.Names() }

// UsageError marks bad command-line input (a flag out of range, a scenario
// file that does not parse): `peer` exits with code 2 instead of 1.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef builds a UsageError from a message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}
