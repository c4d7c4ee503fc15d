package ledger

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// Tests of the schedule trigger (schedule.go): every peer computes the
// pass itself, so a trigger's decisions are the federation's policy's on
// the view at the trigger's time, and a leader cannot choose them.

func schedRules(pol string, block int64) *Rules {
	return &Rules{Executors: ExecutorsSimulated, Scheduling: &Scheduling{Policy: pol, CheckpointBlockMs: block}}
}

func trigger(org string, at int64) Command {
	c := act(org, at)
	c.Schedule = &Schedule{}
	return c
}

// schedFed is base's federation under scheduling rules: uni-a owns m1 and
// m2, uni-b x1; uni-a-1..3 and uni-b-1..2 are queued.
func schedFed(t testing.TB, r *Rules) *fed {
	t.Helper()
	f := newFed(t)
	f.must(registerRules("uni-a", 300_000, r, mspec("m1", 1000, 100_000), mspec("m2", 2000, 150_000)))
	f.must(registerRules("uni-b", 200_000, r, mspec("x1", 1500, 120_000)))
	f.must(submit("uni-a", 2000, 10_000, 20_000, 30_000))
	f.must(submit("uni-b", 2100, 15_000, 5_000))
	return f
}

// expectedPass is what the named policy decides on l's view at nowMs,
// computed here without the ledger's pass.
func expectedPass(t *testing.T, l *Ledger, name string, nowMs, blockMs int64) []Decision {
	t.Helper()
	pol, err := policy.New(name)
	if err != nil {
		t.Fatal(err)
	}
	st, vm := l.PolicyView(nowMs, float64(blockMs)/1000)
	pds, err := pol.Schedule(st)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	ds, err := vm.Decisions(pds)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func decisionsOf(r Result) []Decision {
	out := make([]Decision, len(r.Decisions))
	for i, d := range r.Decisions {
		out[i] = d.Decision
	}
	return out
}

// TestScheduleTriggerRunsTheFederationsPolicy: on a federation of each
// policy, a trigger applies what that policy decides on the view at the
// trigger's time, every decision accepted, with the changes the same
// decisions make as a decisions batch on a federation whose leader
// decides.
func TestScheduleTriggerRunsTheFederationsPolicy(t *testing.T) {
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			f := schedFed(t, schedRules(name, 300_000))
			want := expectedPass(t, f.l, name, 5000, 300_000)
			if len(want) == 0 {
				t.Fatal("the policy decides nothing: the test proves nothing")
			}
			r := f.must(trigger("uni-b", 5000))
			if got := decisionsOf(r); !reflect.DeepEqual(got, want) {
				t.Fatalf("trigger decided %+v, the policy %+v", got, want)
			}
			if r.AcceptedDecisions() != len(want) {
				t.Fatalf("%d of %d decisions accepted: %+v", r.AcceptedDecisions(), len(want), r.Decisions)
			}
			// The same decisions as a batch, where the leader decides.
			old := schedFed(t, &Rules{Executors: ExecutorsSimulated})
			rb := old.must(decide("uni-b", 5000, want...))
			if !reflect.DeepEqual(r.Decisions, rb.Decisions) || !reflect.DeepEqual(r.Changes, rb.Changes) {
				t.Fatalf("trigger %+v / %+v, batch %+v / %+v", r.Decisions, r.Changes, rb.Decisions, rb.Changes)
			}
			if got, want := placementOf(f.l), placementOf(old.l); !reflect.DeepEqual(got, want) {
				t.Fatalf("placement %v, batch's %v", got, want)
			}
		})
	}
}

func placementOf(l *Ledger) map[string]string {
	out := map[string]string{}
	for _, tk := range l.Tasks(TaskFilter{States: []TaskState{TaskAssigned, TaskRunning}}) {
		out[tk.ID] = tk.Machine
	}
	return out
}

