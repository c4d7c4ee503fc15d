package ledger

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// retained is a federation with a retention rule: uni-a (m1, m2) and
// uni-b (x1), rules simulated with ret. uni-a-1 ran on uni-b/x1 and is
// done (ended at 30 s, 500 mJ), uni-a-2 ran on uni-a/m1 and failed (at
// 31 s, 200 mJ), uni-a-3 was cancelled while queued (at 32 s), uni-b-1
// ran on uni-a/m2 and is done (at 33 s, 300 mJ); uni-b-2 is still queued.
func retained(t testing.TB, ret *Retention) *fed {
	f := newFed(t)
	c := register("uni-a", 300_000, mspec("m1", 1000, 100_000), mspec("m2", 2000, 150_000))
	c.RegisterOrg.Rules = &Rules{Executors: ExecutorsSimulated, Retention: ret}
	f.must(c)
	c = register("uni-b", 200_000, mspec("x1", 1500, 120_000))
	c.RegisterOrg.Rules = &Rules{Executors: ExecutorsSimulated}
	f.must(c)
	f.must(submit("uni-a", 2000, 10_000, 20_000, 30_000))
	f.must(submit("uni-b", 2100, 15_000, 5_000))
	f.must(decide("uni-a", 3000, alloc("uni-a-1", "uni-b/x1"), alloc("uni-a-2", "uni-a/m1"), alloc("uni-b-1", "uni-a/m2")))
	f.must(started("uni-b", "uni-a-1", "uni-b/x1", 4000))
	f.must(started("uni-a", "uni-a-2", "uni-a/m1", 4000))
	f.must(started("uni-a", "uni-b-1", "uni-a/m2", 4000))
	f.must(ended("uni-b", "uni-a-1", "uni-b/x1", 30_000, 500, false))
	f.must(ended("uni-a", "uni-a-2", "uni-a/m1", 31_000, 200, true))
	cancel := act("uni-a", 32_000)
	cancel.CancelTask = &CancelTask{Task: "uni-a-3"}
	f.must(cancel)
	f.must(ended("uni-a", "uni-b-1", "uni-a/m2", 33_000, 300, false))
	return f
}

func forget(at int64, ids ...string) Command {
	c := act("uni-a", at)
	c.V = 2 // forget_tasks is a version-2 kind
	c.ForgetTasks = &ForgetTasks{Tasks: ids}
	return c
}

func energies(l *Ledger) map[string]Energy {
	out := map[string]Energy{}
	for _, o := range l.Orgs() {
		out[o.Name] = o.Energy
	}
	return out
}

// TestForgetTasks: tasks past the retention leave the state; every
// organisation's energy stays what it was, the invariants (which add the
// forgotten totals to the live segments) hold, the records come back in
// the Result, and a snapshot and a replay of the log agree.
func TestForgetTasks(t *testing.T) {
	f := retained(t, &Retention{AfterMs: 10_000})
	before := energies(f.l)
	r := f.must(forget(45_000, "uni-a-1", "uni-a-3", "uni-b-1"))
	if len(r.Forgotten) != 3 || r.Forgotten[0].ID != "uni-a-1" || r.Forgotten[0].State != TaskDone || len(r.Forgotten[0].Segments) != 1 {
		t.Fatalf("forgotten records %+v", r.Forgotten)
	}
	for _, id := range []string{"uni-a-1", "uni-a-3", "uni-b-1"} {
		if _, ok := f.l.Task(id); ok {
			t.Errorf("%s still in the state", id)
		}
	}
	if got := f.l.Tasks(TaskFilter{}); len(got) != 2 || got[0].ID != "uni-a-2" || got[1].ID != "uni-b-2" {
		t.Fatalf("tasks left %v", ids(got))
	}
	if after := energies(f.l); !mapsEqual(before, after) {
		t.Fatalf("energy changed: %+v → %+v", before, after)
	}
	if got := f.l.Forgotten("uni-a"); got.Tasks != 2 || got.Energy != (Energy{UserMilliJ: 500, OwnerSelfMilliJ: 0, OwnerOthersMilliJ: 300}) {
		t.Fatalf("uni-a forgotten %+v", got)
	}
	if got := f.l.Forgotten("uni-b"); got.Tasks != 1 || got.Energy != (Energy{UserMilliJ: 300, OwnerOthersMilliJ: 500}) {
		t.Fatalf("uni-b forgotten %+v", got)
	}
	// A snapshot carries the totals and restores to the same hash.
	snap := snapshotOf(t, f.l)
	l2 := New()
	if err := l2.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if l2.Hash() != f.l.Hash() || !mapsEqual(energies(l2), before) {
		t.Fatalf("restored hash %s, want %s", l2.Hash(), f.l.Hash())
	}
	// Every peer replaying the log reaches the same state.
	l3 := New()
	for i, e := range f.log {
		l3.Apply(uint64(i+1), e)
	}
	if l3.Hash() != f.l.Hash() {
		t.Fatalf("replay hash %s, want %s", l3.Hash(), f.l.Hash())
	}
	// Forgotten tasks are not known any more.
	c := act("uni-a", 50_000)
	c.RetryTask = &RetryTask{Task: "uni-a-3"}
	if r := f.apply(c); r.Err == nil || r.Err.Code != CodeUnknownTask {
		t.Fatalf("retry of a forgotten task: %v", r.Err)
	}
}

