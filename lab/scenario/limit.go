package scenario

import (
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// limitKind says how an organisation's power limit is given.
type limitKind uint8

const (
	// limitSystem is the whole federation's busy power: the organisation
	// may occupy every machine (the dissertation's "whole system").
	limitSystem limitKind = iota
	// limitPercent is a percentage of the organisation's own power quota.
	limitPercent
	// limitMilliW is an absolute value.
	limitMilliW
)

// limit is a parsed, not yet resolved, power limit.
type limit struct {
	kind limitKind
	pct  *big.Rat // limitPercent
	mW   int64    // limitMilliW
}

// maxLimitMilliW keeps resolved limits far from int64 overflow when the
// policy adds machine powers to them.
const maxLimitMilliW = int64(1) << 60

const limitSyntax = `want a percentage of the organisation's power quota like "80%", watts like "4000W" or "4kW", or "system"`

// parseLimit parses "80%", "182.09 %", "4000W", "4 kW" or "system". The
// message of the error carries no position: callers add it.
func parseLimit(s string) (limit, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "system") {
		return limit{kind: limitSystem}, nil
	}
	var kind limitKind
	scale := int64(1000) // mW per W
	switch {
	case strings.HasSuffix(t, "%"):
		kind = limitPercent
		t = strings.TrimSuffix(t, "%")
	case strings.HasSuffix(t, "kW"), strings.HasSuffix(t, "kw"):
		kind = limitMilliW
		scale = 1000 * 1000
		t = t[:len(t)-2]
	case strings.HasSuffix(t, "W"), strings.HasSuffix(t, "w"):
		kind = limitMilliW
		t = t[:len(t)-1]
	default:
		return limit{}, fmt.Errorf("%q: %s", s, limitSyntax)
	}
	r, ok := yamlfile.ParseDecimal(strings.TrimSpace(t))
	if !ok {
		return limit{}, fmt.Errorf("%q: %s", s, limitSyntax)
	}
	if r.Sign() < 0 {
		return limit{}, fmt.Errorf("%q: a limit must be >= 0", s)
	}
	if kind == limitPercent {
		return limit{kind: limitPercent, pct: r}, nil
	}
	mw, ok := roundRat(new(big.Rat).Mul(r, big.NewRat(scale, 1)))
	if !ok || mw > maxLimitMilliW {
		return limit{}, fmt.Errorf("%q: limit too large", s)
	}
	return limit{kind: limitMilliW, mW: mw}, nil
}

var errLimitTooLarge = errors.New("resolved limit too large")

// resolve turns the limit into milliwatts for an organisation whose power
// quota is powerQuota mW in a federation of system mW, rounding to the
// nearest milliwatt.
func (l limit) resolve(powerQuota, system int64) (int64, error) {
	switch l.kind {
	case limitSystem:
		return system, nil
	case limitMilliW:
		return l.mW, nil
	}
	v := new(big.Rat).Mul(l.pct, big.NewRat(powerQuota, 100))
	mw, ok := roundRat(v)
	if !ok || mw > maxLimitMilliW {
		return 0, errLimitTooLarge
	}
	return mw, nil
}

func (l limit) String() string {
	switch l.kind {
	case limitSystem:
		return "system"
	case limitMilliW:
		return new(big.Rat).SetFrac64(l.mW, 1000).FloatString(3) + "W"
	}
	return ratString(l.pct) + "%"
}
