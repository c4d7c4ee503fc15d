package chaos

import (
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/executor"
)

// TestCheckRuns checks the run check on hand-built journals and ledgers:
// legal histories pass, and each way a task can run twice at once, or a
// segment can lack the executor's record, is reported.
func TestCheckRuns(t *testing.T) {
	ms := func(s float64) int64 { return int64(s * 1000) }
	us := func(s float64) int64 { return int64(s * 1e6) }
	// run is a journal run that spawned a process from a to b seconds
	// (b < 0: open), ending with reason.
	run := func(n uint64, task, machine string, a, b float64, reason string) executor.JournalRun {
		r := executor.JournalRun{Run: n, Task: task, Machine: machine, Process: true, StartUs: us(a), Reason: reason, ExitCode: -1}
		if b >= 0 {
			r.EndUs, r.Ending = us(b), executor.JournalEnd
		}
		return r
	}
	abandoned := func(r executor.JournalRun, boot float64) executor.JournalRun {
		r.EndUs, r.Ending, r.Reason = us(boot), executor.JournalAbandoned, ""
		return r
	}
	notRun := func(r executor.JournalRun) executor.JournalRun {
		r.NotRun = true
		return r
	}
	seg := func(machine string, a, b float64, outcome string) api.SegmentView {
		return api.SegmentView{Machine: machine, StartMs: ms(a), EndMs: ms(b), Outcome: outcome}
	}
	task := func(id string, segs ...api.SegmentView) api.TaskDetail {
		return api.TaskDetail{TaskView: api.TaskView{ID: id}, Segments: segs}
	}
	ok, stopped := executor.ReasonOK, executor.ReasonStopped
	for _, c := range []struct {
		name     string
		details  []api.TaskDetail
		journals []peerJournal
		skewed   bool
		want     string // in a violation; "" for none
		overlaps map[string]int
	}{
		{name: "one run, done",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 1.01, 2, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 1.9, ok)}}}},
		{name: "preempted, then run elsewhere while the first stopped",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 3, "preempted"), seg("u2/m1", 2.01, 4, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 2.5, stopped)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 2, 3.9, ok)}}},
			overlaps: map[string]int{"preempted": 1}},
		{name: "lost with a killed daemon, its supervisor ended the run before it ran elsewhere",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 4, "lost"), seg("u2/m1", 4.01, 6, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{abandoned(run(1, "t", "m1", 1, -1, ""), 2.5)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 4, 5.9, ok)}}}},
		{name: "lost with a killed daemon whose run is journaled as ending after it ran elsewhere",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 4, "lost"), seg("u2/m1", 4.01, 6, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{abandoned(run(1, "t", "m1", 1, -1, ""), 5)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 4, 5.9, ok)}}},
			want: "ran twice at once"},
		{name: "lost with a killed daemon, overlapping by a microsecond",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 4, "lost"), seg("u2/m1", 4.01, 6, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{abandoned(run(1, "t", "m1", 1, -1, ""), 4.000001)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 4, 5.9, ok)}}},
			want: "ran twice at once"},
		{name: "lost with a killed daemon, ended the very microsecond the next run started",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 4, "lost"), seg("u2/m1", 4.01, 6, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{abandoned(run(1, "t", "m1", 1, -1, ""), 4)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 4, 5.9, ok)}}}},
		{name: "lost with a killed daemon whose run never ended in the journal",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 4, "lost"), seg("u2/m1", 4.01, 6, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, -1, "")}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 4, 5.9, ok)}}},
			want: "ran twice at once"},
		{name: "lost, its paused peer's run still running when it ran elsewhere (no lease)",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 4, "lost"), seg("u2/m1", 4.01, 6, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 5, ok)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 4, 5.9, ok)}}},
			want: "ran twice at once"},
		{name: "preempted on a paused peer, run elsewhere, then its machine lost",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 6, "lost"), seg("u2/m1", 2.01, 4, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 2.5, stopped)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 2, 3.9, ok)}}},
			overlaps: map[string]int{"stopping, then lost": 1}},
		{name: "preempted on a paused peer, then lost, with clocks stepped: not provable",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 6, "lost"), seg("u2/m1", 2.01, 4, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 2.5, stopped)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 2, 3.9, ok)}}},
			skewed: true,
			want:   "ran twice at once"},
		{name: "stepped clocks: a refused start before the recorded run on the same machine",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 9, 10, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{notRun(run(1, "t", "m1", 1, 1.5, stopped)), run(2, "t", "m1", 2, 2.9, ok)}}},
			skewed:   true},
		{name: "stepped clocks: a run abandoned by a killed daemon before the recorded run on the same machine",
			details: []api.TaskDetail{task("t", seg("u1/m1", 9, 10, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{abandoned(run(1, "t", "m1", 1, -1, ""), 1.2),
				run(2, "t", "m1", 2, 2.9, ok)}}},
			skewed: true},
		{name: "stepped clocks: done in the ledger, the only run abandoned",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 9, 10, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{abandoned(run(1, "t", "m1", 1, -1, ""), 1.2)}}},
			skewed:   true,
			want:     "is done, its journal run 1 ended"},
		{name: "stepped clocks: a start whose gate closed late still matches its segment",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 9, 10, "lost"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{notRun(run(1, "t", "m1", 1, 1.5, stopped))}}},
			skewed:   true},
		{name: "start refused: a run the ledger never recorded",
			details: []api.TaskDetail{task("t", seg("u2/m1", 2.01, 4, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 2.5, stopped)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 2, 3.9, ok)}}},
			overlaps: map[string]int{"unrecorded": 1}},
		{name: "same machine twice in a row, an unrecorded run in between",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 1.01, 2, "preempted"), seg("u1/m1", 5.01, 6, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 1.5, stopped), run(2, "t", "m1", 3, 3.5, stopped), run(3, "t", "m1", 5, 5.9, ok)}}}},
		{name: "two runs at once after a failure report",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 3, "failed"), seg("u2/m1", 2.01, 4, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 2.5, executor.ReasonExitNonzero)}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 2, 3.9, ok)}}},
			want: "ran twice at once"},
		{name: "an open run never ended, another started",
			details: []api.TaskDetail{task("t", seg("u1/m1", 1.01, 3, "done"), seg("u2/m1", 4.01, 5, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, -1, "")}},
				{"u2", []executor.JournalRun{run(1, "t", "m1", 4, 4.9, ok)}}},
			want: "ran twice at once"},
		{name: "a segment without a journal run",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 1.01, 2, "done"))},
			journals: []peerJournal{{"u1", nil}},
			want:     "matches no journal run"},
		{name: "a segment on another machine than the journal's",
			details:  []api.TaskDetail{task("t", seg("u1/m2", 1.01, 2, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 1.9, ok)}}},
			want:     "matches no journal run"},
		{name: "a segment started before the executor's record",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 0.5, 2, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 1.9, ok)}}},
			want:     "matches no journal run"},
		{name: "the same, on a peer whose clock the scenario stepped",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 0.5, 2, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 1.9, ok)}}},
			skewed:   true},
		{name: "done in the ledger, stopped in the journal",
			details:  []api.TaskDetail{task("t", seg("u1/m1", 1.01, 2, "done"))},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "t", "m1", 1, 1.9, stopped)}}},
			want:     "ended \"stopped\""},
		{name: "a run of a task the ledger does not hold",
			details:  []api.TaskDetail{task("t")},
			journals: []peerJournal{{"u1", []executor.JournalRun{run(1, "ghost", "m1", 1, 1.9, ok)}}},
			want:     "does not hold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := checkRuns(c.details, c.journals, c.skewed)
			got := strings.Join(rep.errs, "\n")
			switch {
			case c.want == "" && got != "":
				t.Fatalf("violations:\n%s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("violations %q, want one with %q", got, c.want)
			}
			if c.want == "" {
				for k, n := range c.overlaps {
					if rep.overlaps[k] != n {
						t.Errorf("overlaps %v, want %v", rep.overlaps, c.overlaps)
					}
				}
				if rep.allowedOverlaps() != len(c.overlaps) {
					t.Errorf("overlaps %v, want %v", rep.overlaps, c.overlaps)
				}
			}
		})
	}
}
