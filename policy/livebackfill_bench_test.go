package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// liveBenchState: 10 organisations, 200 machines of 8 CPUs each running
// four 2-CPU tasks (every machine full), and queued tasks of 1 to 8 CPUs
// with limits of 1 to 60 minutes.
func liveBenchState(queued int) *State {
	r := rand.New(rand.NewPCG(1, 2))
	s := &State{}
	for i := range 10 {
		s.Orgs = append(s.Orgs, Org{Name: fmt.Sprintf("o%d", i), LimitMilliW: 1 << 40})
	}
	id := 0
	for m := range 200 {
		s.Machines = append(s.Machines, Machine{ID: fmt.Sprintf("m%03d", m), Owner: m % 10, MFLOPS: int64(1000 + r.IntN(4)*500),
			BusyMilliW: int64(100_000 + r.IntN(5)*20_000), Capacity: Resources{CPUs: 8}})
		for range 4 {
			id++
			s.Running = append(s.Running, Running{Machine: m, RunSeconds: float64(r.IntN(600)),
				Task: Task{ID: fmt.Sprintf("r%d", id), Org: r.IntN(10), SizeMFlop: 1, Seq: uint64(id), Request: Resources{CPUs: 2}, WallLimitMs: int64(1+r.IntN(60)) * 60_000}})
		}
	}
	for range queued {
		id++
		s.Queued = append(s.Queued, Task{ID: fmt.Sprintf("q%d", id), Org: r.IntN(10), SizeMFlop: 1, Seq: uint64(id),
			Request: Resources{CPUs: int64(1 + r.IntN(8))}, WallLimitMs: int64(1+r.IntN(60)) * 60_000})
	}
	return s
}

func BenchmarkLiveBackfill(b *testing.B) {
	for _, mode := range LiveModes() {
		for _, q := range []int{100, 1000} {
			s := liveBenchState(q)
			b.Run(fmt.Sprintf("%s/queued=%d", mode, q), func(b *testing.B) {
				for b.Loop() {
					if _, err := (LiveBackfill{Mode: mode}).Plan(s); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
