package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchJobState is a busy 800-processor machine: 150 running jobs and q
// queued ones, reserved by a conservative pass as the simulator keeps them.
func benchJobState(b *testing.B, q int) *JobState {
	r := rand.New(rand.NewPCG(1, 2))
	s := &JobState{Now: 1000, Procs: 800}
	var used int64
	for i := 0; used < 790; i++ {
		n := min(int64(1+r.IntN(16)), 800-used)
		s.Running = append(s.Running, JobRunning{ID: fmt.Sprintf("r%d", i), Procs: n, EndBy: 1001 + int64(r.IntN(20000))})
		used += n
	}
	for i := range q {
		n := int64(1 << r.IntN(9))
		s.Queue = append(s.Queue, Job{ID: fmt.Sprintf("q%d", i), Seq: uint64(i), Procs: n, RequestedSeconds: 60 + int64(r.IntN(30000))})
	}
	plan, err := Conservative(s)
	if err != nil {
		b.Fatal(err)
	}
	at := map[string]int64{}
	for _, res := range plan.Reservations {
		at[res.ID] = res.At
	}
	for k := range s.Queue {
		s.Queue[k].ReservedAt, s.Queue[k].Reserved = at[s.Queue[k].ID]
	}
	return s
}

// go test -run '^$' -bench JobPolicies ./policy
func BenchmarkJobPolicies(b *testing.B) {
	for _, q := range []int{50, 500} {
		s := benchJobState(b, q)
		for _, name := range []string{"easy", "conservative"} {
			pol, _ := NewJobPolicy(name)
			b.Run(fmt.Sprintf("%s/queue=%d", name, q), func(b *testing.B) {
				for b.Loop() {
					if _, err := pol(s); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