// TestScheduleRefusals: each refusal has its code, changes nothing (the
// hash and the last trigger's time), and the leader's dry run (Check)
// gives the same verdict.
func TestScheduleRefusals(t *testing.T) {
	withTrigger := func(t testing.TB) *fed {
		f := schedFed(t, schedRules("ehosep", 300_000))
		f.must(trigger("uni-a", 5000))
		return f
	}
	for _, tc := range []struct {
		name string
		fed  func(testing.TB) *fed
		cmd  Command
		code Code
	}{
		{"decisions where peers decide", withTrigger,
			decide("uni-a", 6000, alloc("uni-a-3", "uni-b/x1")), CodeSchedulingMode},
		{"empty decisions where peers decide", withTrigger,
			decide("uni-a", 6000), CodeSchedulingMode},
		{"trigger without rules", base, trigger("uni-a", 5000), CodeSchedulingMode},
		{"trigger under rules without scheduling", func(t testing.TB) *fed { return schedFed(t, liveRules) },
			trigger("uni-a", 5000), CodeSchedulingMode},
		{"time before the last trigger", withTrigger, trigger("uni-a", 4999), CodeClockBackwards},
		{"nothing to decide", withTrigger, trigger("uni-a", 6000), CodeNothingToSchedule},
		{"unknown organisation", withTrigger, trigger("uni-z", 6000), CodeUnknownOrg},
		{"another organisation's peer", withTrigger, func() Command {
			c := trigger("uni-a", 6000)
			c.Peer = peerOf("uni-b")
			return c
		}(), CodeNotOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fed(t)
			before, last := f.l.Hash(), f.l.ScheduledAtMs()
			checked := f.l.Check(&tc.cmd)
			r := f.apply(tc.cmd)
			if r.Err == nil || r.Err.Code != tc.code {
				t.Fatalf("%v, want %s", r.Err, tc.code)
			}
			if checked == nil || *checked != *r.Err {
				t.Fatalf("Check said %v, Apply %v", checked, r.Err)
			}
			if f.l.Hash() != before || f.l.ScheduledAtMs() != last || r.Decisions != nil || r.Changes != nil {
				t.Fatalf("a refused command changed the state: %+v", r)
			}
		})
	}
}

// TestScheduleTimeIsMonotonic: a trigger may repeat the last trigger's
// time but not go before it, and a snapshot carries that time.
func TestScheduleTimeIsMonotonic(t *testing.T) {
	f := schedFed(t, schedRules("ehosep", 300_000))
	f.must(trigger("uni-a", 5000))
	if f.l.ScheduledAtMs() != 5000 {
		t.Fatalf("last trigger at %d", f.l.ScheduledAtMs())
	}
	f.must(submit("uni-b", 5000, 1000))
	// A machine frees up: the next pass has something to decide.
	as := f.l.Allocations("uni-a")
	if len(as) == 0 {
		t.Fatal("the first pass placed nothing on uni-a's machines")
	}
	f.must(ended("uni-a", as[0].Task.ID, as[0].Machine.ID, 5000, 0, true))
	// The same time again is not the past.
	if r := f.must(trigger("uni-a", 5000)); r.AcceptedDecisions() == 0 {
		t.Fatalf("second pass decided nothing: %+v", r)
	}
	// Restored from a snapshot, the ledger still refuses the past, and
	// holds the same state.
	l := New()
	if err := l.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
		t.Fatal(err)
	}
	if l.ScheduledAtMs() != 5000 || l.Hash() != f.l.Hash() {
		t.Fatalf("restored: last trigger %d, hash %.12s (want %.12s)", l.ScheduledAtMs(), l.Hash(), f.l.Hash())
	}
	c := trigger("uni-a", 4000)
	if err := l.Check(&c); err == nil || err.Code != CodeClockBackwards {
		t.Fatalf("restored ledger: %v, want clock_backwards", err)
	}
}

