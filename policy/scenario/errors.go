package scenario

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// Error is one problem found in a scenario file. It names the file, the
// position (1-based line and column; 0 when unknown) and the field path, so
// a researcher can go straight to the mistake:
//
//	model1.yaml:14:9: orgs[1].machines[0].watts: must be > 0, got -3
type Error struct {
	File   string
	Line   int
	Column int
	// Path is the field path, e.g. "orgs[1].machines[0].watts" ("" for the
	// file as a whole).
	Path string
	Msg  string
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

// maxErrors caps how many problems one Parse reports: enough to fix a file
// in one go, not so many that a wrong file buries the first, real, mistake.
const maxErrors = 20

// errList collects the problems of one file in the order found.
type errList struct {
	file    string
	errs    []error
	dropped int
}

func (l *errList) add(line, col int, path, format string, args ...any) {
	if len(l.errs) >= maxErrors {
		l.dropped++
		return
	}
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Column: col, Path: yamlfile.OneLine(path), Msg: yamlfile.OneLine(fmt.Sprintf(format, args...))})
}

func (l *errList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	errs := l.errs
	if l.dropped > 0 {
		errs = append(errs[:len(errs):len(errs)], &Error{File: l.file, Msg: fmt.Sprintf("%d more errors not shown", l.dropped)})
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
