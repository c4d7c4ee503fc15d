package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMapDeadline maps one task on a grid of n machines, half of them
// busy (the seed's 100 and a federation-sized 10 000).
func BenchmarkMapDeadline(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		for _, class := range []TaskClass{SoftDeadline, Nice} {
			b.Run(fmt.Sprintf("%s/%d", class, n), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, uint64(n)))
				in := DeadlineInput{NowMs: 1_000, Task: DeadlineTask{ID: "t", Class: class, SizeMFlop: 50_000_000, DeadlineMs: 40_000_000}}
				for j := range n {
					m := DeadlineMachine{ID: fmt.Sprintf("m%05d", j), MFLOPS: 791 + r.Int64N(4000), MTBFMs: r.Int64N(1_000_000)}
					if j%2 == 0 {
						m.Running, m.RunningID, m.RemainingMFlop = SoftDeadline, fmt.Sprintf("r%d", j), r.Int64N(50_000_000)
						m.Reserved = true
					}
					in.Machines = append(in.Machines, m)
				}
				if class == Nice { // no free machine, no nice to reserve behind: the random branch
					for j := range in.Machines {
						in.Machines[j].Running, in.Machines[j].RunningID, in.Machines[j].Reserved = SoftDeadline, "r", true
					}
				}
				b.ResetTimer()
				for b.Loop() {
					if _, err := MapDeadline(in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
