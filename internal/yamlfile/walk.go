package yamlfile

import (
	"math/big"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The strict readers (job files, scenarios) walk the node tree with the
// methods below, which record problems on the ErrorList and return false
// instead of stopping: one pass reports every mistake of a file.

// Entry is one key: value pair of a mapping.
type Entry struct {
	Key  string
	K, V *yaml.Node
}

// Mapping reads a mapping node. With allowed non-nil every key must be one
// of them; keys are plain and unique. It returns the valid entries in file
// order and by key; ok is false (and both nil) if n is not a mapping.
func (l *ErrorList) Mapping(n *yaml.Node, path string, allowed []string) (list []Entry, byKey map[string]Entry, ok bool) {
	if n.Kind != yaml.MappingNode {
		l.At(n, path, "must be a mapping (key: value lines), got %s", Describe(n))
		return nil, nil, false
	}
	list = make([]Entry, 0, len(n.Content)/2)
	byKey = make(map[string]Entry, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			l.At(k, path, "keys must be plain names, got %s", Describe(k))
			continue
		}
		p := Join(path, k.Value)
		if prev, dup := byKey[k.Value]; dup {
			l.At(k, p, "duplicate key (first at line %d)", prev.K.Line)
			continue
		}
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			l.At(k, p, "unknown key (want one of: %s)", strings.Join(allowed, ", "))
			continue
		}
		e := Entry{Key: k.Value, K: k, V: v}
		list = append(list, e)
		byKey[k.Value] = e
	}
	return list, byKey, true
}

// InOrder returns the entries of m, read by Mapping from n, in file order.
func InOrder(n *yaml.Node, m map[string]Entry) []Entry {
	var out []Entry
	for i := 0; i+1 < len(n.Content); i += 2 {
		if e, ok := m[n.Content[i].Value]; ok && e.K == n.Content[i] {
			out = append(out, e)
		}
	}
	return out
}

// Sequence reads a list node.
func (l *ErrorList) Sequence(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		l.At(n, path, "must be a list, got %s", Describe(n))
		return nil, false
	}
	return n.Content, true
}

// Scalar checks that n is a non-null scalar; want says what was expected
// ("a string", "a number").
func (l *ErrorList) Scalar(n *yaml.Node, path, want string) bool {
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		l.At(n, path, "must be %s, got %s", want, Describe(n))
		return false
	}
	return true
}

// decimalRE is the only decimal syntax accepted: optional sign, digits with
// an optional fraction, an optional exponent of at most three digits (a
// bigger one would make big.Rat compute a huge power of ten on hostile
// input).
var decimalRE = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$`)

// ParseDecimal parses s exactly, as the text the user wrote (never through
// float64: 0.1 GFlop must become exactly 100 MFlop). It accepts no NaN, no
// infinity, no fractions like 1/3 and no hexadecimal.
func ParseDecimal(s string) (*big.Rat, bool) {
	if len(s) > 64 || !decimalRE.MatchString(s) {
		return nil, false
	}
	return new(big.Rat).SetString(strings.TrimPrefix(s, "+"))
}
