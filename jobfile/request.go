package jobfile

import (
	"fmt"
	"strings"

	"github.com/dustin/go-humanize"
	version "github.com/hashicorp/go-version"
	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// What a task asks of a machine (docs/JOBS.md, "Resources and
// requirements"): cpus, memory and gpus, and requirements on the machine's
// attributes. The bounds and the operators are the ledger's and the
// policy's (policy.MaxCPUs, policy.CheckRequirement); the ledger checks
// them again at submit.
const (
	maxCPUs = 1 << 16
	maxGPUs = 1 << 10
	// maxMaxAttempts and maxRetries are the ledger's bounds
	// (ledger.MaxMaxAttempts, ledger.MaxRetries).
	maxMaxAttempts  = 100
	maxRetries      = 100
	maxMemoryBytes  = 1 << 60
	maxRequirements = 16
	// MaxNodes bounds nodes: the ledger's bound on a gang's parts
	// (ledger.MaxGangSize).
	MaxNodes       = 1024
	maxReqValueLen = 256
	// DefaultCPUs is the request of a task that names none. Memory and
	// GPUs default to none: a task that gives no memory is not counted
	// against any machine's memory (the owner's max_memory_bytes still
	// caps its run).
	DefaultCPUs = 1
)

// Requirement is one constraint on a machine's attributes: Attribute
// ("os", "arch" or "label.NAME"), Operator (=, !=, in, not_in, version,
// is_set, is_not_set) and Value.
type Requirement struct {
	Attribute, Operator, Value string
}

var (
	requirementKeys = []string{"attribute", "operator", "value"}
	operators       = []string{"=", "!=", "in", "not_in", "version", "is_set", "is_not_set"}
)

// request is the cpus/memory/gpus/requirements keys of one mapping.
type request struct {
	cpus, memory, gpus *int64
	// maxAttempts and retries (issue 14, item 6) travel with the request
	// keys: inherited from defaults the same way.
	maxAttempts, retries *int64
	// nodes (issue 21): the machines a parallel job spans, one part of
	// cpus/memory/gpus on each.
	nodes   *int64
	reqs    []Requirement
	hasReqs bool
}

func (d *decoder) requestField(f *fields, key string, n *yaml.Node, p string) {
	if f.req == nil {
		f.req = &request{}
	}
	switch key {
	case "cpus":
		if v, ok := d.integer(n, p, 1, maxCPUs); ok {
			f.req.cpus = &v
		}
	case "gpus":
		if v, ok := d.integer(n, p, 0, maxGPUs); ok {
			f.req.gpus = &v
		}
	case "max_attempts":
		if v, ok := d.integer(n, p, 1, maxMaxAttempts); ok {
			f.req.maxAttempts = &v
		}
	case "retries":
		if v, ok := d.integer(n, p, 0, maxRetries); ok {
			f.req.retries = &v
		}
	case "nodes":
		if v, ok := d.integer(n, p, 1, MaxNodes); ok {
			f.req.nodes = &v
		}
	case "memory":
		if v, ok := d.memory(n, p); ok {
			f.req.memory = &v
		}
	case "requirements":
		if rs, ok := d.requirements(n, p); ok {
			f.req.reqs, f.req.hasReqs = rs, true
		}
	}
}

// memory reads a size: bytes, or a number with a unit ("16GiB", "512MiB").
func (d *decoder) memory(n *yaml.Node, p string) (int64, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		return d.integer(n, p, 0, maxMemoryBytes)
	}
	s, ok := d.text(n, p)
	if !ok {
		return 0, false
	}
	b, err := humanize.ParseBytes(s)
	if err != nil {
		d.At(n, p, "want a size such as 512MiB or 16GiB (or a number of bytes), got %q", s)
		return 0, false
	}
	if b > maxMemoryBytes {
		d.At(n, p, "%s is over the limit of 1 EiB", s)
		return 0, false
	}
	return int64(b), true
}

