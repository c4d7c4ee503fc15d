package ledger

import (
	"math/rand/v2"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// TestTransitionsReplayTheTaskStates folds the transitions of random
// command sequences: each one starts from the state the previous one left
// (or from nothing for a submit), a rejected command reports none, and the
// fold equals the ledger's task states after every command. A state change
// the ledger made without reporting it breaks the fold.
func TestTransitionsReplayTheTaskStates(t *testing.T) {
	steps := 2000
	if testing.Short() {
		steps = 500
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, seed := range []uint64{4, 5} {
		f := newFed(t)
		g := &gen{r: rand.New(rand.NewPCG(seed, 7)), l: f.l, now: 1_000_000, pol: pol}
		folded := map[string]TaskState{}
		for i := 0; i < steps; i++ {
			r := f.raw(g.encode(g.command()))
			if !r.Applied() && len(r.Transitions) > 0 {
				t.Fatalf("seed %d step %d: rejected %s reports %d transitions", seed, i, r.Kind, len(r.Transitions))
			}
			for _, tr := range r.Transitions {
				if folded[tr.Task] != tr.From {
					t.Fatalf("seed %d step %d: %s goes %q → %q, but it was %q", seed, i, tr.Task, tr.From, tr.To, folded[tr.Task])
				}
				if tr.From == tr.To {
					t.Fatalf("seed %d step %d: %s: a transition %q → %q changes nothing", seed, i, tr.Task, tr.From, tr.To)
				}
				folded[tr.Task] = tr.To
				reasons[tr.Reason]++
			}
			tasks := f.l.Tasks(TaskFilter{})
			if len(tasks) != len(folded) {
				t.Fatalf("seed %d step %d: %d tasks, %d seen in transitions", seed, i, len(tasks), len(folded))
			}
			for _, task := range tasks {
				if folded[task.ID] != task.State {
					t.Fatalf("seed %d step %d: %s is %s, the transitions say %q", seed, i, task.ID, task.State, folded[task.ID])
				}
			}
		}
	}
	t.Logf("reasons %v", reasons)
	for _, want := range []string{"submitted", "allocated", "started", "done", "failed", "cancelled", "preempted", "lost"} {
		if reasons[want] == 0 {
			t.Errorf("the random sequences never produced a %q transition", want)
		}
	}
}
