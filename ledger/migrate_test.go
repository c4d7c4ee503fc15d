package ledger

import (
	"slices"
	"strings"
	"testing"
)

// softFed is base plus uni-b's soft-deadline task uni-b-3 (60,000 MFlop,
// checkpointable, deadline deadlineMs) running on uni-a/m1 (1000 MFLOPS)
// since 3000 ms, its first run.
func softFed(t *testing.T, deadlineMs int64) *fed {
	f := base(t)
	c := act("uni-b", 2200)
	c.SubmitTasks = &SubmitTasks{Tasks: []TaskSpec{{SizeMFlop: 60_000, Spec: Spec{Argv: []string{"/bin/sh"}, Checkpointable: true, Class: ClassSoftDeadline, DeadlineMs: deadlineMs}}}}
	if r := f.must(c); r.TaskIDs[0] != "uni-b-3" {
		t.Fatalf("fixture: %v", r.TaskIDs)
	}
	f.must(decide("uni-b", 2500, alloc("uni-b-3", "uni-a/m1")))
	f.must(started("uni-a", "uni-b-3", "uni-a/m1", 3000))
	return f
}

func migrate(org, task, machine string, at int64, attempt int, done, finish int64) Command {
	c := act(org, at)
	c.V = 3
	c.MigrateTask = &MigrateTask{Task: task, Machine: machine, Attempt: attempt, DoneMFlop: done, PredictedFinishMs: finish}
	return c
}

// TestMigrateRefused: every request that is not the executing machine's
// owner reporting a miss of the run in progress is refused, by the dry
// run and by Apply, and changes nothing.
func TestMigrateRefused(t *testing.T) {
	f := softFed(t, 100_000)
	f.must(decide("uni-b", 2600, alloc("uni-a-1", "uni-a/m2")))
	f.must(started("uni-a", "uni-a-1", "uni-a/m2", 3000))
	before := f.l.Hash()
	for _, tc := range []struct {
		name string
		c    Command
		want Code
	}{
		{"the task's own organisation, not the machine's", migrate("uni-b", "uni-b-3", "uni-a/m1", 10_000, 1, 5_000, 200_000), CodeNotOwner},
		{"another machine", migrate("uni-a", "uni-b-3", "uni-a/m2", 10_000, 1, 5_000, 200_000), CodeBadState},
		{"an earlier run", migrate("uni-a", "uni-b-3", "uni-a/m1", 10_000, 2, 5_000, 200_000), CodeBadState},
		{"a task without a deadline", migrate("uni-a", "uni-a-1", "uni-a/m2", 10_000, 1, 5_000, 200_000), CodeBadState},
		{"a task not running", migrate("uni-a", "uni-a-2", "uni-a/m1", 10_000, 1, 5_000, 200_000), CodeBadState},
		{"a prediction that meets the deadline with the margin", migrate("uni-a", "uni-b-3", "uni-a/m1", 10_000, 1, 5_000, 90_000), CodeBadState},
		{"more work done than the task has", migrate("uni-a", "uni-b-3", "uni-a/m1", 10_000, 1, 70_000, 200_000), CodeBadState},
		{"no attempt", migrate("uni-a", "uni-b-3", "uni-a/m1", 10_000, 0, 5_000, 200_000), CodeMalformed},
		{"an unknown task", migrate("uni-a", "uni-b-9", "uni-a/m1", 10_000, 1, 5_000, 200_000), CodeUnknownTask},
	} {
		if err := f.l.Check(&tc.c); CodeOf(err) != tc.want {
			t.Errorf("%s: check %v, want %s", tc.name, err, tc.want)
		}
		if r := f.apply(tc.c); r.Err == nil || r.Err.Code != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, r.Err, tc.want)
		}
	}
	if f.l.Hash() != before {
		t.Fatal("a refused migration changed the state")
	}
}

