package ledger

import (
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// Tests of the executor rules (issue 15, plausible.go): each rule refuses
// what it must with CodeImplausible and the hash unchanged, accepts what
// is plausible, and none applies on a federation without rules.

func registerRules(org string, lim int64, r *Rules, ms ...MachineSpec) Command {
	c := register(org, lim, ms...)
	c.RegisterOrg.Rules = r
	return c
}

func endedFrom(org, task, machine string, at, mj int64, src EnergySource, failed bool) Command {
	c := ended(org, task, machine, at, mj, failed)
	c.TaskEnded.Source = src
	return c
}

func stoppedFrom(org, task, machine string, at, mj int64, src EnergySource, ck *CheckpointData) Command {
	c := stopped(org, task, machine, at, mj, ck)
	c.TaskStopped.Source = src
	return c
}

// The run under test: uni-a-1, 10⁷ MFlop, runs on uni-a/m1 (1,000 MFLOPS,
// 100 W) from startMs. At the declared speed it needs 10⁴ s; the time rule
// accepts a done report after 10⁴ s / 4 − 60 s = 2,440 s.
const (
	runSize  = 10_000_000
	startMs  = 10_000
	minDone  = 2_440_000 // ms after the start
	runBusy  = 100_000   // mW
	runSpeed = 1000      // MFLOPS
)

// energyLimit is the most a run of d ms on m1 may report.
func energyLimit(d int64) int64 { return runBusy * (d + PlausibleSlackMs) / 1000 * 3 / 2 }

// runningFed is a federation under rules (nil: none) where uni-a-1 runs on
// uni-a/m1 and uni-a-2 on uni-b's machine uni-b/x1; uni-b-1 is queued.
func runningFed(t testing.TB, r *Rules) *fed {
	t.Helper()
	f := newFed(t)
	f.must(registerRules("uni-a", 1_000_000, r, mspec("m1", runSpeed, runBusy), mspec("m2", 2000, 150_000)))
	f.must(registerRules("uni-b", 1_000_000, r, mspec("x1", 1500, 120_000)))
	f.must(submit("uni-a", 2000, runSize, runSize))
	f.must(submit("uni-b", 2000, runSize))
	f.must(decide("uni-a", 3000, alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-b/x1")))
	f.must(started("uni-a", "uni-a-1", "uni-a/m1", startMs))
	f.must(started("uni-b", "uni-a-2", "uni-b/x1", startMs))
	return f
}

var (
	liveRules = &Rules{Executors: ExecutorsLive}
	simRules  = &Rules{Executors: ExecutorsSimulated}
)

// TestReportPlausibility: one report after the running federation, refused
// with CodeImplausible (and nothing changed) or accepted.
func TestReportPlausibility(t *testing.T) {
	const gj10 = MaxSegmentMilliJ // 10 GJ
	for _, tc := range []struct {
		name  string
		rules *Rules
		cmd   Command
		// refuse is a fragment of the refusal's message; "" = accepted.
		refuse string
	}{
		{"1 PFlop-scale run done in 8 s", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, 1, EnergyRAPL, false), "done after 8000 ms"},
		{"done just before the time margin", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+minDone-1, 1, EnergyRAPL, false), "take at least 2440000 ms"},
		{"done at the time margin", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+minDone, 1, EnergyRAPL, false), ""},
		{"done at the declared speed with the declared energy", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10_000_000, runBusy*10_000, EnergyRAPL, false), ""},
		{"10 GJ of rapl energy", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10_000_000, gj10, EnergyRAPL, false), "is more than"},
		{"energy at the margin", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10_000_000, energyLimit(10_000_000), EnergyRAPL, false), ""},
		{"energy just over the margin", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10_000_000, energyLimit(10_000_000)+1, EnergyRAPL, false), "is more than"},
		{"a short run with the slack's energy", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10, energyLimit(10), EnergyDeclared, true), ""},
		{"a failure may come early", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, 1, EnergyRAPL, true), ""},
		{"a failure with absurd energy", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, gj10, EnergyRAPL, true), "is more than"},
		{"simulated energy on a live federation", liveRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10_000_000, 1, EnergySimulated, false), "simulated energy on a live federation"},
		{"simulated stop on a live federation", liveRules,
			stoppedAfterCancel("uni-a-1", "uni-a/m1", startMs+9000, 1, EnergySimulated), "simulated energy"},
		{"stop with 10 GJ", liveRules,
			stoppedAfterCancel("uni-a-1", "uni-a/m1", startMs+9000, gj10, EnergyRAPL), "is more than"},
		{"stop with the declared estimate", liveRules,
			stoppedAfterCancel("uni-a-1", "uni-a/m1", startMs+9000, runBusy*9, EnergyDeclared), ""},
		{"the machine owner ends another organisation's run with 10 GJ", liveRules,
			endedFrom("uni-b", "uni-a-2", "uni-b/x1", startMs+60_000, gj10, EnergyRAPL, false), "is more than"},
		{"simulated runs on a simulated federation are exempt", simRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, gj10, EnergySimulated, false), ""},
		{"rapl on a simulated federation is checked", simRules,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, gj10, EnergyRAPL, false), "is more than"},
		{"no rules: done in 8 s with 10 GJ, as before", nil,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, gj10, EnergyRAPL, false), ""},
		{"no rules: simulated energy, as before", nil,
			endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, 1, EnergySimulated, false), ""},
		{"a checkpoint saving 90 % after 1 s", liveRules,
			ckpt("uni-a", "uni-a-1", "uni-a/m1", startMs+1000, runSize*9/10), "a checkpoint saving 9000000 MFlop"},
		{"a checkpoint within the margin", liveRules,
			ckpt("uni-a", "uni-a-1", "uni-a/m1", startMs+1000, runSpeed*SpeedMargin*61), ""},
		{"a checkpoint just over the margin", liveRules,
			ckpt("uni-a", "uni-a-1", "uni-a/m1", startMs+1000, runSpeed*SpeedMargin*61+1), "allow at most 244000"},
		{"a simulated federation's checkpoints are not checked", simRules,
			ckpt("uni-a", "uni-a-1", "uni-a/m1", startMs+1000, runSize*9/10), ""},
		{"a forged item in a batch", liveRules,
			batch("uni-b", startMs+60_000, Report{TaskEnded: endedFrom("uni-b", "uni-a-2", "uni-b/x1", 0, gj10, EnergyRAPL, false).TaskEnded}), "is more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := runningFed(t, tc.rules)
			if tc.cmd.TaskStopped != nil {
				f.must(cancel("uni-a", "uni-a-1", startMs+5000))
			}
			before := f.l.Hash()
			r := f.apply(tc.cmd)
			err := r.Err
			if r.Err == nil && len(r.Reports) == 1 {
				err = r.Reports[0].Err
			}
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || err.Code != CodeImplausible || !strings.Contains(err.Msg, tc.refuse) {
				t.Fatalf("got %v, want implausible: …%s…", err, tc.refuse)
			}
			if f.l.Hash() != before {
				t.Fatal("a refused report changed the state")
			}
		})
	}
}

