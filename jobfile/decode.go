package jobfile

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// decoder walks the node tree, collecting errors.
type decoder struct {
	yamlfile.ErrorList
	opts  Options
	nodes int
}

// check rejects, before any field is read: more nodes than allowed,
// excessive nesting, aliases and merge keys. The format has no use for
// aliases, and they are how YAML documents blow up ("billion laughs"):
// yaml.v3 keeps an alias as a pointer in the node tree, so rejecting it
// here, without following it, keeps the walk linear in the file's size.
func (d *decoder) check(n *yaml.Node, path string, depth int) {
	d.nodes++
	if d.nodes > d.opts.MaxNodes {
		d.At(n, path, "more than %d YAML nodes: the file is too large to be a job file", d.opts.MaxNodes)
		return
	}
	if depth > d.opts.MaxDepth {
		d.At(n, path, "nested more than %d levels deep", d.opts.MaxDepth)
		return
	}
	if n.Kind == yaml.AliasNode {
		d.At(n, path, "aliases (*%s) are not supported: write the value out, or use `defaults`", n.Value)
		return
	}
	if n.ShortTag() == "!!merge" {
		d.At(n, path, "merge keys (<<) are not supported: write the keys out, or use `defaults`")
		return
	}
	for i, c := range n.Content {
		p := path
		switch n.Kind {
		case yaml.MappingNode:
			if i%2 == 1 {
				p = yamlfile.Join(path, n.Content[i-1].Value)
			}
		case yaml.SequenceNode:
			p = yamlfile.Index(path, i)
		}
		d.check(c, p, depth+1)
		if d.Count() > 0 {
			return
		}
	}
}

// text reads a string. Numbers, booleans and dates are accepted as they
// are written, so that `argv: [sleep, 5]`, `OMP_NUM_THREADS: 4` and
// `day: [2024-01-31]` work and `alpha: [0.10]` stays "0.10".
func (d *decoder) text(n *yaml.Node, path string) (string, bool) {
	if !d.Scalar(n, path, "a string") {
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float", "!!bool", "!!timestamp":
		return n.Value, true
	}
	d.At(n, path, "must be a string, got %s", yamlfile.Describe(n))
	return "", false
}

// boolean reads true or false.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.At(n, path, "must be true or false, got %s", yamlfile.Describe(n))
		return false, false
	}
	switch strings.ToLower(n.Value) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	d.At(n, path, "must be true or false, got %s", n.Value)
	return false, false
}

// ratString prints a rational for messages without float noise.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	return strings.TrimRight(r.FloatString(3), "0")
}

// nonFinite recognises YAML's .nan and .inf spellings (and NaN/Inf written
// as strings) so they get their own message.
func nonFinite(n *yaml.Node) bool {
	v := strings.ToLower(strings.TrimLeft(n.Value, "+-"))
	return v == ".nan" || v == ".inf" || v == "nan" || v == "inf" || v == "infinity"
}

// number reads a numeric scalar exactly. Decimal values are read from the
// text, never through float64: 0.1 GFlop must become exactly 100 MFlop.
func (d *decoder) number(n *yaml.Node, path string) (*big.Rat, bool) {
	if !d.Scalar(n, path, "a number") {
		return nil, false
	}
	if nonFinite(n) {
		d.At(n, path, "must be a finite number, got %s", n.Value)
		return nil, false
	}
	switch n.ShortTag() {
	case "!!int":
		// YAML integers may be written 0x1F or 0o17.
		if r, ok := yamlfile.ParseDecimal(n.Value); ok {
			return r, true
		}
		v, err := strconv.ParseInt(n.Value, 0, 64)
		if err != nil {
			d.At(n, path, "integer out of range: %s", n.Value)
			return nil, false
		}
		return big.NewRat(v, 1), true
	case "!!float":
		r, ok := yamlfile.ParseDecimal(n.Value)
		if !ok {
			d.At(n, path, "must be a decimal number like 12.5, got %q", n.Value)
			return nil, false
		}
		return r, true
	}
	d.At(n, path, "must be a number, got %s", yamlfile.Describe(n))
	return nil, false
}

