package ledger

import (
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// cpuMachine is a 4-CPU machine.
func cpuMachine(name string) MachineSpec {
	m := mspec(name, 1000, 100_000)
	m.CPUs = 4
	return m
}

// gangSpec is part rank of a gang of size parts asking for 4 CPUs.
func gangSpec(size, rank int) TaskSpec {
	return TaskSpec{SizeMFlop: 10_000, Spec: Spec{Argv: []string{"./mpi"}, TaskRequest: TaskRequest{CPUs: 4}, Gang: &Gang{Size: size, Rank: rank}}}
}

func submitSpecs(org string, at int64, ts ...TaskSpec) Command {
	c := act(org, at)
	c.SubmitTasks = &SubmitTasks{Tasks: ts}
	return c
}

// gangFed: uni-a owns m1, m2, m3 (4 CPUs, 100 W each, limit 1 kW), uni-b
// owns x1; uni-a submitted the gang uni-a-1, uni-a-2 (2 parts of 4 CPUs)
// and the plain 4-CPU task uni-a-3.
func gangFed(t *testing.T) *fed {
	t.Helper()
	f := newFed(t)
	f.must(register("uni-a", 1_000_000, cpuMachine("m1"), cpuMachine("m2"), cpuMachine("m3")))
	f.must(register("uni-b", 1_000_000, cpuMachine("x1")))
	plain := gangSpec(2, 0)
	plain.Spec.Gang = nil
	r := f.must(submitSpecs("uni-a", 2000, gangSpec(2, 0), gangSpec(2, 1), plain))
	if strings.Join(r.TaskIDs, ",") != "uni-a-1,uni-a-2,uni-a-3" {
		t.Fatalf("task IDs %v", r.TaskIDs)
	}
	return f
}

// placedGang is gangFed with the gang placed on m1 and m2 and started.
func placedGang(t *testing.T) *fed {
	f := gangFed(t)
	r := f.must(decide("uni-a", 2500, alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-a/m2")))
	if r.AcceptedDecisions() != 2 {
		t.Fatalf("gang not placed: %+v", r.Decisions)
	}
	f.must(started("uni-a", "uni-a-1", "uni-a/m1", 3000))
	f.must(started("uni-a", "uni-a-2", "uni-a/m2", 3000))
	return f
}

func taskOf(t *testing.T, l *Ledger, id string) Task {
	t.Helper()
	task, ok := l.Task(id)
	if !ok {
		t.Fatalf("no task %s", id)
	}
	return task
}

func TestGangSubmission(t *testing.T) {
	withSpec := func(ts TaskSpec, set func(*Spec)) TaskSpec { ts.Spec = ts.Spec.clone(); set(&ts.Spec); return ts }
	cases := []struct {
		name  string
		tasks []TaskSpec
		want  string // "" accepted, else a part of the malformed message
	}{
		{"two parts", []TaskSpec{gangSpec(2, 0), gangSpec(2, 1)}, ""},
		{"size one", []TaskSpec{gangSpec(1, 0)}, "size 1 out of range"},
		{"size above the bound", []TaskSpec{gangSpec(MaxGangSize+1, 0)}, "out of range"},
		{"missing part", []TaskSpec{gangSpec(3, 0), gangSpec(3, 1)}, "only 2 tasks from here"},
		{"rank order", []TaskSpec{gangSpec(2, 1), gangSpec(2, 0)}, "without the parts before it"},
		{"rank repeated", []TaskSpec{gangSpec(2, 0), gangSpec(2, 0)}, "rank 0, want size 2 rank 1"},
		{"parts differ", []TaskSpec{gangSpec(2, 0), withSpec(gangSpec(2, 1), func(s *Spec) { s.Argv = []string{"./other"} })}, "differs from the first part's"},
		{"sizes differ", []TaskSpec{gangSpec(2, 0), func() TaskSpec { ts := gangSpec(2, 1); ts.SizeMFlop++; return ts }()}, "size 10001 MFlop"},
		{"id given", []TaskSpec{withSpec(gangSpec(2, 0), func(s *Spec) { s.Gang.ID = "uni-a-9" }), gangSpec(2, 1)}, "the ledger sets it"},
		{"plain task inside", []TaskSpec{gangSpec(2, 0), withSpec(gangSpec(2, 1), func(s *Spec) { s.Gang = nil })}, "not a gang part"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFed(t)
			f.must(register("uni-a", 1_000_000, cpuMachine("m1"), cpuMachine("m2")))
			before := f.l.Hash()
			r := f.apply(submitSpecs("uni-a", 2000, c.tasks...))
			if c.want == "" {
				if !r.Applied() {
					t.Fatalf("refused: %v", r.Err)
				}
				for i, id := range r.TaskIDs {
					g := taskOf(t, f.l, id).Spec.Gang
					if g == nil || g.ID != "uni-a-1" || g.Rank != i || g.Size != 2 {
						t.Fatalf("%s: gang %+v, want id uni-a-1 rank %d", id, g, i)
					}
				}
				return
			}
			if r.Err == nil || r.Err.Code != CodeMalformed || !strings.Contains(r.Err.Msg, c.want) {
				t.Fatalf("got %v, want malformed with %q", r.Err, c.want)
			}
			if f.l.Hash() != before {
				t.Fatal("a refused submit changed the state")
			}
		})
	}
}

// TestGangPlacementAllOrNothing: a decision placing a part applies only
// with every part placed by the same decisions on distinct machines of one
// organisation; otherwise each gets gang_incomplete and nothing of the
// gang changes, while the other decisions of the batch apply.
func TestGangPlacementAllOrNothing(t *testing.T) {
	cases := []struct {
		name   string
		limit  int64 // uni-a's limit, when not 0
		ds     []Decision
		want   []Code
		placed map[string]string // task → machine after the batch
	}{
		{"whole gang", 0, []Decision{alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-a/m2")},
			[]Code{"", ""}, map[string]string{"uni-a-1": "uni-a/m1", "uni-a-2": "uni-a/m2"}},
		{"parts apart in the batch", 0, []Decision{alloc("uni-a-2", "uni-a/m3"), alloc("uni-a-3", "uni-a/m1"), alloc("uni-a-1", "uni-a/m2")},
			[]Code{"", "", ""}, map[string]string{"uni-a-1": "uni-a/m2", "uni-a-2": "uni-a/m3", "uni-a-3": "uni-a/m1"}},
		{"one part only", 0, []Decision{alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-3", "uni-a/m2")},
			[]Code{CodeGangIncomplete, ""}, map[string]string{"uni-a-3": "uni-a/m2"}},
		{"one machine for both", 0, []Decision{alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-a/m1")},
			[]Code{CodeGangIncomplete, CodeGangIncomplete}, map[string]string{}},
		{"two organisations", 0, []Decision{alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-b/x1")},
			[]Code{CodeGangIncomplete, CodeGangIncomplete}, map[string]string{}},
		{"a part's machine taken first", 0, []Decision{alloc("uni-a-3", "uni-a/m2"), alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-a/m2")},
			[]Code{"", CodeGangIncomplete, CodeGangIncomplete}, map[string]string{"uni-a-3": "uni-a/m2"}},
		{"by preempting a task not on the machine", 0, []Decision{alloc("uni-a-1", "uni-a/m1"), preempt("uni-a-2", "uni-a/m2", "uni-a-3")},
			[]Code{CodeGangIncomplete, CodeGangIncomplete}, map[string]string{}},
		{"power for one part only", 150_000, []Decision{alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-a/m2")},
			[]Code{CodeGangIncomplete, CodeGangIncomplete}, map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := gangFed(t)
			if c.limit != 0 {
				sl := act("uni-a", 2100)
				sl.SetLimit = &SetLimit{LimitMilliW: c.limit}
				f.must(sl)
			}
			r := f.must(decide("uni-a", 2500, c.ds...))
			for i, d := range r.Decisions {
				got := Code("")
				if d.Err != nil {
					got = d.Err.Code
				}
				if got != c.want[i] {
					t.Errorf("decision %d (%+v): %v, want %q", i, d.Decision, d.Err, c.want[i])
				}
			}
			for _, id := range []string{"uni-a-1", "uni-a-2", "uni-a-3"} {
				task := taskOf(t, f.l, id)
				if task.Machine != c.placed[id] {
					t.Errorf("%s on %q (%s), want %q", id, task.Machine, task.State, c.placed[id])
				}
			}
		})
	}
}

// TestGangStopsTogether: a placed part leaving its machine takes the
// others off theirs in the same apply; a part ending cancelled or failed
// ends the others alike; one ending done leaves them running.
func TestGangStopsTogether(t *testing.T) {
	failFinal := ended("uni-a", "uni-a-1", "uni-a/m1", 4000, 5, true)
	cancel := act("uni-a", 4000)
	cancel.CancelTask = &CancelTask{Task: "uni-a-2"}
	retry := act("uni-a", 5000)
	retry.RetryTask = &RetryTask{Task: "uni-a-1"}
	cases := []struct {
		name string
		cmd  Command
		// states of uni-a-1 and uni-a-2 after, and the outcome of
		// uni-a-2's segment on m2
		s1, s2  TaskState
		outcome Outcome
	}{
		{"preempted", decide("uni-a", 4000, preempt("uni-a-3", "uni-a/m1", "uni-a-1")), TaskQueued, TaskQueued, OutcomePreempting},
		{"machine lost", lost("uni-a", "uni-a/m1", 4000), TaskQueued, TaskQueued, OutcomePreempting},
		{"cancelled", cancel, TaskCancelled, TaskCancelled, OutcomeCancelling},
		{"failed", failFinal, TaskFailed, TaskFailed, OutcomePreempting},
		{"done", ended("uni-a", "uni-a-1", "uni-a/m1", 4000, 5, false), TaskDone, TaskRunning, OutcomeRunning},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := placedGang(t)
			r := f.must(c.cmd)
			if r.Decisions != nil && r.AcceptedDecisions() != len(r.Decisions) {
				t.Fatalf("decisions refused: %+v", r.Decisions)
			}
			t1, t2 := taskOf(t, f.l, "uni-a-1"), taskOf(t, f.l, "uni-a-2")
			if t1.State != c.s1 || t2.State != c.s2 {
				t.Fatalf("parts %s and %s, want %s and %s", t1.State, t2.State, c.s1, c.s2)
			}
			if got := t2.Segments[len(t2.Segments)-1].Outcome; got != c.outcome {
				t.Fatalf("uni-a-2's run is %s, want %s", got, c.outcome)
			}
			stopM2 := false
			for _, ch := range r.Changes {
				stopM2 = stopM2 || ch.Machine == "uni-a/m2" && ch.Action == ActionStop && ch.Task == "uni-a-2"
			}
			if stopM2 != (c.s2 != TaskRunning) {
				t.Fatalf("stop of uni-a-2 on m2 told: %v; changes %+v", stopM2, r.Changes)
			}
			if c.s2 == TaskQueued {
				// Back in the queue whole, the gang is placed whole again
				// once m2's stop is reported.
				f.must(stopped("uni-a", "uni-a-2", "uni-a/m2", 4100, 5, nil))
				if c.name == "preempted" {
					// m1 holds uni-a-3 now: m2 and m3 take the gang.
					r := f.must(decide("uni-a", 4200, alloc("uni-a-1", "uni-a/m2"), alloc("uni-a-2", "uni-a/m3")))
					if r.AcceptedDecisions() != 2 {
						t.Fatalf("gang not placed again: %+v", r.Decisions)
					}
				}
			}
			if c.s1 == TaskFailed {
				if r := f.apply(retry); r.Err == nil || r.Err.Code != CodeBadState {
					t.Fatalf("retry of a gang part: %v, want bad_state", r.Err)
				}
			}
		})
	}
}

// TestGangEndedPartFailsARequeuedGang: a gang whose part ended done
// cannot run whole again: when another part goes back to the queue (its
// machine lost), the gang's waiting parts fail instead of waiting forever.
func TestGangEndedPartFailsARequeuedGang(t *testing.T) {
	f := placedGang(t)
	f.must(ended("uni-a", "uni-a-1", "uni-a/m1", 4000, 5, false))
	f.must(lost("uni-a", "uni-a/m2", 4100))
	if s := taskOf(t, f.l, "uni-a-2").State; s != TaskFailed {
		t.Fatalf("uni-a-2 is %s, want failed", s)
	}
	if len(f.l.gangs) != 0 {
		t.Fatalf("gang index %v after every part ended", f.l.gangs)
	}
}

// TestGangPass: the view carries the waiting gang (State.Gangs, its parts
// in no queue) and the pass of the job policy ehosep (policy.GangFirst)
// places it whole, first, when one organisation has a free machine for
// each part; otherwise the gang is the head and holds its organisation's
// machines, and the policy places the plain tasks elsewhere.
func TestGangPass(t *testing.T) {
	f := gangFed(t)
	// uni-b's plain task waits; uni-a-3 takes m1: only m2 and m3 free.
	bt := gangSpec(2, 0)
	bt.Spec.Gang = nil
	f.must(submitSpecs("uni-b", 2100, bt))
	f.must(decide("uni-a", 2200, alloc("uni-a-3", "uni-a/m1")))
	f.must(lost("uni-a", "uni-a/m3", 2300))
	st, vm := f.l.PolicyView(2400, 0)
	if len(st.Gangs) != 1 || st.Gangs[0].ID != "uni-a-1" || len(st.Gangs[0].Parts) != 2 {
		t.Fatalf("the view's gangs %+v", st.Gangs)
	}
	if len(st.Queued) != 1 || st.Queued[0].ID != "uni-b-1" {
		t.Fatalf("the policy queue %+v, want uni-b-1 only (gang parts are in State.Gangs)", st.Queued)
	}
	pol, err := policy.WithJobPolicy(policy.EHOSEP{}, DefaultJobPolicy)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := pol.Schedule(st)
	if err != nil {
		t.Fatal(err)
	}
	dd, err := vm.Decisions(ds)
	// m1 and m2 are held for the head gang: uni-b-1 goes to x1.
	if err != nil || len(dd) != 1 || dd[0] != alloc("uni-b-1", "uni-b/x1") {
		t.Fatalf("pass with the gang waiting: %+v, %v", dd, err)
	}
	if r := f.l.Pending()["uni-a-2"]; r.Code != "gang" || !strings.Contains(r.Detail, "head gang: machines uni-a/m1, uni-a/m2 are held") {
		t.Fatalf("waiting part's reason %+v", r)
	}
	hb := act("uni-a", 2500)
	hb.Heartbeat = &Heartbeat{Machine: "uni-a/m3"}
	f.must(hb)
	st, vm = f.l.PolicyView(2600, 0)
	if r := f.l.Pending()["uni-a-1"]; r.Code != "next_pass" {
		t.Fatalf("placeable part's reason %+v", r)
	}
	if ds, err = pol.Schedule(st); err != nil {
		t.Fatal(err)
	}
	dd, _ = vm.Decisions(ds)
	want := []Decision{alloc("uni-a-1", "uni-a/m2"), alloc("uni-a-2", "uni-a/m3"), alloc("uni-b-1", "uni-b/x1")}
	if !slices.Equal(dd, want) {
		t.Fatalf("decisions %+v, want %+v", dd, want)
	}
	cmd, err := vm.DecisionsCommand("uni-a", peerOf("uni-a"), 2600, ds)
	if err != nil {
		t.Fatal(err)
	}
	r := f.must(cmd)
	if r.AcceptedDecisions() != 3 {
		t.Fatalf("pass refused: %+v", r.Decisions)
	}
}

// TestGangScheduleTrigger: on a federation whose peers compute the pass,
// a trigger places a waiting gang whole (and is refused as empty while it
// cannot).
func TestGangScheduleTrigger(t *testing.T) {
	r := schedRules("ehosep", 0)
	f := newFed(t)
	f.must(registerRules("uni-a", 1_000_000, r, cpuMachine("m1"), cpuMachine("m2")))
	f.must(submitSpecs("uni-a", 2000, gangSpec(2, 0), gangSpec(2, 1)))
	res := f.must(trigger("uni-a", 3000))
	if res.AcceptedDecisions() != 2 || taskOf(t, f.l, "uni-a-2").State != TaskAssigned {
		t.Fatalf("trigger: %+v", res.Decisions)
	}
	if got := f.apply(trigger("uni-a", 3100)); got.Err == nil || got.Err.Code != CodeNothingToSchedule {
		t.Fatalf("second trigger: %v, want nothing_to_schedule", got.Err)
	}
}

// TestGangSnapshotRoundTrip: the gang index is rebuilt from a snapshot.
func TestGangSnapshotRoundTrip(t *testing.T) {
	f := placedGang(t)
	l := New()
	if err := l.Restore(strings.NewReader(string(snapshotOf(t, f.l)))); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.gangs["uni-a-1"]; !ok || l.Hash() != f.l.Hash() {
		t.Fatalf("gang index %v, hash equal %v", l.gangs, l.Hash() == f.l.Hash())
	}
}

// TestGangRandomSequences drives random commands on a federation whose
// peers compute the passes, with gangs and plain tasks of two
// organisations: every apply keeps the invariants (gangInvariants
// included: a gang is placed whole on one organisation's distinct
// machines, or not at all), and a pass never places part of a gang.
func TestGangRandomSequences(t *testing.T) {
	placed, stoppedWith := 0, 0
	for seed := int64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewSource(seed))
		f := newFed(t)
		r := schedRules("ehosep", 0)
		f.must(registerRules("uni-a", 10_000_000, r, cpuMachine("m1"), cpuMachine("m2"), cpuMachine("m3")))
		f.must(registerRules("uni-b", 10_000_000, r, cpuMachine("x1"), cpuMachine("x2")))
		orgs := []string{"uni-a", "uni-b"}
		do := func(c Command) Result {
			res := f.apply(c)
			for _, tr := range res.Transitions {
				if tr.Reason == "gang_stopped" {
					stoppedWith++
				}
			}
			return res
		}
		now := int64(3000)
		for step := 0; step < 250; step++ {
			now += 100
			org := orgs[rng.Intn(2)]
			switch op := rng.Intn(10); op {
			case 0:
				k := 2 + rng.Intn(2)
				ts := make([]TaskSpec, k)
				for i := range ts {
					ts[i] = gangSpec(k, i)
					ts[i].Spec.CPUs = int64(2 + 2*rng.Intn(2))
				}
				do(submitSpecs(org, now, ts...))
			case 1:
				p := gangSpec(2, 0)
				p.Spec.Gang, p.Spec.CPUs = nil, int64(1+rng.Intn(4))
				do(submitSpecs(org, now, p))
			case 2, 3:
				res := do(trigger(org, now))
				placed += checkGangVerdicts(t, f.l, res)
			default:
				tk := randomTask(rng, f.l)
				if tk == nil {
					continue
				}
				owner := ""
				if tk.Machine != "" {
					owner, _, _ = strings.Cut(tk.Machine, "/")
				}
				switch {
				case op == 4 && tk.State == TaskAssigned:
					do(started(owner, tk.ID, tk.Machine, now))
				case op == 5 && tk.State == TaskRunning:
					do(ended(owner, tk.ID, tk.Machine, now, 1, rng.Intn(3) == 0))
				case op == 6 && tk.Machine != "":
					do(lost(owner, tk.Machine, now))
				case op == 7:
					c := act(tk.Org, now)
					c.CancelTask = &CancelTask{Task: tk.ID}
					do(c)
				case op == 8:
					for _, s := range tk.Segments {
						if s.Outcome == OutcomePreempting || s.Outcome == OutcomeCancelling {
							do(stopped(s.MachineOrg, tk.ID, s.Machine, now, 1, nil))
							break
						}
					}
				default:
					for _, id := range sortedKeys(f.l.machines) {
						if m := f.l.machines[id]; m.State == MachineLost {
							hb := act(m.Org, now)
							hb.Heartbeat = &Heartbeat{Machine: id}
							do(hb)
							break
						}
					}
				}
			}
		}
	}
	if placed < 10 || stoppedWith < 5 {
		t.Fatalf("the sequences placed %d gangs and stopped %d parts with their gang: too few to test them", placed, stoppedWith)
	}
	t.Logf("%d gangs placed, %d parts stopped with their gang", placed, stoppedWith)
}

// randomTask picks a task that has not ended, or nil.
func randomTask(rng *rand.Rand, l *Ledger) *Task {
	var live []*Task
	for _, t := range l.bySeq {
		if !t.State.Terminal() {
			live = append(live, t)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[rng.Intn(len(live))]
}

// checkGangVerdicts: a pass's decisions on a gang's parts are all
// accepted or all refused; it returns the number of gangs placed.
func checkGangVerdicts(t *testing.T, l *Ledger, res Result) int {
	t.Helper()
	byGang := map[string][]bool{}
	for _, d := range res.Decisions {
		if tk := l.tasks[d.Decision.Task]; tk != nil && tk.Spec.Gang != nil {
			byGang[tk.Spec.Gang.ID] = append(byGang[tk.Spec.Gang.ID], d.Err == nil)
		}
	}
	placed := 0
	for id, oks := range byGang {
		tk := l.tasks[id]
		for _, ok := range oks {
			if ok != oks[0] || (ok && len(oks) != tk.Spec.Gang.Size) {
				t.Fatalf("gang %s: verdicts %v for %d parts", id, oks, tk.Spec.Gang.Size)
			}
		}
		if oks[0] {
			placed++
		}
	}
	return placed
}

// TestGangReservedUnderEasy: under the job policy easy, on a federation
// whose peers compute the passes, a waiting gang is the head (LiveBackfill
// plans it as one item of two parts): a task submitted after it that
// would hold a machine past the gang's reservation does not start (the
// trigger decides nothing), the part's pending reason names the
// reservation, and the gang starts whole when the running task ends.
func TestGangReservedUnderEasy(t *testing.T) {
	f := newFed(t)
	f.must(registerRules("uni-a", 1_000_000, schedRules("ehosep", 0), cpuMachine("m1"), cpuMachine("m2")))
	f.must(policyVote("uni-a", "easy"))
	limited := func(ts TaskSpec, ms int64) TaskSpec {
		ts.Spec.WallLimitMs = ms
		return ts
	}
	plain := gangSpec(2, 0)
	plain.Spec.Gang = nil
	f.must(submitSpecs("uni-a", 1000, limited(plain, 60_000)))
	if r := f.must(trigger("uni-a", 2000)); r.AcceptedDecisions() != 1 {
		t.Fatalf("first trigger: %+v", r.Decisions)
	}
	long := taskOf(t, f.l, "uni-a-1")
	f.must(started("uni-a", "uni-a-1", long.Machine, 2100))
	f.must(submitSpecs("uni-a", 3000, limited(gangSpec(2, 0), 10_000), limited(gangSpec(2, 1), 10_000)))
	f.must(submitSpecs("uni-a", 3100, limited(plain, 120_000)))
	if r := f.apply(trigger("uni-a", 4000)); r.Err == nil || r.Err.Code != CodeNothingToSchedule {
		t.Fatalf("trigger while the gang waits: %+v (%v); want nothing_to_schedule: uni-a-4 would delay the gang", r.Decisions, r.Err)
	}
	pending := f.l.Pending()
	if r := pending["uni-a-2"]; r.Code != "gang" || !strings.Contains(r.Detail, "reserved on") || !strings.Contains(r.Detail, "job policy easy") {
		t.Fatalf("the gang's part waits with %+v", r)
	}
	if r := pending["uni-a-4"]; r.Code != policy.PendingJobPolicy {
		t.Fatalf("the task behind the gang waits with %+v", r)
	}
	f.must(ended("uni-a", "uni-a-1", long.Machine, 5000, 5, false))
	r := f.must(trigger("uni-a", 6000))
	if r.AcceptedDecisions() != 2 || taskOf(t, f.l, "uni-a-2").State != TaskAssigned || taskOf(t, f.l, "uni-a-3").State != TaskAssigned {
		t.Fatalf("trigger once the machines are free: %+v", r.Decisions)
	}
	if taskOf(t, f.l, "uni-a-4").State != TaskQueued {
		t.Fatal("uni-a-4 started beside the gang on two 4-CPU machines")
	}
}

// TestGangOwnerClaim: uni-a's gang waits while uni-b's tasks hold both of
// uni-a's machines (uni-a in deficit, uni-b in excess): the pass preempts
// them for the gang (policy.GangFirst, the owner's claim), the ledger
// accepts a part placed by a preemption, the victims go back to the queue
// and stop, and the gang is placed whole. A part that would preempt
// another gang's part is refused, the whole gang with it.
func TestGangOwnerClaim(t *testing.T) {
	f := newFed(t)
	f.must(register("uni-a", 1_000_000, cpuMachine("m1"), cpuMachine("m2")))
	f.must(register("uni-b", 1_000_000, cpuMachine("x1")))
	plain := gangSpec(2, 0)
	plain.Spec.Gang = nil
	f.must(submitSpecs("uni-b", 1000, plain, plain, plain))
	f.must(decide("uni-a", 1100, alloc("uni-b-1", "uni-a/m1"), alloc("uni-b-2", "uni-a/m2"), alloc("uni-b-3", "uni-b/x1")))
	for _, run := range [][3]string{{"uni-a", "uni-b-1", "uni-a/m1"}, {"uni-a", "uni-b-2", "uni-a/m2"}, {"uni-b", "uni-b-3", "uni-b/x1"}} {
		f.must(started(run[0], run[1], run[2], 1200)) // the machine's owner reports
	}
	f.must(submitSpecs("uni-a", 2000, gangSpec(2, 0), gangSpec(2, 1)))
	st, vm := f.l.PolicyView(3000, 0)
	pol, _ := policy.WithJobPolicy(policy.EHOSEP{}, DefaultJobPolicy)
	ds, err := pol.Schedule(st)
	if err != nil {
		t.Fatal(err)
	}
	dd, _ := vm.Decisions(ds)
	if len(dd) != 2 || dd[0].Kind != DecidePreempt || dd[0].Task != "uni-a-1" || dd[0].Victim != "uni-b-1" ||
		dd[1].Kind != DecidePreempt || dd[1].Task != "uni-a-2" || dd[1].Victim != "uni-b-2" {
		t.Fatalf("the pass decides %+v; want the gang preempting uni-b-1 and uni-b-2", dd)
	}
	cmd, err := vm.DecisionsCommand("uni-a", peerOf("uni-a"), 3000, ds)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.must(cmd); r.AcceptedDecisions() != 2 {
		t.Fatalf("refused: %+v", r.Decisions)
	}
	for id, want := range map[string]TaskState{"uni-a-1": TaskAssigned, "uni-a-2": TaskAssigned, "uni-b-1": TaskQueued, "uni-b-2": TaskQueued, "uni-b-3": TaskRunning} {
		if got := taskOf(t, f.l, id).State; got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
	// uni-b's gang-less x1 runs uni-b-3; a decision of another gang taking
	// a placed part as victim is refused whole.
	f.must(submitSpecs("uni-b", 4000, gangSpec(2, 0), gangSpec(2, 1)))
	r := f.must(decide("uni-a", 4100, preempt("uni-b-4", "uni-a/m1", "uni-a-1"), preempt("uni-b-5", "uni-b/x1", "uni-b-3")))
	for _, d := range r.Decisions {
		if d.Err == nil || d.Err.Code != CodeGangIncomplete || !strings.Contains(d.Err.Msg, "a gang preempts only single tasks") {
			t.Fatalf("a gang preempting another's part: %+v", r.Decisions)
		}
	}
	if taskOf(t, f.l, "uni-a-1").State != TaskAssigned || taskOf(t, f.l, "uni-b-3").State != TaskRunning {
		t.Fatal("a refused gang changed the state")
	}
}