func ids(ts []Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func mapsEqual(a, b map[string]Energy) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestForgetTasksRefused: every bad forget_tasks is refused whole, with
// its code, and leaves the state (hash) as it was.
func TestForgetTasksRefused(t *testing.T) {
	running := func(f *fed) {
		f.must(decide("uni-a", 34_000, alloc("uni-b-2", "uni-b/x1")))
		f.must(started("uni-b", "uni-b-2", "uni-b/x1", 34_500))
	}
	for _, tc := range []struct {
		name  string
		ret   *Retention
		setup func(*fed)
		cmd   Command
		code  Code
	}{
		{"no retention rule", nil, nil, forget(99_000, "uni-a-1"), CodeRetention},
		{"too young", &Retention{AfterMs: 10_000}, nil, forget(40_500, "uni-a-1", "uni-b-1"), CodeRetention},
		{"one of them too young", &Retention{AfterMs: 10_000}, nil, forget(41_500, "uni-a-1", "uni-b-1"), CodeRetention},
		{"below the count kept", &Retention{Keep: 3}, nil, forget(40_000, "uni-a-1", "uni-a-2"), CodeRetention},
		{"queued", &Retention{AfterMs: 1}, nil, forget(99_000, "uni-b-2"), CodeBadState},
		{"running", &Retention{AfterMs: 1}, running, forget(99_000, "uni-b-2"), CodeBadState},
		{"cancelled, its stop not reported", &Retention{AfterMs: 1}, func(f *fed) {
			running(f)
			c := act("uni-b", 35_000)
			c.CancelTask = &CancelTask{Task: "uni-b-2"}
			f.must(c)
		}, forget(99_000, "uni-b-2"), CodeBadState},
		{"unknown task", &Retention{AfterMs: 1}, nil, forget(99_000, "uni-a-1", "uni-a-9"), CodeUnknownTask},
		{"forgotten twice", &Retention{AfterMs: 1}, func(f *fed) { f.must(forget(99_000, "uni-a-1")) }, forget(99_000, "uni-a-1"), CodeUnknownTask},
		{"not the acting peer", &Retention{AfterMs: 1}, nil, func() Command {
			c := forget(99_000, "uni-a-1")
			c.Peer = peerOf("uni-b")
			return c
		}(), CodeNotOwner},
		{"no tasks", &Retention{AfterMs: 1}, nil, forget(99_000), CodeMalformed},
		{"a task twice", &Retention{AfterMs: 1}, nil, forget(99_000, "uni-a-1", "uni-a-1"), CodeMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := retained(t, tc.ret)
			if tc.setup != nil {
				tc.setup(f)
			}
			h, n := f.l.Hash(), len(f.l.Tasks(TaskFilter{}))
			if err := f.l.Check(&tc.cmd); err == nil || err.Code != tc.code {
				t.Fatalf("Check: %v, want %s", err, tc.code)
			}
			r := f.apply(tc.cmd)
			if r.Err == nil || r.Err.Code != tc.code {
				t.Fatalf("Apply: %v, want %s", r.Err, tc.code)
			}
			if f.l.Hash() != h || len(f.l.Tasks(TaskFilter{})) != n || len(r.Forgotten) != 0 {
				t.Fatalf("a refused forget changed the state")
			}
		})
	}
}