func stoppedAfterCancel(task, machine string, at, mj int64, src EnergySource) Command {
	return stoppedFrom("uni-a", task, machine, at, mj, src, nil)
}

func cancel(org, task string, at int64) Command {
	c := act(org, at)
	c.CancelTask = &CancelTask{Task: task}
	return c
}

func batch(org string, at int64, items ...Report) Command {
	c := act(org, at)
	c.Reports = &Reports{Items: items}
	return c
}

// TestTenPetaflopTasksInEightSeconds: the report, ten tasks of
// 1 PFlop (10⁹ MFlop) "done" in 8 s at 0.001 J on a live federation, is
// refused item by item; the hash does not move, the tasks still run.
func TestTenPetaflopTasksInEightSeconds(t *testing.T) {
	f := newFed(t)
	var ms []MachineSpec
	var ds []Decision
	for i := range 10 {
		ms = append(ms, mspec("m"+string(rune('0'+i)), 10_000, 100_000))
	}
	f.must(registerRules("uni-a", 10_000_000, liveRules, ms...))
	sizes := make([]int64, 10)
	for i := range sizes {
		sizes[i] = 1_000_000_000
	}
	ids := f.must(submit("uni-a", 2000, sizes...)).TaskIDs
	var starts, ends []Report
	for i, id := range ids {
		m := "uni-a/m" + string(rune('0'+i))
		ds = append(ds, alloc(id, m))
		starts = append(starts, Report{TaskStarted: &TaskStarted{Task: id, Machine: m}})
		ends = append(ends, Report{TaskEnded: &TaskEnded{Task: id, Machine: m, EnergyMilliJ: 1, Source: EnergyRAPL}})
	}
	f.must(decide("uni-a", 3000, ds...))
	f.must(batch("uni-a", 10_000, starts...))
	before := f.l.Hash()
	r := f.must(batch("uni-a", 18_000, ends...))
	if r.AcceptedReports() != 0 {
		t.Fatalf("%d of the 10 reports accepted: %+v", r.AcceptedReports(), r.Reports)
	}
	for _, it := range r.Reports {
		if it.Err == nil || it.Err.Code != CodeImplausible {
			t.Fatalf("item %+v: want implausible", it)
		}
	}
	if f.l.Hash() != before {
		t.Fatal("refused reports changed the state")
	}
	for _, id := range ids {
		if tk, _ := f.l.Task(id); tk.State != TaskRunning {
			t.Fatalf("%s is %s", id, tk.State)
		}
	}
}

