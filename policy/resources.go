package policy

import (
	"fmt"
	"math/bits"
)

// Resources are what a machine offers (its capacity) or what a task asks
// for (its request).
//
// On a machine, CPUs 0 means 1: a machine declared without resources is one
// slot, the papers' model. MemoryBytes 0 means "not declared": memory is then
// neither checked nor counted on that machine. GPUs 0 means none.
//
// On a task, CPUs 0 means 1; MemoryBytes and GPUs 0 ask for none.
type Resources struct {
	CPUs        int64
	MemoryBytes int64
	GPUs        int64
}

// Bounds on declared resources: generous, and small enough that every
// product below fits 128 bits.
const (
	MaxCPUs        = 1 << 16
	MaxGPUs        = 1 << 10
	MaxMemoryBytes = 1 << 60
)

// Capacity is r as a machine's capacity (CPUs 0 counts as 1).
func (r Resources) Capacity() Resources {
	if r.CPUs <= 0 {
		r.CPUs = 1
	}
	return r
}

// Request is r as a task's request (CPUs 0 counts as 1).
func (r Resources) Request() Resources {
	if r.CPUs <= 0 {
		r.CPUs = 1
	}
	return r
}

func (r Resources) validate(what string) error {
	switch {
	case r.CPUs < 0 || r.CPUs > MaxCPUs:
		return fmt.Errorf("%s: cpus %d out of range [0, %d]", what, r.CPUs, MaxCPUs)
	case r.MemoryBytes < 0 || r.MemoryBytes > MaxMemoryBytes:
		return fmt.Errorf("%s: memory %d bytes out of range [0, %d]", what, r.MemoryBytes, int64(MaxMemoryBytes))
	case r.GPUs < 0 || r.GPUs > MaxGPUs:
		return fmt.Errorf("%s: gpus %d out of range [0, %d]", what, r.GPUs, MaxGPUs)
	}
	return nil
}

// fitsIn reports whether request req fits in free, the free part of a
// machine of capacity capa (memory is not checked when capa declares none).
func fitsIn(req, free, capa Resources) bool {
	if req.CPUs > free.CPUs || req.GPUs > free.GPUs {
		return false
	}
	return capa.MemoryBytes == 0 || req.MemoryBytes <= free.MemoryBytes
}

// Unmet resources, as the first one a request does not fit, for pending
// reasons.
func unmetResource(req, free, capa Resources) string {
	switch {
	case req.CPUs > free.CPUs:
		return "cpus"
	case req.GPUs > free.GPUs:
		return "gpus"
	case capa.MemoryBytes != 0 && req.MemoryBytes > free.MemoryBytes:
		return "memory"
	}
	return ""
}

func (r Resources) minus(o Resources) Resources {
	return Resources{r.CPUs - o.CPUs, r.MemoryBytes - o.MemoryBytes, r.GPUs - o.GPUs}
}

// Plus is r + o, resource by resource.
func (r Resources) Plus(o Resources) Resources { return r.plus(o) }

// Fits reports whether request req fits in free, the free part of a machine
// of capacity capa (memory is not checked when capa declares none).
func Fits(req, free, capa Resources) bool { return fitsIn(req, free, capa) }

func (r Resources) plus(o Resources) Resources {
	return Resources{r.CPUs + o.CPUs, r.MemoryBytes + o.MemoryBytes, r.GPUs + o.GPUs}
}

// Share is the part of a machine a task takes, num/den with 0 < num ≤ den:
// the largest of request/capacity over the machine's declared resources
// (docs/POLICY.md, "Shared machines"). A task that takes a whole one-slot
// machine has share 1/1.
type Share struct{ Num, Den int64 }

// ShareOf is the share of a machine of capacity capa taken by request req
// (both as declared; defaults applied here). A request larger than the
// capacity is capped at the whole machine.
func ShareOf(capa, req Resources) Share {
	capa, req = capa.Capacity(), req.Request()
	best := Share{min(req.CPUs, capa.CPUs), capa.CPUs}
	if capa.MemoryBytes > 0 {
		best = maxShare(best, Share{min(req.MemoryBytes, capa.MemoryBytes), capa.MemoryBytes})
	}
	if capa.GPUs > 0 {
		best = maxShare(best, Share{min(req.GPUs, capa.GPUs), capa.GPUs})
	}
	if best.Num <= 0 { // cannot happen: CPUs ≥ 1 on both sides
		best = Share{1, 1}
	}
	return best
}

// maxShare compares a.Num/a.Den and b.Num/b.Den exactly (128-bit products).
func maxShare(a, b Share) Share {
	if cmp128(a.Num, b.Den, b.Num, a.Den) >= 0 {
		return a
	}
	return b
}

// cmp128 compares x1·y1 with x2·y2 for non-negative operands.
func cmp128(x1, y1, x2, y2 int64) int {
	h1, l1 := bits.Mul64(uint64(x1), uint64(y1))
	h2, l2 := bits.Mul64(uint64(x2), uint64(y2))
	switch {
	case h1 != h2:
		if h1 < h2 {
			return -1
		}
		return 1
	case l1 != l2:
		if l1 < l2 {
			return -1
		}
		return 1
	}
	return 0
}

// Of is ⌈x · Num / Den⌉ for x ≥ 0: the part of a machine's computing power
// or draw a task counts for. Rounding up keeps a share from ever counting as
// nothing against a power limit; a whole share gives x exactly.
func (s Share) Of(x int64) int64 {
	if s.Num == s.Den || x == 0 {
		return x
	}
	hi, lo := bits.Mul64(uint64(x), uint64(s.Num))
	q, r := bits.Div64(hi, lo, uint64(s.Den)) // hi < Den since Num ≤ Den
	if r != 0 {
		q++
	}
	return int64(q)
}

// Whole says the share is the whole machine.
func (s Share) Whole() bool { return s.Num == s.Den }