// TestForgetByCount: with Keep, the oldest terminal tasks may go down to
// Keep, whatever their age; Forgettable proposes exactly those.
func TestForgetByCount(t *testing.T) {
	f := retained(t, &Retention{Keep: 2})
	if got := f.l.Forgettable(33_000, 100); !slices.Equal(got, []string{"uni-a-1", "uni-a-2"}) {
		t.Fatalf("Forgettable %v, want the two earliest ended", got)
	}
	if got := f.l.Forgettable(33_000, 1); !slices.Equal(got, []string{"uni-a-1"}) {
		t.Fatalf("Forgettable with max 1: %v", got)
	}
	f.must(forget(33_000, f.l.Forgettable(33_000, 100)...))
	if got := f.l.Forgettable(99_000, 100); len(got) != 0 {
		t.Fatalf("Forgettable at Keep: %v", got)
	}
}

// TestForgettableByTime: the time rule proposes the tasks ended at least
// AfterMs before now, earliest ended first, and the proposal applies.
func TestForgettableByTime(t *testing.T) {
	f := retained(t, &Retention{AfterMs: 10_000})
	if got := f.l.Forgettable(41_000, 100); !slices.Equal(got, []string{"uni-a-1", "uni-a-2"}) {
		t.Fatalf("Forgettable %v", got)
	}
	f.must(forget(41_000, f.l.Forgettable(41_000, 100)...))
	if got := f.l.Forgettable(50_000, 100); !slices.Equal(got, []string{"uni-a-3", "uni-b-1"}) {
		t.Fatalf("Forgettable later %v", got)
	}
	if got := New().Forgettable(50_000, 100); got != nil {
		t.Fatalf("Forgettable without rules: %v", got)
	}
}

// TestForgottenReplayGuard: a keyed submit whose tasks were forgotten is
// still recognised when resent (the original IDs, nothing queued).
func TestForgottenReplayGuard(t *testing.T) {
	f := retained(t, &Retention{AfterMs: 1})
	c := submit("uni-a", 40_000, 1000)
	c.SubmitTasks.RequestID = "req-1"
	id := f.must(c).TaskIDs[0]
	cancel := act("uni-a", 41_000)
	cancel.CancelTask = &CancelTask{Task: id}
	f.must(cancel)
	f.must(forget(50_000, id))
	c.AtMs = 51_000
	r := f.must(c)
	if !r.Replayed || r.TaskIDs[0] != id {
		t.Fatalf("resend after forgetting: %+v", r)
	}
}

// TestRetentionRuleIsKept: the first registration's retention is the
// federation's and reads back; a snapshot of a federation without one is
// byte for byte as before (no forgotten field).
func TestRetentionRuleIsKept(t *testing.T) {
	f := retained(t, &Retention{AfterMs: 5000, Keep: 7})
	r, ok := f.l.Rules()
	if !ok || r.Retention == nil || *r.Retention != (Retention{AfterMs: 5000, Keep: 7}) {
		t.Fatalf("rules %+v", r)
	}
	if bytes.Contains(snapshotOf(t, base(t).l), []byte("forgotten")) {
		t.Fatal("a snapshot without forgotten tasks names them")
	}
}

// TestForgottenGolden pins what a forget leaves in the snapshot and the
// hash (issue 17): a later change to the encoding of the forgotten totals
// would make old snapshots fail their own hash check. Generated by the
// first encoder; do not regenerate.
func TestForgottenGolden(t *testing.T) {
	f := retained(t, &Retention{AfterMs: 10_000})
	f.must(forget(45_000, "uni-a-1", "uni-a-3", "uni-b-1"))
	const (
		fragment = `"forgotten":{"uni-a":{"tasks":2,"energy":{"user_mj":500,"owner_self_mj":0,"owner_others_mj":300}},"uni-b":{"tasks":1,"energy":{"user_mj":300,"owner_self_mj":0,"owner_others_mj":500}}}`
		hash     = "84654a4ab6065e44f86d2eb57f14e035162b290391d99073155a6c463500f690"
	)
	snap := string(snapshotOf(t, f.l))
	if !strings.Contains(snap, fragment) {
		t.Errorf("the snapshot does not hold %s:\n%s", fragment, snap)
	}
	if got := f.l.Hash(); got != hash {
		t.Errorf("hash %s, want %s", got, hash)
	}
}
