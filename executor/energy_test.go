package executor

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// zone creates a powercap zone directory as the kernel lays it out and
// returns the path of its energy counter. max 0 leaves out
// max_energy_range_uj.
func zone(t *testing.T, root, dir, name string, energy, max uint64) string {
	t.Helper()
	d := filepath.Join(root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "name"), name+"\n")
	if max > 0 {
		write(t, filepath.Join(d, "max_energy_range_uj"), strconv.FormatUint(max, 10)+"\n")
	}
	p := filepath.Join(d, "energy_uj")
	setCounter(t, p, energy)
	return p
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setCounter replaces a counter atomically, as a reader of sysfs always
// sees a whole value.
func setCounter(t *testing.T, p string, v uint64) {
	t.Helper()
	tmp := p + ".tmp"
	write(t, tmp, strconv.FormatUint(v, 10)+"\n")
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

func zoneNames(m *raplMeter) []string {
	var n []string
	for _, z := range m.zones {
		n = append(n, filepath.Base(filepath.Dir(z.energyPath))+"="+z.name)
	}
	return n
}

func TestRAPLZoneSelection(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(t *testing.T, root string)
		want  []string
		err   string
	}{
		{"packages and dram, not core", func(t *testing.T, root string) {
			zone(t, root, "intel-rapl:0", "package-0", 1, 1<<32)
			zone(t, root, "intel-rapl:0:0", "core", 1, 1<<32)
			zone(t, root, "intel-rapl:0:2", "dram", 1, 1<<32)
			zone(t, root, "intel-rapl:1", "package-1", 1, 1<<32)
			zone(t, root, "intel-rapl-mmio:0", "package-0", 1, 1<<32)
		}, []string{"intel-rapl:0=package-0", "intel-rapl:0:2=dram", "intel-rapl:1=package-1"}, ""},
		{"psys alone", func(t *testing.T, root string) {
			zone(t, root, "intel-rapl:0", "package-0", 1, 1<<32)
			zone(t, root, "intel-rapl:1", "psys", 1, 1<<32)
		}, []string{"intel-rapl:1=psys"}, ""},
		{"unknown names: all top-level", func(t *testing.T, root string) {
			zone(t, root, "intel-rapl:0", "socket", 1, 1<<32)
			zone(t, root, "intel-rapl:0:0", "sub", 1, 1<<32)
		}, []string{"intel-rapl:0=socket"}, ""},
		{"no zones", func(t *testing.T, root string) {
			zone(t, root, "other:0", "package-0", 1, 1<<32)
		}, nil, "no intel-rapl zones"},
		{"unreadable counter", func(t *testing.T, root string) {
			p := zone(t, root, "intel-rapl:0", "package-0", 1, 1<<32)
			// A directory where the counter should be: reading fails as it
			// does for an unprivileged user on a recent kernel.
			os.Remove(p)
			os.Mkdir(p, 0o755)
		}, nil, "energy_uj"},
		{"garbage counter", func(t *testing.T, root string) {
			p := zone(t, root, "intel-rapl:0", "package-0", 1, 1<<32)
			write(t, p, "lots\n")
		}, nil, "invalid syntax"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			c.build(t, root)
			m, err := newRAPLMeter(root)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error about %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := zoneNames(m); !reflect.DeepEqual(got, c.want) {
				t.Errorf("zones %v, want %v", got, c.want)
			}
		})
	}
	if _, err := newRAPLMeter(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("missing root: no error")
	}
}

func TestRAPLWrapAroundAndSharing(t *testing.T) {
	root := t.TempDir()
	const max = 1_000_000
	pkg := zone(t, root, "intel-rapl:0", "package-0", 900_000, max)
	dram := zone(t, root, "intel-rapl:0:2", "dram", 50, 0) // no range: a decrease is a reset
	m, err := newRAPLMeter(root)
	if err != nil {
		t.Fatal(err)
	}
	m.begin("a")
	setCounter(t, pkg, 100_000) // wrapped: 100_000 + 100_000 µJ
	setCounter(t, dram, 70)     // +20
	m.begin("b")                // a: 200_020
	setCounter(t, pkg, 400_001) // +300_001, shared: a 150_001, b 150_000
	setCounter(t, dram, 10)     // reset: +10, shared: a 5, b 5
	a, okA := m.end("a")
	setCounter(t, pkg, 500_000) // +99_999, b alone
	m.sample()                  // a periodic reading changes nothing but the split
	setCounter(t, pkg, 600_000) // +100_000
	b, okB := m.end("b")
	if !okA || !okB {
		t.Fatalf("ok a=%v b=%v", okA, okB)
	}
	if want := uint64(200_020 + 150_001 + 5); a != want {
		t.Errorf("a = %d µJ, want %d", a, want)
	}
	if want := uint64(150_000 + 5 + 99_999 + 100_000); b != want {
		t.Errorf("b = %d µJ, want %d", b, want)
	}
	// Energy while nothing runs is nobody's.
	setCounter(t, pkg, 700_000)
	m.begin("c")
	c, _ := m.end("c")
	if c != 0 {
		t.Errorf("c = %d µJ, want 0", c)
	}
}

