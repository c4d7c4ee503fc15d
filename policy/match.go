package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	version "github.com/hashicorp/go-version"
)

// Requirement is one constraint of a task on a machine's attributes
// (Nomad-style attribute/operator/value; docs/JOBS.md, "Requirements").
//
// Attributes are "os" and "arch" (as Go's runtime.GOOS/GOARCH name them),
// and "label.NAME" for a machine's label NAME (its value, "" for a bare
// label). Operators:
//
//	=, !=           the attribute is (not) Value; a missing attribute is ""
//	in, not_in      the attribute is (not) one of Value's comma-separated items
//	version         the attribute is a version meeting Value, a comma-separated
//	                list of constraints such as ">= 11.0, < 13" (hashicorp/go-version)
//	is_set, is_not_set  the attribute exists (Value must be empty)
type Requirement struct {
	Attribute string
	Operator  string
	Value     string
}

// Operators lists the requirement operators, in a stable order.
func Operators() []string {
	return []string{"=", "!=", "in", "not_in", "version", "is_set", "is_not_set"}
}

// Bounds on requirements.
const (
	MaxRequirements   = 16
	MaxRequirementLen = 256
)

// CheckRequirement checks a requirement's shape: a known attribute and
// operator, a value the operator can use. It says nothing of machines.
func CheckRequirement(r Requirement) error {
	if !validAttribute(r.Attribute) {
		return fmt.Errorf("attribute %q: want os, arch or label.NAME", r.Attribute)
	}
	if len(r.Value) > MaxRequirementLen {
		return fmt.Errorf("value: longer than %d bytes", MaxRequirementLen)
	}
	switch r.Operator {
	case "=", "!=":
	case "in", "not_in":
		if strings.TrimSpace(r.Value) == "" {
			return fmt.Errorf("operator %s: want a comma-separated list of values", r.Operator)
		}
	case "version":
		if _, err := version.NewConstraint(r.Value); err != nil {
			return fmt.Errorf("operator version: value %q: %v", r.Value, err)
		}
	case "is_set", "is_not_set":
		if r.Value != "" {
			return fmt.Errorf("operator %s takes no value", r.Operator)
		}
	default:
		return fmt.Errorf("operator %q: want one of %s", r.Operator, strings.Join(Operators(), ", "))
	}
	return nil
}

// ValidAttributeName is the shape of a label name (and of the NAME in
// label.NAME): 1-64 characters of [A-Za-z0-9._-], starting with a letter
// or digit.
func ValidAttributeName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

func validAttribute(a string) bool {
	if a == "os" || a == "arch" {
		return true
	}
	name, ok := strings.CutPrefix(a, "label.")
	return ok && ValidAttributeName(name)
}

// met reports whether a machine with attributes attrs meets r. A malformed
// requirement is never met (Validate refuses it first).
func (r Requirement) met(attrs map[string]string) bool {
	v, set := attrs[r.Attribute]
	switch r.Operator {
	case "=":
		return v == r.Value
	case "!=":
		return v != r.Value
	case "in", "not_in":
		in := slices.ContainsFunc(strings.Split(r.Value, ","), func(item string) bool { return strings.TrimSpace(item) == v })
		return set && in == (r.Operator == "in") || !set && r.Operator == "not_in"
	case "version":
		if !set {
			return false
		}
		c, err := version.NewConstraint(r.Value)
		if err != nil {
			return false
		}
		ver, err := version.NewVersion(v)
		return err == nil && c.Check(ver)
	case "is_set":
		return set
	case "is_not_set":
		return !set
	}
	return false
}

func (r Requirement) String() string {
	if r.Value == "" && (r.Operator == "is_set" || r.Operator == "is_not_set") {
		return r.Attribute + " " + r.Operator
	}
	return fmt.Sprintf("%s %s %q", r.Attribute, r.Operator, r.Value)
}

// OwnerPolicy is what a machine's owner lets run on it, as far as the
// scheduler can tell before a run (the executor still checks every run).
// A nil *OwnerPolicy on a machine allows every task of every organisation
// (machines registered before owner policies, simulated executors).
type OwnerPolicy struct {
	// AllowAny allows every executable; otherwise Allow lists them, as
	// written in the owner's machines file (absolute paths or bare names).
	AllowAny bool
	Allow    []string
	// MaxWallMs caps a run's wall-clock time; 0 means no cap. A task whose
	// own wall limit is longer is not placed there (one without a limit is:
	// the executor cuts it at the cap, as it always did).
	MaxWallMs int64
	// Orgs names the organisations that may use the machine besides its
	// owner; empty means every organisation.
	Orgs []string
}

