package policy

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
)

// TestFreeIndexFirst: after random updates, first(req, from) is the first
// machine at or after from, in energy order, that a plain scan with fitsIn
// finds.
func TestFreeIndexFirst(t *testing.T) {
	r := newRand(11, 12)
	for iter := range 200 {
		n := 1 + r.IntN(70)
		ms := make([]Machine, n)
		capa, free := make([]Resources, n), make([]Resources, n)
		for i := range ms {
			ms[i] = Machine{ID: fmt.Sprintf("m%02d", i), MFLOPS: int64(1 + r.IntN(5)), BusyMilliW: int64(1 + r.IntN(5))}
			capa[i] = Resources{CPUs: int64(1 + r.IntN(8)), GPUs: int64(r.IntN(3))}
			if r.IntN(2) == 0 {
				capa[i].MemoryBytes = int64(1 + r.IntN(16))
			}
			free[i] = capa[i]
		}
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		sort.Slice(order, func(a, b int) bool { return energyBetter(ms[order[a]], ms[order[b]]) })
		x := newFreeIndex(ms, free, capa)
		for step := range 50 {
			m := r.IntN(n)
			free[m] = Resources{CPUs: int64(r.IntN(int(capa[m].CPUs) + 1)), GPUs: int64(r.IntN(int(capa[m].GPUs) + 1)), MemoryBytes: int64(r.IntN(int(capa[m].MemoryBytes) + 1))}
			x.set(m, free[m], capa[m])
			req := Resources{CPUs: int64(1 + r.IntN(4)), GPUs: int64(r.IntN(2)), MemoryBytes: int64(r.IntN(8))}
			from := r.IntN(n + 1)
			want, wantPos := -1, -1
			for p := from; p < n; p++ {
				if fitsIn(req, free[order[p]], capa[order[p]]) {
					want, wantPos = order[p], p
					break
				}
			}
			if got, pos := x.first(req, from); got != want || pos != wantPos {
				t.Fatalf("case %d step %d: first(%+v, %d) = %d at %d, want %d at %d", iter, step, req, from, got, pos, want, wantPos)
			}
		}
	}
}

// TestSharedPassIndexedAgreesWithReference: federations of more machines
// than fewMachines scans, so that the pass looks for free machines through
// the index, decide as the reference does, with and without owner
// policies and avoided machines.
func TestSharedPassIndexedAgreesWithReference(t *testing.T) {
	r := newRand(13, 14)
	n := 12
	if testing.Short() {
		n = 3
	}
	for iter := range n {
		s := benchState(3+r.IntN(4), 60+r.IntN(40), 150, uint64(iter))
		for i := range s.Machines {
			m := &s.Machines[i]
			m.Capacity = Resources{CPUs: int64(1 << r.IntN(4))}
			if r.IntN(2) == 0 {
				m.Capacity.MemoryBytes = int64(8+8*r.IntN(2)) << 30
			}
			if iter%2 == 1 && r.IntN(3) == 0 {
				m.Policy = &OwnerPolicy{Allow: []string{"/bin/sh"}}
			}
		}
		for i := range s.Queued {
			q := &s.Queued[i]
			q.Request = Resources{CPUs: int64(1 + r.IntN(4)), MemoryBytes: int64(r.IntN(3)) << 31}
			if iter%2 == 1 {
				q.Executable = []string{"/bin/sh", "python3"}[r.IntN(2)]
				if r.IntN(5) == 0 {
					q.Avoid = []string{s.Machines[r.IntN(len(s.Machines))].ID}
				}
			}
		}
		for _, bestFit := range []bool{false, true} {
			got, err := (EHOSEP{BestFit: bestFit}).Schedule(s)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := referenceEHOSEP(s, bestFit)
			if err != nil || !reflect.DeepEqual(got, ref) {
				t.Fatalf("case %d (bestFit %v): %d decisions != reference %d (%v)", iter, bestFit, len(got), len(ref), err)
			}
			if len(got) < 20 {
				t.Fatalf("case %d: only %d decisions: the case tests little", iter, len(got))
			}
		}
	}
}

// BenchmarkSharedPassOwners is BenchmarkSharedPass's 8-CPU federation
// with owner policies: every third machine allows only /bin/sh, and half
// the tasks run python3, which those machines refuse, so the search for a
// free machine skips machines that have room but refuse the task.
func BenchmarkSharedPassOwners(b *testing.B) {
	for _, c := range []struct{ orgs, machines, tasks int }{
		{10, 100, 1_000},
		{100, 1_000, 10_000},
	} {
		s := benchState(c.orgs, c.machines, c.tasks, 4)
		s.Federation = nil
		s.Machines = append([]Machine(nil), s.Machines...)
		for i := range s.Machines {
			s.Machines[i].Capacity = Resources{CPUs: 8}
			if i%3 == 0 {
				s.Machines[i].Policy = &OwnerPolicy{Allow: []string{"/bin/sh"}}
			}
		}
		s.Queued = append([]Task(nil), s.Queued...)
		for i := range s.Queued {
			s.Queued[i].Request = Resources{CPUs: int64(1 + i%4)}
			s.Queued[i].Executable = []string{"/bin/sh", "python3"}[i%2]
		}
		b.Run(fmt.Sprintf("orgs=%d/machines=%d/queue=%d", c.orgs, c.machines, c.tasks), func(b *testing.B) { benchPass(b, EHOSEP{}, s) })
	}
}
