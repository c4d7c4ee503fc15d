package executor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// MachineConfig is one machine a peer offers, in the units a sysadmin
// writes. A GFLOPS of 0 means "not given": `peer init` measures it with
// MeasureGFLOPS before the machine is registered; an executor refuses it.
type MachineConfig struct {
	Name      string
	GFLOPS    float64
	BusyWatts float64
	// IdleWatts is reported only; it never enters the policy (the papers'
	// binary power model).
	IdleWatts float64
	// CPUs, MemoryBytes and GPUs are what tasks share on the machine
	// (0 CPUs: one slot, the papers' machine; 0 memory: not declared;
	// docs/EXECUTOR.md, "Resources and labels").
	CPUs        int64
	MemoryBytes int64
	GPUs        int64
	// Labels are free-form attributes tasks can require: "name" or
	// "name=value".
	Labels []string
	// Opportunistic: a desktop or lab machine whose local user comes first;
	// its owner may reclaim it (peer machines reclaim) and release it
	// (docs/OPERATIONS.md, "Opportunistic machines").
	Opportunistic bool
	// ReclaimLoad (0: none) makes the owner's peer reclaim the
	// opportunistic machine by itself while its owner's load (CPUs busy
	// with work other than the grid's, per CPU of the host) stays above it
	// for ReclaimAfter, and release it once the load stays under half of
	// it for ReleaseAfter (node/load.go; 0: the defaults, 1m and 5m).
	ReclaimLoad                float64
	ReclaimAfter, ReleaseAfter time.Duration
	// Host is the name a parallel job's launcher (mpirun) reaches the
	// machine by: the host listed for its part in COOPGRID_HOSTS and the
	// hostfile (docs/JOBS.md, "Parallel jobs"). Empty: Name.
	Host string
}

// Bounds of the reclaim keys: an owner load per CPU (a run queue 64 times
// the host's CPUs is not a threshold anyone means) and the hold times.
const (
	maxReclaimLoad = 64
	maxLoadHold    = 24 * time.Hour
)

// maxHostLen bounds Host: a DNS name's length.
const maxHostLen = 253

// HostName is the machine's Host, or its Name when none is given.
func (m MachineConfig) HostName() string {
	if m.Host != "" {
		return m.Host
	}
	return m.Name
}

// validHost accepts host names and addresses: 1-253 characters of
// [A-Za-z0-9._:-], a word of both the host list and the hostfile.
func validHost(h string) bool {
	if h == "" || len(h) > maxHostLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// Bounds on declared resources (the ledger's, policy.MaxCPUs and so on).
const (
	maxCPUs   = 1 << 16
	maxGPUs   = 1 << 10
	maxLabels = 64
)

// MFLOPS is the computing power in the ledger's unit, round(GFLOPS·1000).
func (m MachineConfig) MFLOPS() int64 { return toMilli(m.GFLOPS) }

// BusyMilliW is the busy power in milliwatts, round(BusyWatts·1000).
func (m MachineConfig) BusyMilliW() int64 { return toMilli(m.BusyWatts) }

// IdleMilliW is the idle power in milliwatts, round(IdleWatts·1000).
func (m MachineConfig) IdleMilliW() int64 { return toMilli(m.IdleWatts) }

func toMilli(x float64) int64 { return int64(math.Round(x * 1000)) }

// Bounds on declared values: generous, but they keep the integer units and
// the energy products far from overflow.
const (
	maxGFLOPS = 1e9 // 1 EFLOPS
	maxWatts  = 1e7 // 10 MW
)

// Validate checks a machine for use by an executor: a valid name, GFLOPS
// and busy watts positive, idle watts between 0 and busy watts.
func (m MachineConfig) Validate() error {
	if err := m.validate(false); err != nil {
		return fmt.Errorf("machine %q: %w", m.Name, err)
	}
	return nil
}

// validate checks m; allowZeroGFLOPS accepts the "to be measured" 0 of a
// machines file.
func (m MachineConfig) validate(allowZeroGFLOPS bool) error {
	if !validIdent(m.Name, maxNameLen) {
		return fmt.Errorf("name: want 1-%d characters of [A-Za-z0-9._-] starting with a letter or digit", maxNameLen)
	}
	if err := checkNumber(m.GFLOPS, maxGFLOPS, allowZeroGFLOPS); err != nil {
		return fmt.Errorf("gflops: %w", err)
	}
	if m.MFLOPS() == 0 && !allowZeroGFLOPS {
		return errors.New("gflops: must be at least 0.001")
	}
	if err := checkNumber(m.BusyWatts, maxWatts, false); err != nil {
		return fmt.Errorf("busy_watts: %w", err)
	}
	if err := checkNumber(m.IdleWatts, maxWatts, true); err != nil {
		return fmt.Errorf("idle_watts: %w", err)
	}
	if m.IdleWatts > m.BusyWatts {
		return fmt.Errorf("idle_watts: %g is more than busy_watts %g", m.IdleWatts, m.BusyWatts)
	}
	if m.Host != "" && !validHost(m.Host) {
		return fmt.Errorf("host %q: want 1-%d characters of [A-Za-z0-9._:-]", m.Host, maxHostLen)
	}
	return nil
}

func checkNumber(x, max float64, allowZero bool) error {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return fmt.Errorf("must be a finite number, got %v", x)
	case x < 0:
		return fmt.Errorf("must not be negative, got %v", x)
	case x == 0 && !allowZero:
		return errors.New("must be positive, got 0")
	case x > max:
		return fmt.Errorf("%g is over the limit %g", x, max)
	}
	return nil
}

