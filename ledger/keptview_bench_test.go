package ledger

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkKeptView measures the view a kept pass (Apply's, Placeable's)
// takes of the goal federation of issue 22: 1,000 organisations, 10,000
// machines, 10,000 queued tasks in the kept queue. "fresh" lists, sorts
// and prepares the machines at every pass, as before the machines were
// kept; "kept" reuses them while no machine changes.
func BenchmarkKeptView(b *testing.B) {
	l := New()
	var idx uint64
	// Applied directly: CheckInvariants after each of 2,000 commands
	// would cost the set-up minutes.
	must := func(c Command) {
		data, err := EncodeCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		idx++
		if r := l.Apply(idx, data); !r.Applied() {
			b.Fatalf("%s: %v", r.Kind, r.Err)
		}
	}
	for i := range 1000 {
		org := fmt.Sprintf("org%04d", i)
		ms := make([]MachineSpec, 10)
		for k := range ms {
			ms[k] = MachineSpec{Name: fmt.Sprintf("n%02d", k), MFLOPS: 1000 + int64(i*10+k), BusyMilliW: 100_000 + int64(k)}
		}
		c := register(org, 2_000_000, ms...)
		if i == 0 {
			c.RegisterOrg.Rules = &Rules{Executors: ExecutorsSimulated, Scheduling: DefaultScheduling()}
		}
		must(c)
		must(submit(org, 2000, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000, 90_000, 100_000))
	}
	q := l.keptPolicyQueue()
	if q == nil || q.Len() != 10_000 {
		b.Fatal("no kept queue of 10,000 tasks")
	}
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := cpuTime(b)
		for b.Loop() {
			if s, _ := l.policyView(3000, 300, q); len(s.Machines) != 10_000 {
				b.Fatal(len(s.Machines))
			}
		}
		reportCPU(b, cpu0)
	})
	b.Run("kept", func(b *testing.B) {
		l.keptView(3000, 300, q) // the first kept pass builds them
		b.ReportAllocs()
		cpu0 := cpuTime(b)
		for b.Loop() {
			if s, _ := l.keptView(3000, 300, q); len(s.Machines) != 10_000 || s.Federation == nil {
				b.Fatal(len(s.Machines))
			}
		}
		reportCPU(b, cpu0)
	})
}

// reportCPU reports this process's CPU time per iteration since cpu0: on
// a shared machine the wall clock counts the neighbours' time too.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