// TestStopCheckpointImplausibleIsIgnored: a stop report whose checkpoint
// saves more than the run could have done is applied without it, with a
// note; its energy is booked.
func TestStopCheckpointImplausibleIsIgnored(t *testing.T) {
	f := runningFed(t, liveRules)
	f.must(decide("uni-a", startMs+1000, preempt("uni-b-1", "uni-a/m1", "uni-a-1")))
	ck := &CheckpointData{Hash: "sha256-ab12", SizeBytes: 1, ProgressMFlop: runSize / 2, Holders: []string{peerOf("uni-b")}}
	r := f.must(stoppedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+2000, 1, EnergyRAPL, ck))
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "checkpoint sha256-ab12 ignored") {
		t.Fatalf("notes %q", r.Notes)
	}
	tk, _ := f.l.Task("uni-a-1")
	if tk.Checkpoint != nil || tk.RemainingMFlop != runSize || tk.Segments[0].Outcome != OutcomePreempted {
		t.Fatalf("task %+v", tk)
	}
}

// TestStaleDoneTooSoon: a preempted run reported done (it finished before
// the stop reached it) is held to the time rule too.
func TestStaleDoneTooSoon(t *testing.T) {
	f := runningFed(t, liveRules)
	f.must(decide("uni-b", startMs+1000, preempt("uni-b-1", "uni-a/m1", "uni-a-1")))
	before := f.l.Hash()
	r := f.apply(endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+2000, 1, EnergyRAPL, false))
	if r.Err == nil || r.Err.Code != CodeImplausible || f.l.Hash() != before {
		t.Fatalf("got %v, want implausible with the hash unchanged", r.Err)
	}
	f.must(endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+2000, 1, EnergyRAPL, true))
}

// TestResumedRunIsCheckedFromItsStart: a run resuming from a checkpoint
// has only the rest of the work to do, which the time rule allows for.
func TestResumedRunIsCheckedFromItsStart(t *testing.T) {
	f := runningFed(t, liveRules)
	half := int64(runSize / 2)
	at := startMs + int64(half)*1000/runSpeed // at the declared speed
	f.must(ckpt("uni-a", "uni-a-1", "uni-a/m1", at, half))
	f.must(lost("uni-a", "uni-a/m1", at+1000))
	f.must(heartbeatCmd("uni-a", "uni-a/m1", at+2000))
	f.must(decide("uni-a", at+3000, alloc("uni-a-1", "uni-a/m1")))
	c := started("uni-a", "uni-a-1", "uni-a/m1", at+4000)
	c.TaskStarted.FromCheckpoint, c.TaskStarted.RestoredProgressMFlop = "sha256-ab12", half
	f.must(c)
	tk, _ := f.l.Task("uni-a-1")
	if s := tk.Segments[1]; s.FromMFlop != half {
		t.Fatalf("second run starts from %d MFlop, want %d", s.FromMFlop, half)
	}
	// Half the work at 4× the declared speed, less the slack: 1,190 s.
	end := at + 4000 + half*1000/(runSpeed*SpeedMargin) - PlausibleSlackMs
	if r := f.apply(endedFrom("uni-a", "uni-a-1", "uni-a/m1", end-1, 1, EnergyRAPL, false)); r.Err == nil || r.Err.Code != CodeImplausible {
		t.Fatalf("done 1 ms too soon: %v", r.Err)
	}
	f.must(endedFrom("uni-a", "uni-a-1", "uni-a/m1", end, 1, EnergyRAPL, false))
}