// machineSet indexes validated machines by name.
func machineSet(ms []MachineConfig) (map[string]MachineConfig, error) {
	if len(ms) == 0 {
		return nil, errors.New("no machines")
	}
	set := make(map[string]MachineConfig, len(ms))
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			return nil, err
		}
		if _, dup := set[m.Name]; dup {
			return nil, fmt.Errorf("machine %q declared twice", m.Name)
		}
		set[m.Name] = m
	}
	return set, nil
}

// MeasureGFLOPS runs a single-core dense matrix multiply (64×64 float64,
// C += A·B, 2·64³ flops per product) for about d and returns the rate in
// GFLOPS. It measures one core of plain Go code, no SIMD library: a
// conservative figure, meant for `peer init` when a machine's GFLOPS is not
// declared. It returns an error if ctx ends first.
func MeasureGFLOPS(ctx context.Context, d time.Duration) (float64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("measure GFLOPS: duration %v must be positive", d)
	}
	const n = 64
	a := make([]float64, n*n)
	b := make([]float64, n*n)
	c := make([]float64, n*n)
	for i := range a {
		// Small values of both signs keep C bounded over any run length.
		a[i] = float64(i%7-3) / 8
		b[i] = float64(i%5-2) / 8
	}
	var products int64
	start := time.Now()
	deadline := start.Add(d)
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("measure GFLOPS: %w", err)
		}
		matmulAdd(c, a, b, n)
		products++
		if !time.Now().Before(deadline) {
			break
		}
	}
	elapsed := time.Since(start).Seconds()
	// Reading C keeps the work observable.
	if s := c[0] + c[n*n-1]; math.IsNaN(s) {
		return 0, errors.New("measure GFLOPS: matrix product diverged")
	}
	return float64(products) * 2 * n * n * n / elapsed / 1e9, nil
}

// matmulAdd computes c += a·b for n×n row-major matrices, in i-k-j order so
// the inner loop streams rows (and the compiler drops its bounds checks).
func matmulAdd(c, a, b []float64, n int) {
	for i := 0; i < n; i++ {
		ci := c[i*n : i*n+n]
		for k := 0; k < n; k++ {
			aik := a[i*n+k]
			bk := b[k*n : k*n+n]
			for j := range ci {
				ci[j] += aik * bk[j]
			}
		}
	}
}
