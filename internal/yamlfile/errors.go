package yamlfile

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is one problem found in a file the user wrote (a job file, a
// scenario). It names the file, the position (1-based line and column; 0
// when unknown) and the field path, so that the user can go straight to the
// mistake:
//
//	sweep.yaml:12:7: tasks[3].wall_clock_limit: must be > 0, got "-5m"
type Error struct {
	File   string
	Line   int
	Column int
	// Path is the field path, e.g. "tasks[3].wall_clock_limit" ("" for the
	// file as a whole).
	Path string
	Msg  string
	// Err is the underlying error when there is one (a missing input file:
	// errors.Is(err, fs.ErrNotExist) holds).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// MaxErrors caps how many problems one file reports: enough to fix a file
// in one go, not so many that a wrong template buries the first, real,
// mistake under a hundred thousand copies.
const MaxErrors = 20

// ErrorList collects the problems of one file in the order found; Err
// returns them in file order.
type ErrorList struct {
	File    string
	errs    []error
	dropped int
	// reported holds the nodes that already have an error: a template (or
	// a default) is expanded once per task, and a value that is wrong for
	// many tasks is reported once, for the first of them.
	reported map[*yaml.Node]bool
}

// Add records a problem at a position; cause may be nil.
func (l *ErrorList) Add(line, col int, path string, cause error, format string, args ...any) {
	if len(l.errs) >= MaxErrors {
		l.dropped++
		return
	}
	l.errs = append(l.errs, &Error{File: l.File, Line: line, Column: col, Path: OneLine(path), Msg: OneLine(fmt.Sprintf(format, args...)), Err: cause})
}

// At records a problem at node n.
func (l *ErrorList) At(n *yaml.Node, path, format string, args ...any) {
	l.Add(n.Line, n.Column, path, nil, format, args...)
}

// Once records a problem at n unless n already has one.
func (l *ErrorList) Once(n *yaml.Node, path string, cause error, format string, args ...any) {
	if l.reported == nil {
		l.reported = make(map[*yaml.Node]bool)
	}
	if l.reported[n] {
		return
	}
	l.reported[n] = true
	l.Add(n.Line, n.Column, path, cause, format, args...)
}

// Count is how many problems were found, shown or not: a decoder compares
// it before and after a field to know whether that field was valid.
func (l *ErrorList) Count() int { return len(l.errs) + l.dropped }

// Full says no further problem would be shown: a decoder can stop early.
func (l *ErrorList) Full() bool { return len(l.errs) >= MaxErrors }

// Err is nil, the one problem, or every problem joined, in file order
// whatever order the checks ran in (a file's unknown keys are found before
// its values are read).
func (l *ErrorList) Err() error {
	if len(l.errs) == 0 {
		return nil
	}
	errs := slices.Clone(l.errs)
	slices.SortStableFunc(errs, func(a, b error) int {
		ea, eb := a.(*Error), b.(*Error)
		return cmp.Or(cmp.Compare(ea.Line, eb.Line), cmp.Compare(ea.Column, eb.Column))
	})
	if l.dropped > 0 {
		errs = append(errs, &Error{File: l.File, Msg: fmt.Sprintf("%d more errors not shown", l.dropped)})
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