func heartbeatCmd(org, machine string, at int64) Command {
	c := act(org, at)
	c.Heartbeat = &Heartbeat{Machine: machine}
	return c
}

// TestQueueCap: an organisation's unfinished tasks stay within the
// federation's cap; finishing or cancelling one makes room; a replayed
// submit is still answered.
func TestQueueCap(t *testing.T) {
	f := newFed(t)
	f.must(registerRules("uni-a", 300_000, &Rules{Executors: ExecutorsLive, MaxQueuedPerOrg: 5}, mspec("m1", 1000, 100_000)))
	f.must(register("uni-b", 0))
	keyed := submit("uni-a", 2000, 1, 1)
	keyed.SubmitTasks.RequestID = "req-1"
	f.must(keyed)
	f.must(submit("uni-a", 2000, 1, 1))
	before := f.l.Hash()
	r := f.apply(submit("uni-a", 2100, 1, 1))
	if r.Err == nil || r.Err.Code != CodeQueueFull || f.l.Hash() != before {
		t.Fatalf("over the cap: %v", r.Err)
	}
	if r := f.must(keyed); !r.Replayed {
		t.Fatal("a resent keyed submit is not replayed at the cap")
	}
	f.must(submit("uni-a", 2200, 1))
	if r := f.apply(submit("uni-a", 2300, 1)); r.Err == nil || r.Err.Code != CodeQueueFull {
		t.Fatalf("at the cap: %v", r.Err)
	}
	f.must(cancel("uni-a", "uni-a-1", 2400))
	f.must(decide("uni-a", 2500, alloc("uni-a-2", "uni-a/m1")))
	f.must(started("uni-a", "uni-a-2", "uni-a/m1", 2600))
	f.must(endedFrom("uni-a", "uni-a-2", "uni-a/m1", 2700, 1, EnergyRAPL, true))
	f.must(submit("uni-a", 2800, 1, 1))
	// The cap is per organisation.
	f.must(submit("uni-b", 2900, 1, 1, 1, 1, 1))
	if r := f.apply(submit("uni-b", 3000, 1)); r.Err == nil || r.Err.Code != CodeQueueFull {
		t.Fatalf("uni-b over the cap: %v", r.Err)
	}
}

// TestDefaultQueueCap: rules without a cap get DefaultMaxQueuedPerOrg.
func TestDefaultQueueCap(t *testing.T) {
	f := newFed(t)
	f.must(registerRules("uni-a", 0, liveRules))
	if r, ok := f.l.Rules(); !ok || r.MaxQueuedPerOrg != DefaultMaxQueuedPerOrg || r.Executors != ExecutorsLive {
		t.Fatalf("rules %+v %v", r, ok)
	}
}