// TestSchedulingSettingsFixedByFirstRegistration: the first registration
// fixes the settings ("" is the default policy); a later one cannot
// change them; bad settings are malformed.
func TestSchedulingSettingsFixedByFirstRegistration(t *testing.T) {
	f := newFed(t)
	f.must(registerRules("uni-a", 1, schedRules("", 60_000)))
	f.must(registerRules("uni-b", 1, schedRules("osep", 0)))
	s, ok := f.l.SchedulingSettings()
	if !ok || s != (Scheduling{Policy: DefaultSchedulingPolicy, CheckpointBlockMs: 60_000}) {
		t.Fatalf("settings %+v (%v)", s, ok)
	}
	// Accessors return copies.
	r, _ := f.l.Rules()
	r.Scheduling.Policy = "osep"
	if s, _ := f.l.SchedulingSettings(); s.Policy != DefaultSchedulingPolicy {
		t.Fatal("Rules shares the settings")
	}
	for _, bad := range []*Scheduling{{Policy: "fifo"}, {CheckpointBlockMs: -1}, {CheckpointBlockMs: MaxCheckpointBlockMs + 1}} {
		c := registerRules("uni-c", 1, &Rules{Executors: ExecutorsSimulated, Scheduling: bad})
		if _, err := EncodeCommand(c); CodeOf(err) != CodeMalformed {
			t.Errorf("%+v: %v, want malformed", bad, err)
		}
	}
}

// TestOldLogsStillDecide: on federations without scheduling settings (no
// rules, or rules from before the settings) a decisions batch applies as
// it always did.
func TestOldLogsStillDecide(t *testing.T) {
	for name, r := range map[string]*Rules{"no rules": nil, "rules without scheduling": liveRules} {
		t.Run(name, func(t *testing.T) {
			f := schedFed(t, r)
			res := f.must(decide("uni-b", 2500, alloc("uni-a-1", "uni-a/m1"), alloc("uni-b-1", "uni-b/x1")))
			if res.AcceptedDecisions() != 2 {
				t.Fatalf("%+v", res.Decisions)
			}
			if _, ok := f.l.SchedulingSettings(); ok || f.l.ScheduledAtMs() != 0 {
				t.Fatal("an old federation has scheduling settings")
			}
		})
	}
}

// TestScheduledRunToCompletion drives a federation to completion the way
// its peers do when they compute the passes: the leader appends a trigger
// whenever its own pass (SchedulingPass) decides something; machine owners
// start, checkpoint, end and report stops. Every trigger's decisions are
// EHOSEP's on the view at its time, computed independently, and a second
// ledger fed the same log agrees on the hash at every index.
func TestScheduledRunToCompletion(t *testing.T) {
	f := newFed(t)
	apply := mirroredApply(t, f)
	driveFederation(apply, schedRules("ehosep", 5000))
	runs := map[string]*runState{}
	var now int64
	triggers, preempted := 0, 0
	for round := 0; round < 2000; round++ {
		now += 1000
		if now == 20_000 {
			apply(submit("u3", now, driveSizes(6, 30_000)...))
		}
		executors(t, f, apply, runs, now, driveOrgs)
		// The leader (u1's peer) learns whether a pass decides anything.
		p, perr := f.l.SchedulingPass(now)
		if perr != nil {
			t.Fatal(perr)
		}
		ds, perr := p.Decide()
		if perr != nil {
			t.Fatal(perr)
		}
		if len(ds) > 0 {
			want := expectedPass(t, f.l, "ehosep", now, 5000)
			r := apply(trigger("u1", now))
			triggers++
			if got := decisionsOf(r); !reflect.DeepEqual(got, want) || !reflect.DeepEqual(got, ds) {
				t.Fatalf("round %d: trigger decided %+v, EHOSEP %+v, the leader's pass %+v", round, got, want, ds)
			}
			for i, d := range r.Decisions {
				if d.Err != nil {
					t.Fatalf("round %d: decision %d (%+v) rejected: %v", round, i, d.Decision, d.Err)
				}
				if d.Decision.Kind == DecidePreempt {
					preempted++
				}
			}
		}
		if len(f.l.Tasks(TaskFilter{States: []TaskState{TaskQueued, TaskAssigned, TaskRunning}})) == 0 && now > 20_000 {
			break
		}
	}
	for _, tk := range f.l.Tasks(TaskFilter{}) {
		if tk.State != TaskDone {
			t.Fatalf("task %s ended %s", tk.ID, tk.State)
		}
	}
	if preempted == 0 {
		t.Fatal("no preemption: the scenario did not exercise it")
	}
	t.Logf("finished at %d ms: %d triggers, %d preemptions", now, triggers, preempted)
}