func (d *decoder) requirements(n *yaml.Node, p string) ([]Requirement, bool) {
	items, ok := d.Sequence(n, p)
	if !ok {
		return nil, false
	}
	if len(items) > maxRequirements {
		d.At(n, p, "%d requirements, more than %d", len(items), maxRequirements)
		return nil, false
	}
	var out []Requirement
	good := true
	for i, it := range items {
		ip := yamlfile.Index(p, i)
		_, m, ok := d.Mapping(it, ip, requirementKeys)
		if !ok || len(m)*2 != len(it.Content) {
			good = false
			continue
		}
		var r Requirement
		for _, key := range []string{"attribute", "operator"} {
			e, ok := m[key]
			if !ok {
				d.At(it, ip, "missing %s", key)
				good = false
				continue
			}
			v, ok := d.text(e.V, yamlfile.Join(ip, key))
			if !ok {
				good = false
				continue
			}
			if key == "attribute" {
				r.Attribute = v
			} else {
				r.Operator = v
			}
		}
		var valueNode *yaml.Node
		if e, ok := m["value"]; ok {
			valueNode = e.V
			if r.Value, ok = d.text(e.V, yamlfile.Join(ip, "value")); !ok {
				good = false
				continue
			}
		}
		if r.Attribute == "" || r.Operator == "" {
			continue
		}
		if err := checkRequirement(r, valueNode != nil); err != nil {
			at, field := it, ip
			switch err.field {
			case "attribute", "operator":
				at, field = m[err.field].V, yamlfile.Join(ip, err.field)
			case "value":
				if valueNode != nil {
					at = valueNode
				}
				field = yamlfile.Join(ip, "value")
			}
			d.At(at, field, "%s", err.msg)
			good = false
			continue
		}
		out = append(out, r)
	}
	return out, good
}

type reqError struct{ field, msg string }

// checkRequirement is the policy's rule (policy.CheckRequirement) with the
// field to blame.
func checkRequirement(r Requirement, hasValue bool) *reqError {
	if !validAttribute(r.Attribute) {
		return &reqError{"attribute", fmt.Sprintf("%q: want os, arch or label.NAME (NAME: 1-64 characters of [A-Za-z0-9._-])", r.Attribute)}
	}
	if len(r.Value) > maxReqValueLen {
		return &reqError{"value", fmt.Sprintf("longer than %d bytes", maxReqValueLen)}
	}
	switch r.Operator {
	case "=", "!=":
		if !hasValue {
			return &reqError{"value", "missing (the value to compare with)"}
		}
	case "in", "not_in":
		if strings.TrimSpace(r.Value) == "" {
			return &reqError{"value", fmt.Sprintf("operator %s: want a comma-separated list of values", r.Operator)}
		}
	case "version":
		if _, err := version.NewConstraint(r.Value); err != nil {
			return &reqError{"value", fmt.Sprintf("%q: want version constraints such as \">= 11.0, < 13\": %v", r.Value, err)}
		}
	case "is_set", "is_not_set":
		if hasValue {
			return &reqError{"value", fmt.Sprintf("operator %s takes no value", r.Operator)}
		}
	default:
		return &reqError{"operator", fmt.Sprintf("%q: want one of %s", r.Operator, strings.Join(operators, ", "))}
	}
	return nil
}

func validAttribute(a string) bool {
	if a == "os" || a == "arch" {
		return true
	}
	name, ok := strings.CutPrefix(a, "label.")
	if !ok || name == "" || len(name) > 64 {
		return false
	}
	for i, c := range []byte(name) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// mergeRequest is a task's request over the defaults': each key given on
// the task wins.
func mergeRequest(t, defs *request) (cpus, memory, gpus int64, reqs []Requirement) {
	for _, r := range []*request{defs, t} {
		if r == nil {
			continue
		}
		if r.cpus != nil {
			cpus = *r.cpus
		}
		if r.memory != nil {
			memory = *r.memory
		}
		if r.gpus != nil {
			gpus = *r.gpus
		}
		if r.hasReqs {
			reqs = r.reqs
		}
	}
	return cpus, memory, gpus, reqs
}

// mergeRetry is a task's max_attempts and retries over the defaults'
// (0: not given).
func mergeRetry(t, defs *request) (maxAttempts, retries int) {
	for _, r := range []*request{defs, t} {
		if r == nil {
			continue
		}
		if r.maxAttempts != nil {
			maxAttempts = int(*r.maxAttempts)
		}
		if r.retries != nil {
			retries = int(*r.retries)
		}
	}
	return maxAttempts, retries
}

// mergeNodes is a task's nodes over the defaults' (0: not given, one
// machine).
func mergeNodes(t, defs *request) (nodes int) {
	for _, r := range []*request{defs, t} {
		if r != nil && r.nodes != nil {
			nodes = int(*r.nodes)
		}
	}
	return nodes
}