// TestRegistrationRules: the first registration fixes the rules; later
// ones must declare the same executors (or none); machines beyond any
// hardware's efficiency are refused under rules.
func TestRegistrationRules(t *testing.T) {
	absurd := mspec("evil", 1_000_000_000, 1) // 10⁶ GFLOPS at 1 mW
	for _, tc := range []struct {
		name  string
		first *Rules
		cmd   Command
		code  Code
	}{
		{"simulated joins live", liveRules, registerRules("uni-b", 0, simRules), CodeExecutorMode},
		{"live joins simulated", simRules, registerRules("uni-b", 0, liveRules), CodeExecutorMode},
		{"same executors, another cap", liveRules, registerRules("uni-b", 0, &Rules{Executors: ExecutorsLive, MaxQueuedPerOrg: 3}), ""},
		{"no rules joins live", liveRules, register("uni-b", 0), ""},
		{"rules join a federation without", nil, registerRules("uni-b", 0, simRules), ""},
		{"absurd machine registered", liveRules, registerRules("uni-b", 0, liveRules, absurd), CodeImplausible},
		{"absurd machine added", liveRules, addMachine("uni-a", absurd), CodeImplausible},
		{"absurd machine without rules", nil, addMachine("uni-a", absurd), ""},
		{"efficient machine at the bound", liveRules, addMachine("uni-a", mspec("gpu", 10_000*700_000, 700_000)), ""},
		{"first registration's own machines", nil, Command{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFed(t)
			if tc.cmd.Kind() == "" {
				r := f.apply(registerRules("uni-a", 0, liveRules, absurd))
				if r.Err == nil || r.Err.Code != CodeImplausible || len(f.l.Orgs()) != 0 {
					t.Fatalf("first registration with an absurd machine: %v", r.Err)
				}
				if _, ok := f.l.Rules(); ok {
					t.Fatal("a refused registration fixed the rules")
				}
				return
			}
			f.must(registerRules("uni-a", 0, tc.first))
			before := f.l.Hash()
			r := f.apply(tc.cmd)
			if tc.code == "" {
				if r.Err != nil {
					t.Fatalf("refused: %v", r.Err)
				}
				got, ok := f.l.Rules()
				if (tc.first == nil) == ok || (ok && (got.Executors != tc.first.Executors || got.MaxQueuedPerOrg != DefaultMaxQueuedPerOrg)) {
					t.Fatalf("rules %+v (%v) after a later registration", got, ok)
				}
				return
			}
			if r.Err == nil || r.Err.Code != tc.code || f.l.Hash() != before {
				t.Fatalf("got %v, want %s with the hash unchanged", r.Err, tc.code)
			}
		})
	}
}

func addMachine(org string, s MachineSpec) Command {
	c := act(org, 1500)
	c.AddMachine = &AddMachine{Machine: s}
	return c
}

// TestSlowMachineLosesItsAttraction: a machine declared at 10⁶ GFLOPS
// attracts another organisation's task; once three runs show it at 10
// GFLOPS, its effective speed in the policy view is the observed one, it is
// flagged, and the next task goes to the honest machine.
func TestSlowMachineLosesItsAttraction(t *testing.T) {
	f := newFed(t)
	f.must(registerRules("evil", 1_000_000_000, liveRules, mspec("fast", 1_000_000_000, 200_000)))
	f.must(registerRules("uni-b", 1_000_000_000, liveRules, mspec("x1", 10_000, 100_000)))
	placeOne := func(at int64) (task, machine string) {
		t.Helper()
		id := f.must(submit("uni-b", at, 600_000)).TaskIDs[0]
		s, vm := f.l.PolicyView(at, 0)
		ds, err := policy.EHOSEP{}.Schedule(s)
		if err != nil || len(ds) != 1 {
			t.Fatalf("schedule: %v %+v", err, ds)
		}
		c, err := vm.DecisionsCommand("uni-b", peerOf("uni-b"), at, ds)
		if err != nil {
			t.Fatal(err)
		}
		f.must(c)
		tk, _ := f.l.Task(id)
		return id, tk.Machine
	}
	at := int64(10_000)
	for i := range ObserveMinRuns {
		id, m := placeOne(at)
		if m != "evil/fast" {
			t.Fatalf("run %d went to %s before the correction", i, m)
		}
		// 600,000 MFlop at the real 10 GFLOPS: 60 s.
		f.must(started("evil", id, m, at))
		at += 60_000
		f.must(endedFrom("evil", id, m, at, 200*60_000, EnergyRAPL, false))
		at += 1000
	}
	mc, _ := f.l.Machine("evil/fast")
	if mc.ObservedRuns != 3 || mc.ObservedMFLOPS() != 10_000 || mc.EffectiveMFLOPS() != 10_000 || !mc.SpeedMismatch() {
		t.Fatalf("machine %+v: observed %d, effective %d, mismatch %v", mc, mc.ObservedMFLOPS(), mc.EffectiveMFLOPS(), mc.SpeedMismatch())
	}
	s, _ := f.l.PolicyView(at, 0)
	for _, m := range s.Machines {
		if m.ID == "evil/fast" && m.MFLOPS != 10_000 {
			t.Fatalf("policy view gives evil/fast %d MFLOPS", m.MFLOPS)
		}
	}
	if _, m := placeOne(at); m != "uni-b/x1" {
		t.Fatalf("after the correction the task went to %s", m)
	}
}