// TestRandomScheduledSequences: random commands on a federation whose peers
// compute the passes (triggers mixed with refused decisions batches, stale
// trigger times, identity errors, corrupted bytes): the invariants hold
// after every entry, a refusal leaves the hash unchanged, every decision of
// an applied trigger holds (the pass is computed on the very state it
// applies to), snapshots restore to the same hash, and a replay agrees at
// every index.
func TestRandomScheduledSequences(t *testing.T) {
	steps := 2000
	if testing.Short() {
		steps = 500
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[Code]int{}
	triggers, placed := 0, 0
	for _, seed := range []uint64{5, 6} {
		f := newFed(t)
		g := &gen{r: rand.New(rand.NewPCG(seed, 99)), l: f.l, now: 1_000_000, pol: pol, sched: true}
		var hashes []string
		before := f.l.Hash()
		for i := 0; i < steps; i++ {
			r := f.raw(g.encode(g.command()))
			after := f.l.Hash()
			if !r.Applied() {
				rejected[r.Err.Code]++
				if after != before {
					t.Fatalf("seed %d step %d: rejected %s (%v) changed the hash", seed, i, r.Kind, r.Err)
				}
			} else if r.Kind == KindSchedule {
				triggers++
				for _, d := range r.Decisions {
					if d.Err != nil {
						t.Fatalf("seed %d step %d: a trigger's decision %+v refused: %v", seed, i, d.Decision, d.Err)
					}
					placed++
				}
			}
			hashes = append(hashes, after)
			before = after
			if i%5 == 0 {
				checkKeptPass(t, f.l, g.now+int64(i))
			}
			if i%250 == 249 {
				nl := New()
				if err := nl.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
					t.Fatalf("seed %d step %d: restore: %v", seed, i, err)
				}
				if nl.Hash() != after || nl.ScheduledAtMs() != f.l.ScheduledAtMs() {
					t.Fatalf("seed %d step %d: restored hash %s, want %s", seed, i, nl.Hash(), after)
				}
			}
		}
		replay := New()
		for i, b := range f.log {
			replay.Apply(uint64(i+1), b)
			if h := replay.Hash(); h != hashes[i] {
				t.Fatalf("seed %d: replay diverges at index %d", seed, i+1)
			}
		}
	}
	t.Logf("%d triggers applied, %d decisions; rejected %v", triggers, placed, rejected)
	if triggers == 0 || placed == 0 {
		t.Fatal("no trigger placed anything: the sequences prove nothing")
	}
	for _, c := range []Code{CodeSchedulingMode, CodeClockBackwards, CodeNothingToSchedule} {
		if rejected[c] == 0 {
			t.Errorf("the random sequences never produced a %s rejection", c)
		}
	}
}

// checkKeptPass: the pass on the kept queue (what Apply runs) decides
// what the pass on the listed queued tasks decides, and Placeable says
// whether it decides anything.
func checkKeptPass(t *testing.T, l *Ledger, nowMs int64) {
	t.Helper()
	if _, ok := l.SchedulingSettings(); !ok {
		return
	}
	nowMs = max(nowMs, l.ScheduledAtMs())
	listed, err := l.SchedulingPass(nowMs)
	if err != nil {
		t.Fatal(err)
	}
	want, err := listed.Decide()
	if err != nil {
		t.Fatal(err)
	}
	kept, err := l.schedulingPass(nowMs, true)
	if err != nil {
		t.Fatal(err)
	}
	if kept.state.Queue == nil && l.queue != nil {
		t.Fatal("the ledger keeps a queue but its pass lists the tasks")
	}
	got, err := kept.Decide()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("at %d ms: the pass on the kept queue decides %+v (%v), on the listed tasks %+v", nowMs, got, err, want)
	}
	queued, placeable, err := l.Placeable(nowMs)
	if err != nil || placeable != (len(want) > 0) || queued != listed.Queued() {
		t.Fatalf("at %d ms: Placeable = %d, %v, %v; the pass decides %d of %d queued", nowMs, queued, placeable, err, len(want), listed.Queued())
	}
}
