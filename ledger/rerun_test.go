package ledger

import (
	"slices"
	"strings"
	"testing"
)

// rerunOnSameMachine builds the state the chaos smoke test found
// (docs/RELIABILITY.md): uni-b-1 starts on uni-a/m2 (150 W) at 3000;
// uni-a-1 preempts it at 4000 and runs there from 4100 to 4500 (50,000 mJ);
// the leader then places uni-b-1 on uni-a/m2 again at 4600. uni-b-1 is
// assigned there while its first run, preempted but not reported yet,
// still has an open segment on the same machine.
func rerunOnSameMachine(t *testing.T) *fed {
	t.Helper()
	f := base(t)
	placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
	if r := f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1"))); r.Decisions[0].Err != nil {
		t.Fatalf("preempt: %v", r.Decisions[0].Err)
	}
	f.must(started("uni-a", "uni-a-1", "uni-a/m2", 4100))
	f.must(ended("uni-a", "uni-a-1", "uni-a/m2", 4500, 50_000, false))
	if r := f.must(decide("uni-b", 4600, alloc("uni-b-1", "uni-a/m2"))); r.Decisions[0].Err != nil {
		t.Fatalf("place again: %v", r.Decisions[0].Err)
	}
	tk := mustTask(t, f.l, "uni-b-1")
	if tk.State != TaskAssigned || tk.Machine != "uni-a/m2" || tk.Attempts != 1 || tk.Segments[0].Outcome != OutcomePreempting {
		t.Fatalf("setup: %+v", tk)
	}
	want := []PendingStop{{Machine: "uni-a/m2", Task: "uni-b-1", Outcome: OutcomePreempting, StartMs: 3000, Attempt: 1}}
	if ps := f.l.PendingStops("uni-a"); !slices.Equal(ps, want) {
		t.Fatalf("pending stops %+v, want %+v", ps, want)
	}
	return f
}