// TestObservationEstimator: the estimator's thresholds.
func TestObservationEstimator(t *testing.T) {
	for _, tc := range []struct {
		name          string
		declared      int64
		runs          [][2]int64 // work MFlop, ms
		observed, eff int64
		mismatch      bool
	}{
		{"too few runs", 1000, [][2]int64{{1000, 10_000}, {1000, 10_000}}, 100, 1000, false},
		{"short runs are not observed", 1000, [][2]int64{{1, 10}, {1, 10}, {1, 10}}, 0, 1000, false},
		{"as declared", 1000, [][2]int64{{10_000, 10_000}, {10_000, 10_000}, {10_000, 10_000}}, 1000, 1000, false},
		{"faster than declared stays declared", 1000, [][2]int64{{90_000, 10_000}, {90_000, 10_000}, {90_000, 10_000}}, 9000, 1000, false},
		{"within 3/4 keeps the declared speed", 1000, [][2]int64{{7500, 10_000}, {7500, 10_000}, {7500, 10_000}}, 750, 1000, false},
		{"slower: corrected, not flagged", 1000, [][2]int64{{6000, 10_000}, {6000, 10_000}, {6000, 10_000}}, 600, 600, false},
		{"much slower: corrected and flagged", 1000, [][2]int64{{4000, 10_000}, {4000, 10_000}, {4000, 10_000}}, 400, 400, true},
		{"never below 1", 1_000_000, [][2]int64{{1, 1 << 40}, {1, 1 << 40}, {1, 1 << 40}}, 0, 1, true},
		{"sums halved before they overflow", MaxMFLOPS, [][2]int64{{MaxSizeMFlop, 5000}, {MaxSizeMFlop, 5000}, {MaxSizeMFlop, 5000}, {MaxSizeMFlop, 5000}}, MaxMFLOPS, MaxMFLOPS, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Machine{MFLOPS: tc.declared}
			for _, r := range tc.runs {
				m.observe(r[0], r[1])
			}
			if m.ObservedMFLOPS() != tc.observed || m.EffectiveMFLOPS() != tc.eff || m.SpeedMismatch() != tc.mismatch {
				t.Fatalf("%+v: observed %d, effective %d, mismatch %v", m, m.ObservedMFLOPS(), m.EffectiveMFLOPS(), m.SpeedMismatch())
			}
		})
	}
	m := &Machine{}
	for range 2000 {
		m.observe(MaxSizeMFlop, ObserveMinRunMs)
	}
	if m.ObservedMFlop < 0 || m.ObservedMs < 0 || m.ObservedMFLOPS() != MaxMFLOPS {
		t.Fatalf("after 2000 maximal runs: %+v", m)
	}
}

