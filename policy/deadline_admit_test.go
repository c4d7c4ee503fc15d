package policy

import (
	"math/rand/v2"
	"testing"
)

// TestAdmitDeadlinesHandWorked: a batch judged together. Machines as in
// placeState (a/fast 10 000 MFLOPS, a/slow and a/steady 1000); a task of
// 3 600 000 MFlop takes 396 s with the margin on a/fast, 3960 s on the
// others; two of them back to back on a/fast take 792 s.
func TestAdmitDeadlinesHandWorked(t *testing.T) {
	const now, size = 1_000_000, 3_600_000
	soft := func(id string, deadlineS int64) Task {
		return Task{ID: id, SizeMFlop: size, Class: SoftDeadline, DeadlineMs: now + deadlineS*1000}
	}
	for _, tc := range []struct {
		name    string
		tasks   []Task
		limit   int64 // 0: placeState's
		fast2   bool  // a second a/fast
		running []Running
		refused int // -1: admitted
		ahead   int
	}{
		{name: "one task only a/fast meets", tasks: []Task{soft("t", 500)}, refused: -1},
		{name: "two tasks each alone meeting, not together", tasks: []Task{soft("t0", 500), soft("t1", 500)}, refused: 1, ahead: 1},
		{name: "the second fits behind the first", tasks: []Task{soft("t0", 500), soft("t1", 800)}, refused: -1},
		{name: "earliest deadline first, whatever the listing", tasks: []Task{soft("late", 800), soft("early", 500)}, refused: -1},
		{name: "the later deadline is the one refused", tasks: []Task{soft("late", 700), soft("early", 500)}, refused: 0, ahead: 1},
		{name: "a loose deadline goes to a slow stable machine, leaving a/fast", tasks: []Task{soft("loose", 5000), soft("t", 500), soft("u", 800)}, refused: -1},
		{name: "nice and classless tasks of the batch do not count", tasks: []Task{soft("t", 500), {ID: "n", SizeMFlop: size, Class: Nice}, {ID: "p", SizeMFlop: size}}, refused: -1},
		{
			// Each alone may use either fast machine, but the limit lets
			// a draw one at a time: the first task, started now, counts
			// in PI, so the second may not start on a/fast2, and behind
			// the first on a/fast it ends at 792 s > 500 s.
			name: "power: what starts now counts for the tasks after", tasks: []Task{soft("t0", 500), soft("t1", 500)},
			limit: 3_000_000, fast2: true, refused: 1, ahead: 1,
		},
		{
			name: "power: without the limit the second fast machine takes it", tasks: []Task{soft("t0", 500), soft("t1", 500)},
			fast2: true, limit: 6_000_000, refused: -1,
		},
		{
			name:    "a/fast busy with a long classless task: nothing meets",
			tasks:   []Task{soft("t", 500)},
			running: []Running{{Task: Task{ID: "long", SizeMFlop: 100 * size}, Machine: 1}}, refused: 0,
		},
		{
			name:    "a/fast busy with the organisation's own nice task: preempted, admitted",
			tasks:   []Task{soft("t", 500)},
			running: []Running{{Task: Task{ID: "long", SizeMFlop: 100 * size, Class: Nice}, Machine: 1}}, refused: -1,
		},
		{
			name:    "after the preemption a/fast runs the batch's task: the next waits behind it",
			tasks:   []Task{soft("t", 500), soft("u", 500)},
			running: []Running{{Task: Task{ID: "long", SizeMFlop: 100 * size, Class: Nice}, Machine: 1}}, refused: 1, ahead: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := placeState()
			s.Running = tc.running
			if tc.fast2 {
				s.Machines = append(s.Machines, Machine{ID: "a/fast2", MFLOPS: 10_000, BusyMilliW: 3_000_000})
			}
			if tc.limit > 0 {
				s.Orgs[0].LimitMilliW = tc.limit
			}
			r := AdmitDeadlines(s, tc.tasks)
			switch {
			case tc.refused < 0 && r != nil:
				t.Fatalf("refused task %d (ahead %d, fastest %d)", r.Task, r.Ahead, r.FastestMs)
			case tc.refused >= 0 && (r == nil || r.Task != tc.refused || r.Ahead != tc.ahead):
				t.Fatalf("got %+v, want task %d refused with %d ahead", r, tc.refused, tc.ahead)
			}
		})
	}
}

// TestAdmitOneTaskIsTheMapping: a batch of one task is admitted exactly
// when MapDeadline, on the machines DeadlineMay allows with every running
// task counted as a soft task ahead (no nice task running, so nothing to
// preempt), does not refuse it: judging together changes nothing for a
// single task. And admitting is independent of how the batch is listed.
func TestAdmitOneTaskIsTheMapping(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	admitted, refused := 0, 0
	for iter := range 3000 {
		s, in, _ := randomLimitedState(r)
		for j := range s.Running {
			s.Running[j].Task.SizeMFlop = r.Int64N(2_000_000)
		}
		task := Task{ID: "new", Org: r.IntN(len(s.Orgs)), SizeMFlop: 1 + r.Int64N(2_000_000), Class: SoftDeadline, DeadlineMs: r.Int64N(6_000_000)}
		for j := range in.Machines {
			in.Machines[j].Running, in.Machines[j].RunningID, in.Machines[j].RemainingMFlop = 0, "", 0
		}
		for _, run := range s.Running {
			m := &in.Machines[run.Machine]
			m.Running, m.RunningID, m.Protected, m.RemainingMFlop = SoftDeadline, run.Task.ID, true, run.Task.SizeMFlop
		}
		in.Task = DeadlineTask{ID: "new", Class: SoftDeadline, SizeMFlop: task.SizeMFlop, DeadlineMs: task.DeadlineMs}
		in.May = DeadlineMay(s, task)
		mp, err := MapDeadline(in)
		if err != nil {
			t.Fatal(err)
		}
		got := AdmitDeadlines(s, []Task{task})
		if (got == nil) != (mp.Outcome != MapRefused) {
			t.Fatalf("case %d: admit %+v, mapping %v", iter, got, mp.Outcome)
		}
		if got == nil {
			admitted++
		} else {
			refused++
		}
		// Two tasks with distinct deadlines, listed both ways.
		other := task
		other.ID, other.DeadlineMs = "other", task.DeadlineMs+1+r.Int64N(1_000_000)
		a, b := AdmitDeadlines(s, []Task{task, other}), AdmitDeadlines(s, []Task{other, task})
		if (a == nil) != (b == nil) || a != nil && a.Ahead != b.Ahead {
			t.Fatalf("case %d: the listing changed the verdict: %+v vs %+v", iter, a, b)
		}
	}
	if admitted == 0 || refused == 0 {
		t.Fatalf("admitted %d, refused %d: the test decides nothing", admitted, refused)
	}
}
