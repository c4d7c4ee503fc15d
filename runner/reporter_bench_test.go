package runner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// BenchmarkReporterLinger measures the log entries per report when this
// peer reports steadily, one start report every gap, with and without the
// linger, on a real single-peer ledger (bolt with fsync). Each round
// starts a fresh ledger (not timed) and reports the start of 96 tasks;
// run it with -benchtime=1x..3x. entries/report is what the linger
// changes; ms/report is the mean wait of a report for its result (its
// latency), which the linger lengthens by at most its bound.
//
//	go test ./runner -run '^$' -bench ReporterLinger -benchtime 2x
func BenchmarkReporterLinger(b *testing.B) {
	const reports = 96
	for _, gap := range []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 15 * time.Millisecond} {
		for _, linger := range []time.Duration{0, DefaultReportLinger} {
			b.Run(fmt.Sprintf("gap=%v/linger=%v", gap, linger), func(b *testing.B) {
				var commands, sent uint64
				var waited time.Duration
				for range b.N {
					b.StopTimer()
					l := startLedger(b, simMachines(reports), nil)
					sizes := make([]int64, reports)
					for i := range sizes {
						sizes[i] = 1000
					}
					ids := l.submit(sizes...)
					machineOf := assignedMachines(b, l, ids)
					cfg := l.config(nil)
					cfg.Now = time.Now
					cfg.ReportLinger = linger
					rep := newReporter(cfg)
					ctx, cancel := context.WithCancel(context.Background())
					var loop sync.WaitGroup
					loop.Go(func() { rep.loop(ctx) })
					b.StartTimer()
					var callers sync.WaitGroup
					var mu sync.Mutex
					tick := time.NewTicker(gap)
					for _, id := range ids {
						<-tick.C
						callers.Go(func() {
							start := time.Now()
							_, err := rep.report(ctx, func(c *ledger.Command) {
								c.TaskStarted = &ledger.TaskStarted{Task: id, Machine: machineOf[id]}
							})
							mu.Lock()
							waited += time.Since(start)
							mu.Unlock()
							if err != nil {
								b.Errorf("start of %s: %v", id, err)
							}
						})
					}
					callers.Wait()
					tick.Stop()
					b.StopTimer()
					cancel()
					loop.Wait()
					commands += rep.commands.Load()
					sent += rep.sent.Load()
				}
				b.ReportMetric(float64(commands)/float64(sent), "entries/report")
				b.ReportMetric(float64(waited.Milliseconds())/float64(sent), "ms/report")
			})
		}
	}
}
