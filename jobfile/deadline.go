package jobfile

import (
	"time"

	"gopkg.in/yaml.v3"
)

// Task classes and deadlines (docs/JOBS.md, "Deadlines"; seed 004, issue
// 20): `class: nice | soft-deadline`, `deadline:` a duration counted from
// the submission ("6h") or an RFC 3339 time, `on_miss: refuse | nice`.
const (
	ClassNice         = "nice"
	ClassSoftDeadline = "soft-deadline"
	OnMissRefuse      = "refuse"
	OnMissNice        = "nice"
	// maxDeadlineIn bounds a relative deadline like a runtime.
	maxDeadlineIn = maxRuntime
)

// Deadline is when a soft-deadline task should be finished: In after the
// submission (resolved by the peer that takes it, on its clock), or At.
// Exactly one is set on a soft-deadline task; both are zero otherwise.
type Deadline struct {
	In time.Duration
	At time.Time
}

// IsZero says no deadline was given.
func (d Deadline) IsZero() bool { return d.In == 0 && d.At.IsZero() }

// deadlineFields is the class, deadline and on_miss keys of one mapping;
// nil fields were not given.
type deadlineFields struct {
	class, onMiss   *string
	deadline        *Deadline
	classNode       *yaml.Node
	deadlineNode    *yaml.Node
	onMissNode      *yaml.Node
	deadlinePath    string
	onMissPath      string
	classPath       string
	deadlineFromDef bool
	classFromDef    bool
	onMissFromDef   bool
}

func (d *decoder) deadlineField(f *fields, key string, n *yaml.Node, p string) {
	if f.dl == nil {
		f.dl = &deadlineFields{}
	}
	switch key {
	case "class":
		if v, ok := d.oneOf(n, p, ClassNice, ClassSoftDeadline); ok {
			f.dl.class, f.dl.classNode, f.dl.classPath = &v, n, p
		}
	case "on_miss":
		if v, ok := d.oneOf(n, p, OnMissRefuse, OnMissNice); ok {
			f.dl.onMiss, f.dl.onMissNode, f.dl.onMissPath = &v, n, p
		}
	case "deadline":
		if v, ok := d.deadline(n, p); ok {
			f.dl.deadline, f.dl.deadlineNode, f.dl.deadlinePath = &v, n, p
		}
	}
}

// oneOf reads a string that must be one of want.
func (d *decoder) oneOf(n *yaml.Node, p string, want ...string) (string, bool) {
	s, ok := d.text(n, p)
	if !ok {
		return "", false
	}
	for _, w := range want {
		if s == w {
			return s, true
		}
	}
	d.At(n, p, "must be %s or %s, got %q", want[0], want[1], s)
	return "", false
}

// deadline reads a duration after submission or an RFC 3339 time.
func (d *decoder) deadline(n *yaml.Node, p string) (Deadline, bool) {
	if !d.Scalar(n, p, `a duration after submission like "6h", or an RFC 3339 time like "2026-11-26T18:00:00Z"`) {
		return Deadline{}, false
	}
	if at, err := time.Parse(time.RFC3339, n.Value); err == nil {
		return Deadline{At: at}, true
	}
	if v, err := parseDuration(n.Value); err == nil {
		switch {
		case v <= 0:
			d.At(n, p, "must be > 0 after submission, got %q", n.Value)
		case v > maxDeadlineIn:
			d.At(n, p, "must be <= %s after submission, got %q", fmtDuration(maxDeadlineIn), n.Value)
		default:
			return Deadline{In: v}, true
		}
		return Deadline{}, false
	}
	d.At(n, p, `must be a duration after submission like "6h" or an RFC 3339 time like "2026-11-26T18:00:00Z", got %q`, n.Value)
	return Deadline{}, false
}

// mergeDeadline is a task's class, deadline and on_miss over the
// defaults', checked together: a soft-deadline task needs a deadline, and
// a deadline or on_miss needs the soft-deadline class (a task of class
// nice ignores the defaults' deadline and on_miss).
func (d *decoder) mergeDeadline(p *plan, t, defs *fields) bool {
	for _, k := range []string{"class", "deadline", "on_miss"} {
		if t.invalid[k] || defs.invalid[k] {
			return false
		}
	}
	// A task that says it is nice drops the deadline and on_miss of the
	// defaults, which are there for the soft-deadline tasks.
	ownNice := t.dl != nil && t.dl.class != nil && *t.dl.class == ClassNice
	var m deadlineFields
	for i, src := range []*deadlineFields{defs.dl, t.dl} {
		if src == nil {
			continue
		}
		if i == 0 && ownNice {
			src = &deadlineFields{class: src.class, classNode: src.classNode, classPath: src.classPath}
		}
		if src.class != nil {
			m.class, m.classNode, m.classPath, m.classFromDef = src.class, src.classNode, src.classPath, i == 0
		}
		if src.deadline != nil {
			m.deadline, m.deadlineNode, m.deadlinePath, m.deadlineFromDef = src.deadline, src.deadlineNode, src.deadlinePath, i == 0
		}
		if src.onMiss != nil {
			m.onMiss, m.onMissNode, m.onMissPath, m.onMissFromDef = src.onMiss, src.onMissNode, src.onMissPath, i == 0
		}
	}
	soft := m.class != nil && *m.class == ClassSoftDeadline
	ok := true
	switch {
	case soft && m.deadline == nil:
		d.report(m.classNode, m.classPath, m.classFromDef, "class soft-deadline needs a deadline (a duration after submission like \"6h\", or an RFC 3339 time)")
		ok = false
	case !soft && m.deadline != nil:
		d.report(m.deadlineNode, m.deadlinePath, m.deadlineFromDef, "a deadline needs class: soft-deadline")
		ok = false
	}
	if !soft && m.onMiss != nil {
		d.report(m.onMissNode, m.onMissPath, m.onMissFromDef, "on_miss needs class: soft-deadline")
		ok = false
	}
	if !ok {
		return false
	}
	if m.class != nil {
		p.class = *m.class
	}
	if m.deadline != nil {
		p.deadline = *m.deadline
	}
	if m.onMiss != nil {
		p.onMiss = *m.onMiss
	}
	return true
}