// milli reads a positive decimal quantity in thousandths (GFlop to MFlop,
// GFLOPS to MFLOPS): at most 3 decimals, at most max thousandths.
func (d *decoder) milli(n *yaml.Node, path, unit string, max int64) (int64, bool) {
	r, ok := d.number(n, path)
	if !ok {
		return 0, false
	}
	if r.Sign() <= 0 {
		d.At(n, path, "must be > 0, got %s", n.Value)
		return 0, false
	}
	m := new(big.Rat).Mul(r, big.NewRat(1000, 1))
	if !m.IsInt() {
		d.At(n, path, "at most 3 decimal places (1/1000 %s), got %s", unit, n.Value)
		return 0, false
	}
	if !m.Num().IsInt64() || m.Num().Int64() > max {
		d.At(n, path, "must be <= %s %s, got %s", ratString(big.NewRat(max, 1000)), unit, n.Value)
		return 0, false
	}
	return m.Num().Int64(), true
}

// integer reads a whole number in [min, max].
func (d *decoder) integer(n *yaml.Node, path string, min, max int64) (int64, bool) {
	r, ok := d.number(n, path)
	if !ok {
		return 0, false
	}
	if !r.IsInt() {
		d.At(n, path, "must be a whole number, got %s", n.Value)
		return 0, false
	}
	if !r.Num().IsInt64() || r.Num().Int64() < min || r.Num().Int64() > max {
		d.At(n, path, "must be between %d and %d, got %s", min, max, n.Value)
		return 0, false
	}
	return r.Num().Int64(), true
}

const durationSyntax = `a duration like "90s", "45m", "2h30m" or "1d12h"`

// duration reads a positive duration no longer than max.
func (d *decoder) duration(n *yaml.Node, path string, max time.Duration) (time.Duration, bool) {
	if !d.Scalar(n, path, durationSyntax) {
		return 0, false
	}
	if n.ShortTag() != "!!str" {
		if n.ShortTag() == "!!int" || n.ShortTag() == "!!float" {
			d.At(n, path, "must be %s, got the number %s without a unit (write \"%ss\" for seconds)", durationSyntax, n.Value, n.Value)
		} else {
			d.At(n, path, "must be %s, got %s", durationSyntax, yamlfile.Describe(n))
		}
		return 0, false
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		d.At(n, path, "must be %s, got %q", durationSyntax, n.Value)
		return 0, false
	}
	if v <= 0 {
		d.At(n, path, "must be > 0, got %q", n.Value)
		return 0, false
	}
	if v > max {
		d.At(n, path, "must be <= %s, got %q", fmtDuration(max), n.Value)
		return 0, false
	}
	return v, true
}

var dayRE = regexp.MustCompile(`^([+-]?)([0-9]{1,6})d(.*)$`)

// parseDuration is time.ParseDuration plus a leading whole number of days
// ("1d", "2d12h"): wall-clock limits of several days are common and "168h"
// is not how people count.
func parseDuration(s string) (time.Duration, error) {
	m := dayRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return time.ParseDuration(strings.TrimSpace(s))
	}
	days, _ := strconv.ParseInt(m[2], 10, 64) // at most 6 digits
	const maxDays = int64(1<<63-1) / int64(24*time.Hour)
	if days > maxDays {
		return 0, fmt.Errorf("duration %q out of range", s)
	}
	v := time.Duration(days) * 24 * time.Hour
	if m[3] != "" {
		if strings.ContainsAny(m[3][:1], "+-") {
			return 0, fmt.Errorf("duration %q: a sign may only come first", s)
		}
		rest, err := time.ParseDuration(m[3])
		if err != nil {
			return 0, err
		}
		if v > time.Duration(1<<63-1)-rest {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		v += rest
	}
	if m[1] == "-" {
		v = -v
	}
	return v, nil
}

// fmtDuration prints whole days as "7d" (the way the limits are written).
func fmtDuration(v time.Duration) string {
	day := 24 * time.Hour
	if v >= day && v%day == 0 {
		return strconv.FormatInt(int64(v/day), 10) + "d"
	}
	return v.String()
}