// TestReportOfEarlierRunOnSameMachine: every report that can follow the
// state above, and what the ledger makes of it. Each entry is checked
// against the invariants as it is applied (fed.raw), which include the
// energy accounts equalling the sums over closed segments.
func TestReportOfEarlierRunOnSameMachine(t *testing.T) {
	const m2 = "uni-a/m2"
	// uni-a-1's run on its own machine.
	const own = 50_000
	cases := []struct {
		name  string
		steps []Command
		// reject: the last step's expected code ("" : every step applies).
		reject   Code
		state    TaskState
		machine  string
		attempts int
		outcomes []Outcome
		energies []int64
		pending  []int // attempts of uni-b-1 still waiting for a stop report
		// uni-b-1's energy, booked to uni-b as user and uni-a as owner.
		booked int64
		check  func(t *testing.T, f *fed, last Result)
	}{
		{name: "end of the earlier run (the chaos case): books it, the new assignment stays",
			steps: []Command{ended("uni-a", "uni-b-1", m2, 4700, 900, false)},
			state: TaskAssigned, machine: m2, attempts: 1,
			outcomes: []Outcome{OutcomePreempted}, energies: []int64{900}, booked: 900,
			check: func(t *testing.T, f *fed, last Result) {
				if len(last.Notes) != 1 || !strings.Contains(last.Notes[0], "preempted run") {
					t.Fatalf("notes %v", last.Notes)
				}
				if s := mustTask(t, f.l, "uni-b-1").Segments[0]; s.EndMs != 4700 || s.Source != EnergySimulated {
					t.Fatalf("segment %+v", s)
				}
			}},
		{name: "then the new run starts and ends",
			steps: []Command{ended("uni-a", "uni-b-1", m2, 4700, 900, false), started("uni-a", "uni-b-1", m2, 4800), ended("uni-a", "uni-b-1", m2, 5000, 700, false)},
			state: TaskDone, attempts: 2,
			outcomes: []Outcome{OutcomePreempted, OutcomeDone}, energies: []int64{900, 700}, booked: 1600},
		{name: "failure of the earlier run with energy: books it, the task stays assigned",
			steps: []Command{ended("uni-a", "uni-b-1", m2, 4700, 900, true)},
			state: TaskAssigned, machine: m2, attempts: 1,
			outcomes: []Outcome{OutcomePreempted}, energies: []int64{900}, booked: 900},
		{name: "failure with no energy closes the earlier run too, the task stays assigned",
			steps: []Command{ended("uni-a", "uni-b-1", m2, 4700, 0, true)},
			state: TaskAssigned, machine: m2, attempts: 1,
			outcomes: []Outcome{OutcomePreempted}, energies: []int64{0}, booked: 0},
		{name: "stop report of the earlier run, with a checkpoint the new run resumes from",
			steps: []Command{stopped("uni-a", "uni-b-1", m2, 4700, 900, &CheckpointData{Hash: "h1", ProgressMFlop: 5000, Holders: []string{peerOf("uni-a")}})},
			state: TaskAssigned, machine: m2, attempts: 1,
			outcomes: []Outcome{OutcomePreempted}, energies: []int64{900}, booked: 900,
			check: func(t *testing.T, f *fed, _ Result) {
				if tk := mustTask(t, f.l, "uni-b-1"); tk.Checkpoint == nil || tk.Checkpoint.Hash != "h1" || tk.RemainingMFlop != 10_000 {
					t.Fatalf("task %+v", tk)
				}
			}},
		{name: "machine lost: the earlier run closed with the declared estimate, the task queued",
			steps: []Command{lost("uni-a", m2, 5000)},
			state: TaskQueued, attempts: 1,
			// 150 W from 3000 to 5000.
			outcomes: []Outcome{OutcomeLost}, energies: []int64{300_000}, booked: 300_000,
			check: func(t *testing.T, f *fed, last Result) {
				if m := mustMachine(t, f.l, m2); m.State != MachineLost || m.Task != "" {
					t.Fatalf("machine %+v", m)
				}
				want := []Change{{Machine: m2, MachineOrg: "uni-a", Action: ActionStop, Task: "uni-b-1", Reason: "lost"}}
				if !slices.Equal(last.Changes, want) {
					t.Fatalf("changes %+v", last.Changes)
				}
			}},
		{name: "new run started first, then the stop report of the earlier one",
			steps: []Command{started("uni-a", "uni-b-1", m2, 4700), stopped("uni-a", "uni-b-1", m2, 4800, 900, nil)},
			state: TaskRunning, machine: m2, attempts: 2,
			outcomes: []Outcome{OutcomePreempted, OutcomeRunning}, energies: []int64{900, 0}, booked: 900},
		{name: "new run started first, then its end: the running run ends, the earlier one still waits",
			steps: []Command{started("uni-a", "uni-b-1", m2, 4700), ended("uni-a", "uni-b-1", m2, 5000, 700, false)},
			state: TaskDone, attempts: 2,
			outcomes: []Outcome{OutcomePreempting, OutcomeDone}, energies: []int64{0, 700}, pending: []int{1}, booked: 700},
		{name: "... and the earlier one's stop report comes last",
			steps: []Command{started("uni-a", "uni-b-1", m2, 4700), ended("uni-a", "uni-b-1", m2, 5000, 700, false), stopped("uni-a", "uni-b-1", m2, 5100, 900, nil)},
			state: TaskDone, attempts: 2,
			outcomes: []Outcome{OutcomePreempted, OutcomeDone}, energies: []int64{900, 700}, booked: 1600},
		{name: "a second end report finds nothing left to close",
			steps:  []Command{ended("uni-a", "uni-b-1", m2, 4700, 900, false), ended("uni-a", "uni-b-1", m2, 4750, 900, false)},
			reject: CodeBadState,
			state:  TaskAssigned, machine: m2, attempts: 1,
			outcomes: []Outcome{OutcomePreempted}, energies: []int64{900}, booked: 900},
		{name: "an end reported on a machine the task never ran on",
			steps:  []Command{ended("uni-b", "uni-b-1", "uni-b/x1", 4700, 900, false)},
			reject: CodeBadState,
			state:  TaskAssigned, machine: m2, attempts: 1,
			outcomes: []Outcome{OutcomePreempting}, energies: []int64{0}, pending: []int{1}, booked: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := rerunOnSameMachine(t)
			var last Result
			for i, c := range tc.steps {
				if i < len(tc.steps)-1 || tc.reject == "" {
					last = f.must(c)
					continue
				}
				before := f.l.Hash()
				last = f.apply(c)
				if CodeOf(errOrNil(last.Err)) != tc.reject {
					t.Fatalf("last step: got %v, want %s", last.Err, tc.reject)
				}
				if f.l.Hash() != before {
					t.Fatal("a rejected report changed the state")
				}
			}
			tk := mustTask(t, f.l, "uni-b-1")
			if tk.State != tc.state || tk.Machine != tc.machine || tk.Attempts != tc.attempts {
				t.Fatalf("uni-b-1 is %s on %q after %d attempts, want %s on %q after %d", tk.State, tk.Machine, tk.Attempts, tc.state, tc.machine, tc.attempts)
			}
			var outcomes []Outcome
			var energies []int64
			for _, s := range tk.Segments {
				if s.Machine != m2 {
					t.Fatalf("segment on %q", s.Machine)
				}
				outcomes = append(outcomes, s.Outcome)
				energies = append(energies, s.EnergyMilliJ)
			}
			if !slices.Equal(outcomes, tc.outcomes) || !slices.Equal(energies, tc.energies) {
				t.Fatalf("segments %v %v, want %v %v", outcomes, energies, tc.outcomes, tc.energies)
			}
			var pending []int
			for _, p := range f.l.PendingStops("uni-a") {
				if p.Task != "uni-b-1" || p.Machine != m2 {
					t.Fatalf("pending stop %+v", p)
				}
				pending = append(pending, p.Attempt)
			}
			if !slices.Equal(pending, tc.pending) {
				t.Fatalf("pending stops of attempts %v, want %v", pending, tc.pending)
			}
			// The machine holds the task iff the task names it.
			if m := mustMachine(t, f.l, m2); (m.Task == "uni-b-1") != (tc.machine == m2) {
				t.Fatalf("machine %+v", m)
			}
			a, b := mustOrg(t, f.l, "uni-a"), mustOrg(t, f.l, "uni-b")
			if a.Energy != (Energy{UserMilliJ: own, OwnerSelfMilliJ: own, OwnerOthersMilliJ: tc.booked}) || b.Energy != (Energy{UserMilliJ: tc.booked}) {
				t.Fatalf("energy uni-a %+v uni-b %+v, want %d mJ booked for uni-b-1", a.Energy, b.Energy, tc.booked)
			}
			if tc.check != nil {
				tc.check(t, f, last)
			}
		})
	}
}
