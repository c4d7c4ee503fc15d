package ledger

import "github.com/coopgrid/coopgrid/policy"

// Task classes and deadlines (seed 004; docs/POLICY.md §9, docs/JOBS.md
// "Deadlines"). A task without a class (every task of a version-2 log) is
// placed by the federation's policy alone, exactly as before, so that old
// logs replay to the same placements; a task of either class is placed by
// the deadline mapping among the machines the policy lets its
// organisation use.
const (
	ClassNice         = "nice"
	ClassSoftDeadline = "soft-deadline"
)

func (s *Spec) validateDeadline() *Error {
	switch s.Class {
	case "", ClassNice:
		if s.DeadlineMs != 0 {
			return errf(CodeMalformed, "deadline_ms %d: only a %s task has a deadline", s.DeadlineMs, ClassSoftDeadline)
		}
	case ClassSoftDeadline:
		if s.DeadlineMs <= 0 || s.DeadlineMs > MaxTimeMs {
			return errf(CodeMalformed, "deadline_ms %d: a %s task needs a deadline in [1, %d]", s.DeadlineMs, ClassSoftDeadline, int64(MaxTimeMs))
		}
	default:
		return errf(CodeMalformed, "class %q: want %q, %q or none", s.Class, ClassNice, ClassSoftDeadline)
	}
	return nil
}

// PolicyClass is the policy's class of a ledger class (0: none).
func PolicyClass(class string) policy.TaskClass {
	switch class {
	case ClassNice:
		return policy.Nice
	case ClassSoftDeadline:
		return policy.SoftDeadline
	}
	return 0
}

// mtbfMs is machine m's stability as the deadline mapping ranks it (the
// one place the ledger says how stable a machine is). The ledger keeps no
// failure history yet, so every machine is equally stable (0) and the
// mapping's tie-break, the machine ID, decides among those that meet a
// deadline; when the machine record folds its availability (since_ms,
// up_ms, down_ms, failures: docs/POLICY.md §9), this returns policy.MTBF
// of that fold, the same on every peer.
func (m *Machine) mtbfMs() int64 { return 0 }
