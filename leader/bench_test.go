package leader

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// Benchmarks run real 3-voter clusters on loopback: libp2p hosts with the
// private network, go-libp2p-raft transport, bolt stores with fsync, and the
// ledger as state machine, with the leader's duties wired in.

// BenchmarkFailover measures, with the default LAN timeouts, the time from
// killing the leader of a 3-voter cluster (Shutdown and host close, as a
// crash) to (1) the first entry a survivor commits through the new leader
// and (2) the first decision the new leader's scheduling loop commits for a
// task submitted after the kill. The cluster is rebuilt for every iteration
// (not timed); run with -benchtime=10x or so.
func BenchmarkFailover(b *testing.B) {
	var commitTotal, decideTotal time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := newCluster(b, 3, 4, func(cfg *consensus.Config, _ *Config) { cfg.CheckInvariants = false })
		old := c.waitLeader()
		var s *tpeer
		for _, p := range c.peers {
			if p != old {
				s = p
				break
			}
		}
		cmd := command(s, ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1000}}}})
		b.StartTimer()
		killed := time.Now()
		old.stop()
		var res ledger.Result
		for {
			var err error
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err = s.node.Propose(ctx, cmd)
			cancel()
			if err == nil {
				break
			}
			if time.Since(killed) > 20*time.Second {
				b.Fatalf("no commit 20 s after the kill: %v", err)
			}
		}
		committed := time.Since(killed)
		task := res.TaskIDs[0]
		for {
			var placed bool
			s.node.View(func(l *ledger.Ledger) {
				t, ok := l.Task(task)
				placed = ok && t.State == ledger.TaskAssigned
			})
			if placed {
				break
			}
			if time.Since(killed) > 20*time.Second {
				b.Fatal("no decision 20 s after the kill")
			}
			time.Sleep(time.Millisecond)
		}
		decided := time.Since(killed)
		b.StopTimer()
		commitTotal += committed
		decideTotal += decided
		for _, p := range c.peers {
			p.stop()
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(commitTotal.Milliseconds())/float64(b.N), "ms-to-first-commit")
	b.ReportMetric(float64(decideTotal.Milliseconds())/float64(b.N), "ms-to-first-decision")
}