// allowsExecutable reports whether argv0 may run: an empty argv0 (a
// simulated task) always may; an entry matches when it is the same string,
// or when one of the two is a bare name and the other's base name equals
// it (the executor resolves bare names on its PATH and then compares files).
func (p *OwnerPolicy) allowsExecutable(argv0 string) bool {
	if p == nil || p.AllowAny || argv0 == "" {
		return true
	}
	for _, a := range p.Allow {
		if a == argv0 {
			return true
		}
		bareA, bareT := !strings.Contains(a, "/"), !strings.Contains(argv0, "/")
		if bareA && path.Base(argv0) == a || bareT && path.Base(a) == argv0 {
			return true
		}
	}
	return false
}

func (p *OwnerPolicy) allowsOrg(org string, owner string) bool {
	return p == nil || len(p.Orgs) == 0 || org == owner || slices.Contains(p.Orgs, org)
}

func (p *OwnerPolicy) allowsWall(wallMs int64) bool {
	return p == nil || p.MaxWallMs == 0 || wallMs <= p.MaxWallMs
}

// Unrestricted says the policy refuses nothing.
func (p *OwnerPolicy) unrestricted() bool {
	return p == nil || p.AllowAny && len(p.Orgs) == 0 && p.MaxWallMs == 0
}

// Mismatch explains why a task can never run on a machine, whatever is
// free: the owner's policy refuses it, or an attribute requirement is
// unmet. Empty when the task matches. It says nothing of the task's Avoid
// list, which depends on the other machines (Eligible).
//
// orgs names the organisations by index (State.Orgs).
func Mismatch(m Machine, t Task, orgs []Org) string {
	org, owner := orgName(orgs, t.Org), orgName(orgs, m.Owner)
	switch {
	case !m.Policy.allowsOrg(org, owner):
		return fmt.Sprintf("owner of %s refuses organisation %s", m.ID, org)
	case !m.Policy.allowsExecutable(t.Executable):
		return fmt.Sprintf("owner of %s refuses executable %s", m.ID, t.Executable)
	case !m.Policy.allowsWall(t.WallLimitMs):
		return fmt.Sprintf("owner of %s caps runs at %d ms, below the task's wall limit", m.ID, m.Policy.MaxWallMs)
	}
	for _, r := range t.Requirements {
		if !r.met(m.Attrs) {
			return "requirement " + r.String() + " unmet"
		}
	}
	capa, req := m.Capacity.Capacity(), t.Request.Request()
	if u := unmetResource(req, capa, capa); u != "" {
		return fmt.Sprintf("%s larger than %s's", u, m.ID)
	}
	return ""
}

func orgName(orgs []Org, i int) string {
	if i >= 0 && i < len(orgs) {
		return orgs[i].Name
	}
	return ""
}

// Avoids says t avoids machine id: an earlier run of t failed there.
func (t Task) Avoids(id string) bool { return slices.Contains(t.Avoid, id) }

// Eligible says, machine by machine, whether t may be placed on machines[j]
// whatever is free there: it matches (Mismatch) and t does not avoid it,
// unless t avoids every machine it matches; then avoidance is lifted and
// every matching machine is eligible again (docs/POLICY.md, "Avoided
// machines"). So a machine that failed a run of t is not chosen for t
// while another machine of the view could run it, even one busy now (t
// then waits: PendingAvoided); and a task that failed on every machine it
// may use is not stranded (max_attempts bounds its runs). The ledger
// checks a decision by the same rule (ledger.Ledger.avoidHolds).
func Eligible(machines []Machine, t Task, orgs []Org) []bool {
	ok := make([]bool, len(machines))
	other := false
	for j, m := range machines {
		ok[j] = Mismatch(m, t, orgs) == ""
		other = other || ok[j] && !t.Avoids(m.ID)
	}
	if other && len(t.Avoid) > 0 {
		for j, m := range machines {
			ok[j] = ok[j] && !t.Avoids(m.ID)
		}
	}
	return ok
}