func TestRAPLReadFailureDuringRun(t *testing.T) {
	root := t.TempDir()
	pkg := zone(t, root, "intel-rapl:0", "package-0", 100, 1<<32)
	m, err := newRAPLMeter(root)
	if err != nil {
		t.Fatal(err)
	}
	m.begin("a")
	write(t, pkg, "garbage\n")
	m.sample()
	setCounter(t, pkg, 200)
	if _, ok := m.end("a"); ok {
		t.Error("a run with a failed reading reports a complete figure")
	}
	// Readings work again: the next run is measured.
	m.begin("b")
	setCounter(t, pkg, 1200)
	if uj, ok := m.end("b"); !ok || uj != 1000 {
		t.Errorf("b = %d ok=%v, want 1000 µJ", uj, ok)
	}
}

// The process executor attributes the measured energy of a fake sysfs
// tree, wrap included, to the task that ran while it was consumed.
func TestProcessEnergyFromRAPL(t *testing.T) {
	root := t.TempDir()
	const max = 1_000_000_000
	pkg := zone(t, root, "intel-rapl:0", "package-0", max-100_000, max)
	e := newProcCfg(t, ProcessConfig{
		TasksDir:             filepath.Join(t.TempDir(), "tasks"),
		Policy:               allowShell(),
		RAPLRoot:             root,
		EnergySampleInterval: 5 * time.Millisecond,
	})
	if e.EnergySource() != EnergyRAPL {
		t.Fatalf("energy source %s, want rapl", e.EnergySource())
	}
	if err := e.Start(context.Background(), "m1", sh("hot", `echo started > started; while [ ! -e go ]; do sleep 0.02; done`)); err != nil {
		t.Fatal(err)
	}
	wd := workDir(e, "hot")
	waitFile(t, filepath.Join(wd, "started"))
	setCounter(t, pkg, 100_000) // 200_000 µJ across the wrap
	write(t, filepath.Join(wd, "go"), "")
	r := next(t, e)
	if !r.OK() || r.EnergySource != EnergyRAPL || r.EnergyMilliJ != 200 {
		t.Fatalf("got %q energy %d mJ from %s, want 200 mJ from rapl", r.Reason, r.EnergyMilliJ, r.EnergySource)
	}
}

func TestProcessEnergyFallsBackToDeclared(t *testing.T) {
	unreadable := t.TempDir()
	p := zone(t, unreadable, "intel-rapl:0", "package-0", 1, 1<<32)
	os.Remove(p)
	os.Mkdir(p, 0o755)
	for name, root := range map[string]string{"no zones": t.TempDir(), "unreadable": unreadable} {
		t.Run(name, func(t *testing.T) {
			e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "tasks"), Policy: allowShell(), RAPLRoot: root})
			if e.EnergySource() != EnergyDeclared {
				t.Fatalf("energy source %s, want declared", e.EnergySource())
			}
			if err := e.Start(context.Background(), "m2", sh("cool", "sleep 0.1")); err != nil {
				t.Fatal(err)
			}
			r := next(t, e)
			// m2 draws 120 W: at least 12 J over at least 0.1 s.
			if !r.OK() || r.EnergySource != EnergyDeclared || r.EnergyMilliJ != milliJ(120_000, r.End.Sub(r.Start)) || r.EnergyMilliJ < 12_000 {
				t.Fatalf("got %q energy %d mJ from %s over %v", r.Reason, r.EnergyMilliJ, r.EnergySource, r.End.Sub(r.Start))
			}
		})
	}
}

func TestMilliJ(t *testing.T) {
	for _, c := range []struct {
		mw   int64
		d    time.Duration
		want int64
	}{
		{50_000, time.Second, 50_000},
		{50_000, 1500 * time.Millisecond, 75_000},
		{1, time.Millisecond, 0},                                 // 0.001 mJ rounds to 0
		{1, 500 * time.Millisecond, 1},                           // 0.5 mJ rounds up
		{10_000_000_000, 240 * time.Hour, 8_640_000_000_000_000}, // 10 MW for 10 days: no overflow
		{10_000_000_000, 1500 * time.Millisecond, 15_000_000_000},
		{-5, time.Second, 0},
		{5, -time.Second, 0},
	} {
		if got := milliJ(c.mw, c.d); got != c.want {
			t.Errorf("milliJ(%d mW, %v) = %d, want %d", c.mw, c.d, got, c.want)
		}
	}
}

// TestRAPLHostPower: the host's draw is the counters' growth over the time
// between two readings, across wrap-around, and there is none before the
// second reading or after a failed one.
func TestRAPLHostPower(t *testing.T) {
	root := t.TempDir()
	p := zone(t, root, "intel-rapl:0", "package-0", 999_000_000, 1_000_000_000)
	m, err := newRAPLMeter(root)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1000, 0)
	m.now = func() time.Time { return clock }
	m.sample()
	if _, ok := m.power(); ok {
		t.Fatal("a power figure after one reading")
	}
	// 2 s later the counter wrapped: 1,000,000 µJ to the top, 59,000,000
	// after it: 60 J in 2 s is 30 W.
	clock = clock.Add(2 * time.Second)
	setCounter(t, p, 59_000_000)
	m.sample()
	if mw, ok := m.power(); !ok || mw != 30_000 {
		t.Fatalf("power = %d mW, %v; want 30000", mw, ok)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Second)
	m.sample()
	if _, ok := m.power(); ok {
		t.Fatal("a power figure after a failed reading")
	}
	e := &ProcessExecutor{}
	if _, ok := e.MeasuredPowerMilliW(); ok {
		t.Fatal("an executor without RAPL reports a measured power")
	}
}