// TestMigrate: hand-worked. uni-b-3 has 60,000 MFlop; at 10 s it has done
// 5,000 on m1 and is predicted to end at 200 s, after its deadline.
//   - deadline 100 s: the rest, 55,000 MFlop, takes 27.5 s on m2 (2000
//     MFLOPS) and 36.7 s on x1 (1500), ×1.1 → 40.25 s and 50.3 s after
//     10 s: both meet it; the run is stopped with a checkpoint to come
//     (preempting), m1 avoided, the task queued.
//   - deadline 35 s: 10 s + 30.25 s = 40.25 s on the fastest, m2: none
//     meets it; the run goes on and the note says why.
func TestMigrate(t *testing.T) {
	t.Run("moved", func(t *testing.T) {
		f := softFed(t, 100_000)
		r := f.must(migrate("uni-a", "uni-b-3", "uni-a/m1", 10_000, 1, 5_000, 200_000))
		task, _ := f.l.Task("uni-b-3")
		m, _ := f.l.Machine("uni-a/m1")
		if task.State != TaskQueued || task.Machine != "" || m.Task != "" {
			t.Fatalf("after the migration: task %s on %q, machine holds %q", task.State, task.Machine, m.Task)
		}
		if s := task.Segments[len(task.Segments)-1]; s.Outcome != OutcomePreempting {
			t.Fatalf("the run is %s, want preempting (stopped with a checkpoint)", s.Outcome)
		}
		if !slices.Contains(task.Avoid, "uni-a/m1") || task.Migrations != 1 {
			t.Fatalf("avoid %v, migrations %d", task.Avoid, task.Migrations)
		}
		if !strings.Contains(task.DeadlineNote, "migrated off uni-a/m1") || !strings.Contains(task.DeadlineNote, "55000 MFlop") {
			t.Fatalf("note %q", task.DeadlineNote)
		}
		if len(r.Changes) != 1 || r.Changes[0].Action != ActionStop || r.Changes[0].Reason != "migrated" {
			t.Fatalf("changes %+v", r.Changes)
		}
		if stops := f.l.PendingStops("uni-a"); len(stops) != 1 || stops[0].Task != "uni-b-3" || stops[0].Outcome != OutcomePreempting {
			t.Fatalf("pending stops %+v", stops)
		}
		// The stop report brings the checkpoint; the task is not placed
		// back on m1 while another machine matches.
		ck := CheckpointData{Hash: "sha256-ab12", SizeBytes: 4096, ProgressMFlop: 5_000, Holders: []string{peerOf("uni-a")}}
		f.must(stopped("uni-a", "uni-b-3", "uni-a/m1", 10_500, 50, &ck))
		if res := f.apply(decide("uni-b", 11_000, alloc("uni-b-3", "uni-a/m1"))); res.AcceptedDecisions() != 0 || res.Decisions[0].Err.Code != CodeNoMatch {
			t.Fatalf("a decision back on the avoided machine: %+v", res.Decisions)
		}
		if task, _ = f.l.Task("uni-b-3"); task.RemainingMFlop != 55_000 {
			t.Fatalf("remaining %d, want 55000 from the checkpoint", task.RemainingMFlop)
		}
	})
	t.Run("no machine can", func(t *testing.T) {
		f := softFed(t, 35_000)
		r := f.must(migrate("uni-a", "uni-b-3", "uni-a/m1", 10_000, 1, 5_000, 200_000))
		task, _ := f.l.Task("uni-b-3")
		if task.State != TaskRunning || task.Machine != "uni-a/m1" || task.Migrations != 0 || len(r.Changes) != 0 {
			t.Fatalf("task %s on %q, %d migrations, changes %+v: want it left running", task.State, task.Machine, task.Migrations, r.Changes)
		}
		const fastest = "1970-01-01T00:00:40Z" // 10 s + 30.25 s, on m2
		if !strings.Contains(task.DeadlineNote, "will miss its deadline") || !strings.Contains(task.DeadlineNote, fastest) || len(r.Notes) != 1 {
			t.Fatalf("note %q, result notes %v", task.DeadlineNote, r.Notes)
		}
	})
}
