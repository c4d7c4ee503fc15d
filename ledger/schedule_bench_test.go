package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// goalFederation is the goal federation of issue 15 in the ledger: 100
// organisations owning 10,000 heterogeneous machines (100 each, 10-200
// GFLOPS, 50-400 W, as policy's benchState draws them), limits mixed as
// there (a quarter at 80 % of the organisation's own power, a quarter at
// 100 %, a quarter at 150 %, a quarter unbounded), nothing running, and
// queued tasks from organisations drawn at random, submitted at 2,000 ms.
// The first registration carries rules (with scheduling settings when
// sched is set: its peers compute the passes).
func goalFederation(b *testing.B, queued int, sched bool) *fed {
	r := rand.New(rand.NewPCG(1, 7))
	f := newFed(b)
	rules := &Rules{Executors: ExecutorsSimulated}
	if sched {
		rules.Scheduling = DefaultScheduling()
	}
	const orgs, perOrg = 100, 100
	for i := range orgs {
		ms := make([]MachineSpec, perOrg)
		var power int64
		for j := range ms {
			ms[j] = MachineSpec{Name: fmt.Sprintf("n%03d", j), MFLOPS: int64(10_000 + r.IntN(190_000)), BusyMilliW: int64(50_000 + r.IntN(350_000))}
			power += ms[j].BusyMilliW
		}
		lim := []int64{power * 80 / 100, power, power * 150 / 100, MaxLimitMilliW}[i%4]
		c := registerRules(fmt.Sprintf("org%03d", i), lim, nil, ms...)
		if i == 0 {
			c.RegisterOrg.Rules = rules
		}
		f.must(c)
	}
	byOrg := map[int][]int64{}
	for range queued {
		o := r.IntN(orgs)
		byOrg[o] = append(byOrg[o], int64(36_606_000+r.IntN(219_636_000)))
	}
	for o := range orgs {
		if sizes := byOrg[o]; len(sizes) > 0 {
			f.must(submit(fmt.Sprintf("org%03d", o), 2000, sizes...))
		}
	}
	return f
}

// BenchmarkScheduleTrigger is the cost of decisions every peer can check
// on the goal federation: applying one schedule trigger (decode, the
// policy view, the EHOSEP pass, each decision judged and applied) with 1,
// 100 and 1,000 queued tasks, against applying the decisions batch that
// carries the same decisions (what a follower did when the leader
// decided). The ledger is copied, untimed, before each application.
func BenchmarkScheduleTrigger(b *testing.B) {
	for _, queued := range []int{1, 100, 1000} {
		sched := goalFederation(b, queued, true)
		old := goalFederation(b, queued, false)
		p, err := sched.l.SchedulingPass(5000)
		if err != nil {
			b.Fatal(err)
		}
		ds, err := p.Decide()
		if err != nil || len(ds) == 0 {
			b.Fatalf("the pass decides %d: %v", len(ds), err)
		}
		triggerEntry, eerr := EncodeCommand(trigger("org000", 5000))
		if eerr != nil {
			b.Fatal(eerr)
		}
		batchEntry, eerr := EncodeCommand(decide("org000", 5000, ds...))
		if eerr != nil {
			b.Fatal(eerr)
		}
		for _, tc := range []struct {
			name  string
			f     *fed
			entry []byte
		}{{"trigger", sched, triggerEntry}, {"decisions", old, batchEntry}} {
			b.Run(fmt.Sprintf("queued=%d/%s", queued, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					l := cloneLedger(b, tc.f.l)
					b.StartTimer()
					r := l.Apply(l.AppliedIndex()+1, tc.entry)
					if r.AcceptedDecisions() != len(ds) {
						b.Fatalf("%d of %d decisions accepted: %v", r.AcceptedDecisions(), len(ds), r.Err)
					}
				}
				b.ReportMetric(float64(len(ds)), "decisions")
				b.ReportMetric(float64(len(tc.entry)), "entry-bytes")
			})
		}
	}
}

// BenchmarkLeaderCheck is what the leader pays before it appends a
// schedule trigger on the goal federation with 1,000 to 100,000 queued
// tasks: before issue 22 a whole pass on a listed view ("dry-run":
// SchedulingPass, Decide), now Placeable (the first service of the pass
// on the kept queue). Apply then runs the pass once, on the kept queue.
func BenchmarkLeaderCheck(b *testing.B) {
	for _, queued := range []int{1_000, 10_000, 100_000} {
		f := goalFederation(b, queued, true)
		b.Run(fmt.Sprintf("queued=%d/dry-run", queued), func(b *testing.B) {
			for b.Loop() {
				p, err := f.l.SchedulingPass(5000)
				if err != nil {
					b.Fatal(err)
				}
				if ds, err := p.Decide(); err != nil || len(ds) == 0 {
					b.Fatalf("the pass decides %d: %v", len(ds), err)
				}
			}
		})
		b.Run(fmt.Sprintf("queued=%d/placeable", queued), func(b *testing.B) {
			for b.Loop() {
				if _, ok, err := f.l.Placeable(5000); err != nil || !ok {
					b.Fatalf("placeable %v: %v", ok, err)
				}
			}
		})
	}
}
