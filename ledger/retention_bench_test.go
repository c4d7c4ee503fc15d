package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// retentionRound is one round of the finished-tasks workload: 100 tasks
// submitted, placed on the 100 machines, started and ended (4 entries),
// then, with retention on, the leader's forget_tasks of whatever the rule
// lets go (a fifth entry).
const retentionRound = 100

// finishTasks drives l through n finished tasks of org "w" (100
// one-slot machines, simulated energy), round by round, and returns the
// mean time of one Apply over the last tenth of the rounds (forget
// entries included).
func finishTasks(tb testing.TB, l *Ledger, n int, retain bool) time.Duration {
	idx := uint64(0)
	apply := func(c Command) Result {
		data, err := json.Marshal(c)
		if err != nil {
			tb.Fatal(err)
		}
		idx++
		r := l.Apply(idx, data)
		if r.Err != nil {
			tb.Fatalf("index %d %s: %v", idx, r.Kind, r.Err)
		}
		return r
	}
	reg := act("w", 1000)
	reg.RegisterOrg = &RegisterOrg{LimitMilliW: MaxLimitMilliW, Rules: &Rules{Executors: ExecutorsSimulated, MaxQueuedPerOrg: MaxQueuedPerOrgLimit}}
	if retain {
		reg.RegisterOrg.Rules.Retention = &Retention{Keep: 1000}
	}
	for i := range retentionRound {
		reg.RegisterOrg.Machines = append(reg.RegisterOrg.Machines, mspec(fmt.Sprintf("m%d", i), 1000, 100_000))
	}
	apply(reg)
	rounds := n / retentionRound
	var timed time.Duration
	var timedApplies int
	for r := range rounds {
		at := int64(2000 + r*100_000)
		sub := act("w", at)
		sub.SubmitTasks = &SubmitTasks{}
		for range retentionRound {
			sub.SubmitTasks.Tasks = append(sub.SubmitTasks.Tasks, TaskSpec{SizeMFlop: 1000, Spec: Spec{Argv: []string{"./work", "--n", "3"}, Job: "bench"}})
		}
		ids := apply(sub).TaskIDs
		dec := act("w", at+1000)
		dec.Decisions = &Decisions{}
		starts, ends := act("w", at+2000), act("w", at+60_000)
		starts.Reports, ends.Reports = &Reports{}, &Reports{}
		for i, id := range ids {
			m := fmt.Sprintf("w/m%d", i)
			dec.Decisions.Decisions = append(dec.Decisions.Decisions, alloc(id, m))
			starts.Reports.Items = append(starts.Reports.Items, Report{TaskStarted: &TaskStarted{Task: id, Machine: m}})
			ends.Reports.Items = append(ends.Reports.Items, Report{TaskEnded: &TaskEnded{Task: id, Machine: m, EnergyMilliJ: 5_000, Source: EnergySimulated}})
		}
		cmds := []Command{dec, starts, ends}
		if retain {
			cmds = append(cmds, Command{})
		}
		last := r >= rounds-max(rounds/10, 1)
		for _, c := range cmds {
			if c.Org == "" { // the leader's forget, computed now
				c = act("w", at+70_000)
				ids := l.Forgettable(c.AtMs, MaxForgetPerCommand)
				if len(ids) == 0 {
					continue
				}
				c.ForgetTasks = &ForgetTasks{Tasks: ids}
			}
			start := time.Now()
			apply(c)
			if last {
				timed += time.Since(start)
				timedApplies++
			}
		}
	}
	if err := l.CheckInvariants(); err != nil {
		tb.Fatal(err)
	}
	return timed / time.Duration(max(timedApplies, 1))
}

// BenchmarkFinishedTasks: the replicated state's size (snapshot bytes,
// live heap) and the cost of one Apply after 10,000 and 100,000 finished
// tasks (1,000,000 with COOPGRID_BENCH_1M=1), with the retention rule on
// (keep 1,000 finished tasks) and off. docs/BENCHMARKS.md records a run.
//
//	go test -run '^$' -bench BenchmarkFinishedTasks -benchtime 1x ./ledger
func BenchmarkFinishedTasks(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if os.Getenv("COOPGRID_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, retain := range []bool{true, false} {
		for _, n := range sizes {
			if !retain && n > 100_000 {
				continue
			}
			b.Run(fmt.Sprintf("retention=%v/tasks=%d", retain, n), func(b *testing.B) {
				for range b.N {
					l := New()
					per := finishTasks(b, l, n, retain)
					var snap bytes.Buffer
					if err := l.WriteSnapshot(&snap); err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					_ = l.computeHash()
					hash := time.Since(start)
					runtime.GC()
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					b.ReportMetric(float64(per.Microseconds()), "µs/apply")
					b.ReportMetric(float64(snap.Len()), "snapshot-B")
					b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
					b.ReportMetric(float64(hash.Microseconds()), "µs/hash")
					b.ReportMetric(float64(len(l.tasks)), "tasks-kept")
					runtime.KeepAlive(l)
				}
			})
		}
	}
}
