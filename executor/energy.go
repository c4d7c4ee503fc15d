package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultRAPLRoot is where Linux exposes the powercap zones.
const DefaultRAPLRoot = "/sys/class/powercap"

// DefaultEnergySampleInterval is how often the RAPL counters are read while
// tasks run. A wrap is detected only between two consecutive readings, so
// the interval must stay under the counters' wrap period:
// max_energy_range_uj is about 262 kJ on many Intel CPUs (over 20 minutes at
// 200 W) but 2^32 µJ ≈ 4.3 kJ on AMD ones (about 21 s at 200 W).
const DefaultEnergySampleInterval = 2 * time.Second

// raplZone is one powercap zone whose counter the meter reads.
type raplZone struct {
	name       string // the zone's "name" file, e.g. package-0, dram, psys
	energyPath string
	maxRange   uint64 // µJ at which energy_uj wraps to 0; 0 if unknown
}

// raplMeter attributes the host's measured energy to the runs in progress.
// Between two readings the energy consumed is split equally among the runs
// active over that interval; readings happen when a run begins or ends and
// every sample interval, so a run gets the host's energy while it ran,
// shared with the runs it overlapped. Energy while nothing runs is dropped.
type raplMeter struct {
	zones []raplZone

	mu     sync.Mutex
	last   []uint64
	lastOK bool
	runs   map[string]*energyAcc

	// now is the clock of the power figure (time.Now; tests set it).
	now func() time.Time
	// lastAt is when last was read; powerMilliW the host's average draw
	// between the two latest readings, valid when powerOK.
	lastAt      time.Time
	powerMilliW int64
	powerOK     bool
}

type energyAcc struct {
	microJ uint64
	// ok turns false if a reading failed while the run was active: its
	// figure is then incomplete and the caller falls back to declared power.
	ok bool
}

// newRAPLMeter finds the zones under root and checks that their counters
// are readable. Which zones count as the machine's energy:
//   - a "psys" zone (the whole platform) when present, alone, since it
//     already contains the packages;
//   - otherwise every package zone plus the dram zones (DRAM is not part of
//     the package domain);
//   - otherwise every top-level zone.
//
// Core and uncore subzones are inside their package and never added.
func newRAPLMeter(root string) (*raplMeter, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("rapl: %w", err)
	}
	var top, psys, pkg, dram []raplZone
	for _, e := range ents {
		base := e.Name()
		rest, ok := strings.CutPrefix(base, "intel-rapl:")
		if !ok {
			continue
		}
		dir := filepath.Join(root, base)
		nb, err := os.ReadFile(filepath.Join(dir, "name"))
		if err != nil {
			continue
		}
		z := raplZone{name: strings.TrimSpace(string(nb)), energyPath: filepath.Join(dir, "energy_uj")}
		if mb, err := os.ReadFile(filepath.Join(dir, "max_energy_range_uj")); err == nil {
			z.maxRange, _ = strconv.ParseUint(strings.TrimSpace(string(mb)), 10, 64)
		}
		isTop := !strings.Contains(rest, ":")
		switch {
		case isTop && z.name == "psys":
			psys = append(psys, z)
		case isTop && strings.HasPrefix(z.name, "package"):
			pkg = append(pkg, z)
		case z.name == "dram":
			dram = append(dram, z)
		}
		if isTop {
			top = append(top, z)
		}
	}
	var zones []raplZone
	switch {
	case len(psys) > 0:
		zones = psys
	case len(pkg) > 0:
		zones = append(pkg, dram...)
	default:
		zones = top
	}
	if len(zones) == 0 {
		return nil, fmt.Errorf("rapl: no intel-rapl zones under %s", root)
	}
	sort.Slice(zones, func(i, j int) bool { return zones[i].energyPath < zones[j].energyPath })
	m := &raplMeter{zones: zones, runs: make(map[string]*energyAcc)}
	if _, err := m.read(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *raplMeter) read() ([]uint64, error) {
	v := make([]uint64, len(m.zones))
	for i, z := range m.zones {
		b, err := os.ReadFile(z.energyPath)
		if err != nil {
			return nil, fmt.Errorf("rapl: read %s: %w", z.energyPath, err)
		}
		v[i], err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("rapl: %s: %w", z.energyPath, err)
		}
	}
	return v, nil
}

// delta is the energy between two readings of one counter, across at most
// one wrap. An unknown range turns a decrease into a reset: count from 0.
func (z raplZone) delta(prev, cur uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	if z.maxRange >= prev {
		return z.maxRange - prev + cur
	}
	return cur
}

// sampleLocked reads the counters and shares the energy since the last
// reading among the active runs.
func (m *raplMeter) sampleLocked() {
	cur, err := m.read()
	if err != nil {
		for _, a := range m.runs {
			a.ok = false
		}
		m.lastOK = false
		return
	}
	at := time.Now()
	if m.now != nil {
		at = m.now()
	}
	var total uint64
	if m.lastOK {
		for i, z := range m.zones {
			total += z.delta(m.last[i], cur[i])
		}
		if dt := at.Sub(m.lastAt); dt > 0 {
			// µJ per µs is W; ×1000 for mW.
			m.powerMilliW = int64(float64(total) / float64(dt.Microseconds()) * 1000)
			m.powerOK = true
		}
	}
	if m.lastOK && len(m.runs) > 0 {
		keys := make([]string, 0, len(m.runs))
		for k := range m.runs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n := uint64(len(keys))
		share, rem := total/n, total%n
		for i, k := range keys {
			m.runs[k].microJ += share
			if uint64(i) < rem {
				m.runs[k].microJ++
			}
		}
	}
	m.last, m.lastOK, m.lastAt = cur, true, at
}

// power is the host's average draw in mW between the two latest readings,
// and whether there is such a figure.
func (m *raplMeter) power() (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.powerMilliW, m.powerOK && m.lastOK
}

func (m *raplMeter) sample() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sampleLocked()
}

// begin starts attributing energy to the run key.
func (m *raplMeter) begin(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sampleLocked()
	m.runs[key] = &energyAcc{ok: m.lastOK}
}

// end stops attributing energy to key and returns its total in µJ; ok is
// false if a reading failed while it ran.
func (m *raplMeter) end(key string) (microJ uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sampleLocked()
	a, found := m.runs[key]
	if !found {
		return 0, false
	}
	delete(m.runs, key)
	return a.microJ, a.ok && m.lastOK
}

// runSampler reads the counters every interval until stop is closed.
func (m *raplMeter) runSampler(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			m.sample()
		}
	}
}