// TestRulesSurviveSnapshotAndReplay: a federation with rules and
// observations restores from its snapshot and replays from its log to the
// same hash.
func TestRulesSurviveSnapshotAndReplay(t *testing.T) {
	f := runningFed(t, &Rules{Executors: ExecutorsLive, MaxQueuedPerOrg: 7})
	f.must(endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10_000_000, 1, EnergyRAPL, false))
	snap := snapshotOf(t, f.l)
	l := New()
	if err := l.Restore(strings.NewReader(string(snap))); err != nil {
		t.Fatal(err)
	}
	if l.Hash() != f.l.Hash() {
		t.Fatal("restored hash differs")
	}
	if r, _ := l.Rules(); r.MaxQueuedPerOrg != 7 {
		t.Fatalf("restored rules %+v", r)
	}
	if m, _ := l.Machine("uni-a/m1"); m.ObservedRuns != 1 {
		t.Fatalf("restored machine %+v", m)
	}
	re := New()
	for i, e := range f.log {
		re.Apply(uint64(i+1), e)
	}
	if re.Hash() != f.l.Hash() {
		t.Fatal("replayed hash differs")
	}
	// Version 1 had no rules.
	v1 := strings.Replace(string(snap), `{"v":2,`, `{"v":1,`, 1)
	if err := New().Restore(strings.NewReader(v1)); err == nil || !strings.Contains(err.Error(), "version 1 has no") {
		t.Fatalf("version 1 snapshot with rules: %v", err)
	}
}

// FuzzApplyLive is FuzzApply on a live federation with rules (a small
// queue cap, observed runs, runs started under the rules), seeded with the
// reports the rules refuse and accept.
func FuzzApplyLive(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	fx := runningFed(f, &Rules{Executors: ExecutorsLive, MaxQueuedPerOrg: 6})
	for _, c := range []Command{
		endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+8000, 1, EnergyRAPL, false),
		endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+minDone, 1, EnergyRAPL, false),
		endedFrom("uni-b", "uni-a-2", "uni-b/x1", startMs+60_000, MaxSegmentMilliJ, EnergyRAPL, false),
		endedFrom("uni-a", "uni-a-1", "uni-a/m1", startMs+10_000_000, 1, EnergySimulated, false),
		ckpt("uni-a", "uni-a-1", "uni-a/m1", startMs+1000, runSize*9/10),
		submit("uni-a", 9000, 1, 1, 1, 1),
		registerRules("uni-c", 0, simRules),
		addMachine("uni-a", mspec("evil", 1_000_000_000, 1)),
	} {
		b, err := EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	fuzzApply(f, snapshotOf(f, fx.l))
}

// TestRunStartBounds: under Rules.RunBounds a run's start, stamped on its
// executing peer's clock, is not before its task's submission nor before
// its previous run's end; a clock stepped back an hour (the chaos
// harness's clock-jump-leader found it) would otherwise credit the run,
// once its machine is lost, an hour of declared energy. A federation
// without the rule keeps the start as stamped, as its log always did.
func TestRunStartBounds(t *testing.T) {
	for _, tc := range []struct {
		name          string
		rules         *Rules
		first, second int64 // the two runs' starts in the ledger
		firstMilliJ   int64
	}{
		{"run bounds", &Rules{Executors: ExecutorsLive, RunBounds: true}, 2000, 4000, runBusy * 2},
		{"no run bounds", &Rules{Executors: ExecutorsLive}, 500, 1000, runBusy * 3500 / 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFed(t)
			f.must(registerRules("uni-a", 1_000_000, tc.rules, mspec("m1", runSpeed, runBusy), mspec("m2", runSpeed, runBusy)))
			f.must(submit("uni-a", 2000, runSize))
			f.must(decide("uni-a", 3000, alloc("uni-a-1", "uni-a/m1")))
			f.must(started("uni-a", "uni-a-1", "uni-a/m1", 500)) // the owner's clock, stepped back
			f.must(lost("uni-a", "uni-a/m1", 4000))
			f.must(decide("uni-a", 5000, alloc("uni-a-1", "uni-a/m2")))
			f.must(started("uni-a", "uni-a-1", "uni-a/m2", 1000))
			task, _ := f.l.Task("uni-a-1")
			if len(task.Segments) != 2 {
				t.Fatalf("segments %+v", task.Segments)
			}
			s0, s1 := task.Segments[0], task.Segments[1]
			if s0.StartMs != tc.first || s1.StartMs != tc.second || s0.EnergyMilliJ != tc.firstMilliJ {
				t.Fatalf("runs start at %d and %d, the first credited %d mJ; want %d, %d and %d mJ",
					s0.StartMs, s1.StartMs, s0.EnergyMilliJ, tc.first, tc.second, tc.firstMilliJ)
			}
		})
	}
}
