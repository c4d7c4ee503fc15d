// Package yamlfile holds what every strict YAML reader of the project
// shares: walking yaml.v3 nodes with positions, refusing aliases and
// duplicate keys, typed scalars, and keeping error messages on one line.
//
// The readers of user files that report every problem at once (job files,
// scenarios) share one positioned error type (Error), one list (ErrorList,
// with its walking methods Mapping, Sequence, Scalar) and one document
// decoder (Document). The readers of configuration files that stop at the
// first problem (a peer's config, a machines file) use a Parser, which
// builds its errors through the package's MakeErr.
package yamlfile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	humanize "github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"
)

// Parser reads nodes strictly and reports problems through MakeErr, which
// receives the node (nil when there is none), the field path and the
// message.
type Parser struct {
	MakeErr func(n *yaml.Node, field, msg string) error
}

// Errf builds an error at n for field.
func (p Parser) Errf(n *yaml.Node, field, format string, args ...any) error {
	return p.MakeErr(n, field, fmt.Sprintf(format, args...))
}

// Join appends key to a field path ("a.b").
func Join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// Index appends an index to a field path ("a[3]").
func Index(prefix string, i int) string { return prefix + "[" + strconv.Itoa(i) + "]" }

// KindName says what a node is, for messages ("want a mapping, got a list").
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return "a value"
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// Mapping walks a mapping node in file order, refusing aliases (a small
// file must not expand into a huge one) and duplicate keys.
func (p Parser) Mapping(n *yaml.Node, field string, each func(key string, k, v *yaml.Node, field string) error) error {
	if n.Kind == yaml.AliasNode {
		return p.Errf(n, field, "aliases are not supported")
	}
	if n.Kind != yaml.MappingNode {
		return p.Errf(n, field, "want a mapping, got %s", KindName(n))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.Errf(k, field, "want a plain key")
		}
		f := Join(field, k.Value)
		if seen[k.Value] {
			return p.Errf(k, f, "duplicate key")
		}
		seen[k.Value] = true
		if v.Kind == yaml.AliasNode {
			return p.Errf(v, f, "aliases are not supported")
		}
		if err := each(k.Value, k, v, f); err != nil {
			return err
		}
	}
	return nil
}

// Scalar accepts a non-null scalar.
func (p Parser) Scalar(n *yaml.Node, field string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return p.Errf(n, field, "want a value, got %s", KindName(n))
	}
	return nil
}

// Str reads a string.
func (p Parser) Str(n *yaml.Node, field string) (string, error) {
	if err := p.Scalar(n, field); err != nil {
		return "", err
	}
	if n.Tag != "!!str" {
		return "", p.Errf(n, field, "want a string, got %q", n.Value)
	}
	return n.Value, nil
}

// Number reads a finite, non-negative number (an integer is fine).
func (p Parser) Number(n *yaml.Node, field string) (float64, error) {
	if err := p.Scalar(n, field); err != nil {
		return 0, err
	}
	if n.Tag != "!!int" && n.Tag != "!!float" {
		return 0, p.Errf(n, field, "want a number, got %q", n.Value)
	}
	var x float64
	if err := n.Decode(&x); err != nil {
		return 0, p.Errf(n, field, "want a number, got %q", n.Value)
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, p.Errf(n, field, "want a finite number, got %s", n.Value)
	}
	if x < 0 {
		return 0, p.Errf(n, field, "must not be negative, got %s", n.Value)
	}
	return x, nil
}

// Count reads a non-negative integer.
func (p Parser) Count(n *yaml.Node, field string) (uint64, error) {
	if err := p.Scalar(n, field); err != nil {
		return 0, err
	}
	if n.Tag != "!!int" {
		return 0, p.Errf(n, field, "want a whole number, got %q", n.Value)
	}
	var x int64
	if err := n.Decode(&x); err != nil {
		return 0, p.Errf(n, field, "want a whole number, got %q", n.Value)
	}
	if x < 0 {
		return 0, p.Errf(n, field, "must not be negative, got %s", n.Value)
	}
	return uint64(x), nil
}

// Duration reads a non-negative Go duration ("90s", "2h").
func (p Parser) Duration(n *yaml.Node, field string) (time.Duration, error) {
	s, err := p.Str(n, field)
	if err != nil {
		return 0, p.Errf(n, field, "want a duration such as 90s or 2h, got %q", n.Value)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, p.Errf(n, field, "want a duration such as 90s or 2h: %v", err)
	}
	if d < 0 {
		return 0, p.Errf(n, field, "must not be negative, got %s", s)
	}
	return d, nil
}

// Boolean reads true or false.
func (p Parser) Boolean(n *yaml.Node, field string) (bool, error) {
	if err := p.Scalar(n, field); err != nil {
		return false, err
	}
	if n.Tag != "!!bool" {
		return false, p.Errf(n, field, "want true or false, got %q", n.Value)
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, p.Errf(n, field, "want true or false, got %q", n.Value)
	}
	return b, nil
}

// SyntaxErrorLine splits a yaml.v3 syntax error ("yaml: line 3: ...") into
// its line (0 if none) and the rest of the message.
func SyntaxErrorLine(err error) (int, string) {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	rest, ok := strings.CutPrefix(s, "line ")
	if !ok {
		return 0, s
	}
	num, msg, ok := strings.Cut(rest, ": ")
	n, err2 := strconv.Atoi(num)
	if !ok || err2 != nil {
		return 0, s
	}
	return n, msg
}

// MaxMessageRunes bounds a message made by OneLine.
const MaxMessageRunes = 300

// OneLine keeps an error message on one line and short: messages quote
// values and keys from the file, which may hold newlines or control
// characters.
func OneLine(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == MaxMessageRunes {
			b.WriteString("...")
			break
		}
		n++
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsControl(r):
			b.WriteString("?")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Describe names a node's kind and value for "wrong type" messages ("the
// string \"x\"", "a list", "nothing (null)").
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing (null)"
	case "!!bool":
		return fmt.Sprintf("the boolean %s", n.Value)
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int", "!!float":
		return "the number " + n.Value
	}
	return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
}

// maxBytes bounds a Bytes value: 1 EiB, far above any machine.
const maxBytes = 1 << 60

// Bytes reads a size: a whole number of bytes, or a number with a unit as
// github.com/dustin/go-humanize reads it ("16GiB", "512 MiB", "2GB": IEC
// units are powers of 1024, SI units powers of 1000). At most 1 EiB.
func (p Parser) Bytes(n *yaml.Node, field string) (int64, error) {
	if err := p.Scalar(n, field); err != nil {
		return 0, err
	}
	if n.Tag == "!!int" {
		c, err := p.Count(n, field)
		if err != nil {
			return 0, err
		}
		if c > maxBytes {
			return 0, p.Errf(n, field, "%d bytes is over the limit of 1 EiB", c)
		}
		return int64(c), nil
	}
	if n.Tag != "!!str" {
		return 0, p.Errf(n, field, "want a size such as 16GiB or 512MiB, got %q", n.Value)
	}
	b, err := humanize.ParseBytes(n.Value)
	if err != nil {
		return 0, p.Errf(n, field, "want a size such as 16GiB or 512MiB, got %q", n.Value)
	}
	if b > maxBytes {
		return 0, p.Errf(n, field, "%s is over the limit of 1 EiB", n.Value)
	}
	return int64(b), nil
}
