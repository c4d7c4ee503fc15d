package scenario

import (
	"math"
	"math/big"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// Decimal values (GFLOPS, watts, GFlop, minutes, percentages) are read from
// the YAML text, not through float64: 133.47 GFLOPS must become exactly
// 133470 MFLOPS and 113.5 W exactly 113500 mW, and a float64 round trip can
// be off by one in the last unit. The text is parsed as an exact rational.

var (
	ratThousand = big.NewRat(1000, 1)
	ratSixty    = big.NewRat(60, 1)
)

// roundRat rounds a non-negative rational to the nearest integer, halves
// up; ok is false if the result does not fit in an int64.
func roundRat(r *big.Rat) (int64, bool) {
	// floor((2*num + den) / (2*den))
	num := new(big.Int).Mul(r.Num(), big.NewInt(2))
	num.Add(num, r.Denom())
	den := new(big.Int).Mul(r.Denom(), big.NewInt(2))
	q := new(big.Int).Div(num, den) // Euclidean: floor for den > 0
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}

// ratString prints a rational for error messages without float noise.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	return r.FloatString(6)
}

// isNumberTag says whether a scalar resolved as a YAML number.
func isNumberTag(n *yaml.Node) bool {
	t := n.ShortTag()
	return t == "!!int" || t == "!!float"
}

// nonFinite recognises YAML's .nan / .inf spellings so they get their own
// message instead of "not a number".
func nonFinite(n *yaml.Node) bool {
	if n.ShortTag() != "!!float" {
		return false
	}
	v := strings.ToLower(strings.TrimLeft(n.Value, "+-"))
	return v == ".nan" || v == ".inf"
}

// number reads a numeric scalar exactly. It reports and returns false for
// anything else.
func (d *decoder) number(n *yaml.Node, path string) (*big.Rat, bool) {
	if !d.Scalar(n, path, "a number") {
		return nil, false
	}
	if nonFinite(n) {
		d.At(n, path, "must be a finite number, got %s", n.Value)
		return nil, false
	}
	if !isNumberTag(n) {
		d.At(n, path, "must be a number, got %s", yamlfile.Describe(n))
		return nil, false
	}
	if n.ShortTag() == "!!int" {
		// YAML integers may be written 0x1F or 0o17; let yaml.v3 read them.
		var v int64
		if err := n.Decode(&v); err != nil {
			d.At(n, path, "integer out of range: %s", n.Value)
			return nil, false
		}
		return big.NewRat(v, 1), true
	}
	r, ok := yamlfile.ParseDecimal(n.Value)
	if !ok {
		d.At(n, path, "must be a decimal number like 133.47, got %q", n.Value)
		return nil, false
	}
	return r, true
}

// milli reads a decimal quantity and returns it in thousandths (GFLOPS to
// MFLOPS, W to mW, GFlop to MFlop). It rejects more precision than 1/1000,
// values above max (in thousandths), and values <= 0 (or < 0 with
// allowZero).
func (d *decoder) milli(n *yaml.Node, path string, allowZero bool, max int64) (int64, bool) {
	r, ok := d.number(n, path)
	if !ok {
		return 0, false
	}
	if !d.sign(n, path, r, allowZero) {
		return 0, false
	}
	m := new(big.Rat).Mul(r, ratThousand)
	if !m.IsInt() {
		d.At(n, path, "at most 3 decimal places (1/1000 of the unit), got %s", n.Value)
		return 0, false
	}
	if !m.Num().IsInt64() || m.Num().Int64() > max {
		d.At(n, path, "must be <= %s, got %s", ratString(new(big.Rat).SetFrac64(max, 1000)), n.Value)
		return 0, false
	}
	return m.Num().Int64(), true
}

// sign checks r > 0 (or >= 0 with allowZero), reporting the original text.
func (d *decoder) sign(n *yaml.Node, path string, r *big.Rat, allowZero bool) bool {
	switch {
	case allowZero && r.Sign() < 0:
		d.At(n, path, "must be >= 0, got %s", n.Value)
		return false
	case !allowZero && r.Sign() <= 0:
		d.At(n, path, "must be > 0, got %s", n.Value)
		return false
	}
	return true
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
		if r.Sign() < 0 && min >= 0 {
			d.At(n, path, "must be >= %d, got %s", min, n.Value)
		} else {
			d.At(n, path, "must be between %d and %d, got %s", min, max, n.Value)
		}
		return 0, false
	}
	return r.Num().Int64(), true
}

// maxSeconds bounds every time in a scenario (about 31 years): far beyond
// any experiment, small enough that float64 seconds stay exact to the
// microsecond.
const maxSeconds = 1e9

// seconds reads a time: a number of seconds (decimals allowed) or a Go
// duration string such as "10m", "1h30m" or "90s"; with allowOff, "off"
// means 0.
func (d *decoder) seconds(n *yaml.Node, path string, allowOff bool) (float64, bool) {
	if !d.Scalar(n, path, "a duration") {
		return 0, false
	}
	if allowOff && n.ShortTag() == "!!str" && strings.EqualFold(n.Value, "off") {
		return 0, true
	}
	want := `a number of seconds or a duration like "10m"`
	if allowOff {
		want += ` or "off"`
	}
	if nonFinite(n) {
		d.At(n, path, "must be a finite number, got %s", n.Value)
		return 0, false
	}
	var s float64
	switch {
	case isNumberTag(n):
		r, ok := d.number(n, path)
		if !ok {
			return 0, false
		}
		if r.Sign() < 0 {
			d.At(n, path, "must be >= 0, got %s", n.Value)
			return 0, false
		}
		s, _ = r.Float64()
	case n.ShortTag() == "!!str":
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			d.At(n, path, "must be %s, got %q", want, n.Value)
			return 0, false
		}
		if dur < 0 {
			d.At(n, path, "must be >= 0, got %s", n.Value)
			return 0, false
		}
		s = dur.Seconds()
	default:
		d.At(n, path, "must be %s, got %s", want, yamlfile.Describe(n))
		return 0, false
	}
	if s > maxSeconds || math.IsNaN(s) {
		d.At(n, path, "must be <= %g seconds, got %s", float64(maxSeconds), n.Value)
		return 0, false
	}
	return s, true
}
