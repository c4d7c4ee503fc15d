package jobfile

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// A string of the job file that may hold placeholders: {{index}},
// {{count}} and {{param.NAME}}. It is parsed once, where it is written,
// so that a misspelt placeholder is reported at its line even if the
// template expands to no task, and expanded once per task.
type tmpl struct {
	node  *yaml.Node
	path  string
	raw   string
	parts []part // nil when raw holds no placeholder
}

type partKind uint8

const (
	partLit partKind = iota
	partIndex
	partCount
	partParam
)

type part struct {
	kind  partKind
	lit   string
	param int // index in the sweep's parameter list
}

// static says the string is the same for every task.
func (t *tmpl) static() bool { return t.parts == nil }

// vars are the values of one task's placeholders.
type vars struct {
	index, count int
	params       []string // by parameter index
}

func (t *tmpl) expand(v *vars) string {
	if t.parts == nil {
		return t.raw
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.kind {
		case partLit:
			b.WriteString(p.lit)
		case partIndex:
			b.WriteString(strconv.Itoa(v.index))
		case partCount:
			b.WriteString(strconv.Itoa(v.count))
		case partParam:
			b.WriteString(v.params[p.param])
		}
	}
	return b.String()
}

// scope is what placeholders may name: the sweep's parameters (none
// outside a template).
type scope struct {
	params map[string]int
	// template is false for a list of tasks: {{param.NAME}} is then an
	// error with its own message.
	template bool
	// lenient accepts any parameter name: template.params is broken and
	// already reported, nothing will be expanded.
	lenient bool
}

// parseTmpl splits s into literals and placeholders. Every "{{" opens a
// placeholder; there is no escape (a literal "{{" belongs in an input
// file, which is never expanded).
func parseTmpl(s string, sc *scope) ([]part, error) {
	if !strings.Contains(s, "{{") {
		return nil, nil
	}
	var parts []part
	rest := s
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				parts = append(parts, part{kind: partLit, lit: rest})
			}
			return parts, nil
		}
		if i > 0 {
			parts = append(parts, part{kind: partLit, lit: rest[:i]})
		}
		rest = rest[i+2:]
		j := strings.Index(rest, "}}")
		if j < 0 {
			return nil, fmt.Errorf("unclosed {{ in %q", s)
		}
		name := strings.TrimSpace(rest[:j])
		rest = rest[j+2:]
		switch {
		case name == "index":
			parts = append(parts, part{kind: partIndex})
		case name == "count":
			parts = append(parts, part{kind: partCount})
		case strings.HasPrefix(name, "param."):
			p := strings.TrimPrefix(name, "param.")
			if !sc.template {
				return nil, fmt.Errorf("{{%s}}: parameters exist only in a `template` with `params`", name)
			}
			k, ok := sc.params[p]
			if !ok && !sc.lenient {
				return nil, fmt.Errorf("{{%s}}: no parameter %q in template.params", name, p)
			}
			parts = append(parts, part{kind: partParam, param: k})
		default:
			return nil, fmt.Errorf("unknown placeholder {{%s}} (want {{index}}, {{count}} or {{param.NAME}})", name)
		}
	}
}

// tmplAt reads a string that may hold placeholders.
func (d *decoder) tmplAt(n *yaml.Node, path string, sc *scope) (*tmpl, bool) {
	s, ok := d.text(n, path)
	if !ok {
		return nil, false
	}
	parts, err := parseTmpl(s, sc)
	if err != nil {
		d.At(n, path, "%v", err)
		return nil, false
	}
	return &tmpl{node: n, path: path, raw: s, parts: parts}, true
}
