package ledger

import (
	"fmt"
	"testing"
)

// benchFederation has two organisations with n machines each and n queued
// tasks each; limits are high enough for everything to run.
func benchFederation(b *testing.B, n int) *fed {
	f := newFed(b)
	for _, org := range []string{"org-a", "org-b"} {
		ms := make([]MachineSpec, n)
		for i := range ms {
			ms[i] = MachineSpec{Name: fmt.Sprintf("n%04d", i), MFLOPS: 1000 + int64(i), BusyMilliW: 100_000}
		}
		f.must(register(org, int64(n)*2*100_000, ms...))
		sizes := make([]int64, n)
		for i := range sizes {
			sizes[i] = 10_000 + int64(i)
		}
		f.must(submit(org, 2000, sizes...))
	}
	return f
}

// BenchmarkApplyDecisions1000 applies one decisions entry of 1,000
// allocations (decode, per-decision validation, mutation) and reports the
// cost per decision. The ledger is copied, untimed, before each
// application.
func BenchmarkApplyDecisions1000(b *testing.B) {
	const n = 1000
	f := benchFederation(b, n)
	ds := make([]Decision, n)
	for i := range ds {
		org := []string{"org-a", "org-b"}[i%2]
		other := []string{"org-b", "org-a"}[i%2]
		ds[i] = alloc(fmt.Sprintf("%s-%d", org, i/2+1), fmt.Sprintf("%s/n%04d", other, i/2))
	}
	entry, err := EncodeCommand(decide("org-a", 3000, ds...))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l := cloneLedger(b, f.l)
		b.StartTimer()
		r := l.Apply(l.AppliedIndex()+1, entry)
		if r.AcceptedDecisions() != n {
			b.Fatalf("%d of %d decisions accepted: %v", r.AcceptedDecisions(), n, r.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/decision")
	b.ReportMetric(float64(len(entry))/n, "bytes/decision")
}

// BenchmarkPolicyView measures building the leader's view of a federation
// of 2,000 machines with 1,000 running and 1,000 queued tasks.
func BenchmarkPolicyView(b *testing.B) {
	f := benchFederation(b, 1000)
	ds := make([]Decision, 1000)
	for i := range ds {
		ds[i] = alloc(fmt.Sprintf("org-a-%d", i+1), fmt.Sprintf("org-b/n%04d", i))
	}
	f.must(decide("org-a", 3000, ds...))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, _ := f.l.PolicyView(10_000, 300)
		if len(s.Running) != 1000 || len(s.Queued) != 1000 {
			b.Fatalf("view: %d running, %d queued", len(s.Running), len(s.Queued))
		}
	}
}

// BenchmarkHash measures the state hash of the same federation.
func BenchmarkHash(b *testing.B) {
	f := benchFederation(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(f.l.Hash()) != 64 {
			b.Fatal("bad hash")
		}
	}
}

// cloneLedger deep-copies l through the snapshot's canonical form, without
// the encoding (cheaper than WriteSnapshot plus Restore).
func cloneLedger(tb testing.TB, l *Ledger) *Ledger {
	c := l.canonical()
	for i, o := range c.Orgs {
		cp := *o
		c.Orgs[i] = &cp
	}
	for i, m := range c.Machines {
		cp := *m
		c.Machines[i] = &cp
	}
	ts := make([]*Task, len(c.Tasks))
	for i, t := range c.Tasks {
		cp := t.clone()
		ts[i] = &cp
	}
	c.Tasks = ts
	nl, err := fromCanonical(l.applied, &c)
	if err != nil {
		tb.Fatal(err)
	}
	return nl
}

// BenchmarkOwnerListing is what the runner's reconciliation reads on every
// wake-up (issue 22): an organisation of 64 machines, each holding a task
// (variant A of make bench-e2e), listed in full (Allocations, which copies
// every task and machine) or as placements, with its pending stops.
func BenchmarkOwnerListing(b *testing.B) {
	const n = 64
	f := benchFederation(b, n)
	ds := make([]Decision, n)
	for i := range ds {
		ds[i] = alloc(fmt.Sprintf("org-a-%d", i+1), fmt.Sprintf("org-a/n%04d", i))
	}
	f.must(decide("org-a", 3000, ds...))
	b.Run("allocations", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if a := f.l.Allocations("org-a"); len(a) != n {
				b.Fatalf("%d allocations", len(a))
			}
			_ = f.l.PendingStops("org-a")
		}
	})
	b.Run("placements", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p := f.l.Placements("org-a"); len(p) != n {
				b.Fatalf("%d placements", len(p))
			}
			_ = f.l.PendingStops("org-a")
		}
	})
}
