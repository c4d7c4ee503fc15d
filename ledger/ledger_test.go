package ledger

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func mustTask(t *testing.T, l *Ledger, id string) Task {
	t.Helper()
	tk, ok := l.Task(id)
	if !ok {
		t.Fatalf("task %s not found", id)
	}
	return tk
}

func mustMachine(t *testing.T, l *Ledger, id string) Machine {
	t.Helper()
	m, ok := l.Machine(id)
	if !ok {
		t.Fatalf("machine %s not found", id)
	}
	return m
}

func mustOrg(t *testing.T, l *Ledger, name string) OrgInfo {
	t.Helper()
	o, ok := l.Org(name)
	if !ok {
		t.Fatalf("organisation %s not found", name)
	}
	return o
}

// placeAndStart allocates task on machine (decided by uni-b's peer) and has
// the machine's owner start it at time at.
func placeAndStart(f *fed, task, machine string, at int64) {
	f.t.Helper()
	r := f.must(decide("uni-b", at, alloc(task, machine)))
	if r.Decisions[0].Err != nil {
		f.t.Fatalf("allocate %s on %s: %v", task, machine, r.Decisions[0].Err)
	}
	f.must(started(strings.SplitN(machine, "/", 2)[0], task, machine, at))
}

func TestApplyAcceptsEveryKind(t *testing.T) {
	cases := []struct {
		kind  Kind
		name  string
		setup func(f *fed)
		cmd   func() Command
		check func(t *testing.T, f *fed, r Result)
	}{
		{KindRegisterOrg, "new organisation with a machine", nil,
			func() Command { return register("uni-c", 50_000, mspec("y1", 800, 40_000)) },
			func(t *testing.T, f *fed, r Result) {
				o := mustOrg(t, f.l, "uni-c")
				if o.Peer != peerOf("uni-c") || o.LimitMilliW != 50_000 || o.RegisteredAt != r.Index || o.QuotaMFLOPS != 800 || o.PowerQuotaMilliW != 40_000 {
					t.Fatalf("org %+v", o)
				}
				if m := mustMachine(t, f.l, "uni-c/y1"); m.State != MachineUp || m.Org != "uni-c" || m.LastHeartbeatMs != 1000 {
					t.Fatalf("machine %+v", m)
				}
				if got, _ := f.l.OrgOfPeer(peerOf("uni-c")); got != "uni-c" {
					t.Fatalf("peer maps to %q", got)
				}
				if names := orgNames(f.l); !slices.Equal(names, []string{"uni-a", "uni-b", "uni-c"}) {
					t.Fatalf("registration order %v", names)
				}
			}},
		{KindAddMachine, "own machine", nil,
			func() Command {
				c := act("uni-a", 3000)
				c.AddMachine = &AddMachine{Machine: MachineSpec{Name: "m3", MFLOPS: 500, BusyMilliW: 60_000, IdleMilliW: 9_000}}
				return c
			},
			func(t *testing.T, f *fed, r Result) {
				if m := mustMachine(t, f.l, "uni-a/m3"); m.Org != "uni-a" || m.IdleMilliW != 9_000 || m.State != MachineUp {
					t.Fatalf("machine %+v", m)
				}
				if o := mustOrg(t, f.l, "uni-a"); o.QuotaMFLOPS != 3500 || o.Machines != 3 {
					t.Fatalf("quota %d, %d machines", o.QuotaMFLOPS, o.Machines)
				}
			}},
		{KindRemoveMachine, "free machine", nil,
			func() Command {
				c := act("uni-a", 3000)
				c.RemoveMachine = &RemoveMachine{Machine: "uni-a/m1"}
				return c
			},
			func(t *testing.T, f *fed, r Result) {
				if _, ok := f.l.Machine("uni-a/m1"); ok {
					t.Fatal("machine still there")
				}
				if o := mustOrg(t, f.l, "uni-a"); o.QuotaMFLOPS != 2000 {
					t.Fatalf("quota %d", o.QuotaMFLOPS)
				}
			}},
		{KindSetLimit, "raise", nil,
			func() Command {
				c := act("uni-b", 3000)
				c.SetLimit = &SetLimit{LimitMilliW: 500_000}
				return c
			},
			func(t *testing.T, f *fed, r Result) {
				if o := mustOrg(t, f.l, "uni-b"); o.LimitMilliW != 500_000 {
					t.Fatalf("limit %d", o.LimitMilliW)
				}
			}},
		{KindSubmitTasks, "batch of two", nil,
			func() Command { return submit("uni-b", 3000, 7, 8) },
			func(t *testing.T, f *fed, r Result) {
				if !slices.Equal(r.TaskIDs, []string{"uni-b-3", "uni-b-4"}) {
					t.Fatalf("IDs %v", r.TaskIDs)
				}
				tk := mustTask(t, f.l, "uni-b-4")
				if tk.State != TaskQueued || tk.Seq != 7 || tk.SizeMFlop != 8 || tk.RemainingMFlop != 8 || tk.SubmittedMs != 3000 || tk.Spec.Env["A"] != "1" {
					t.Fatalf("task %+v", tk)
				}
			}},
		{KindCancelTask, "queued task", nil,
			func() Command {
				c := act("uni-a", 3000)
				c.CancelTask = &CancelTask{Task: "uni-a-1"}
				return c
			},
			func(t *testing.T, f *fed, r Result) {
				if tk := mustTask(t, f.l, "uni-a-1"); tk.State != TaskCancelled || tk.EndedMs != 3000 {
					t.Fatalf("task %+v", tk)
				}
				if len(r.Changes) != 0 {
					t.Fatalf("changes %v", r.Changes)
				}
			}},
		{KindCancelTask, "running task: machine freed, run awaits its stop report",
			func(f *fed) { placeAndStart(f, "uni-a-1", "uni-b/x1", 3000) },
			func() Command {
				c := act("uni-a", 4000)
				c.CancelTask = &CancelTask{Task: "uni-a-1"}
				return c
			},
			func(t *testing.T, f *fed, r Result) {
				tk := mustTask(t, f.l, "uni-a-1")
				if tk.State != TaskCancelled || tk.Machine != "" || tk.Segments[0].Outcome != OutcomeCancelling {
					t.Fatalf("task %+v", tk)
				}
				if m := mustMachine(t, f.l, "uni-b/x1"); m.Task != "" {
					t.Fatalf("machine still holds %s", m.Task)
				}
				want := []Change{{Machine: "uni-b/x1", MachineOrg: "uni-b", Action: ActionStop, Task: "uni-a-1", Reason: "cancelled"}}
				if !slices.Equal(r.Changes, want) {
					t.Fatalf("changes %v", r.Changes)
				}
				if ps := f.l.PendingStops("uni-b"); len(ps) != 1 || ps[0].Task != "uni-a-1" || ps[0].Outcome != OutcomeCancelling {
					t.Fatalf("pending stops %v", ps)
				}
				f.must(stopped("uni-b", "uni-a-1", "uni-b/x1", 4500, 1234, nil))
				if tk := mustTask(t, f.l, "uni-a-1"); tk.Segments[0].Outcome != OutcomeCancelled || tk.Segments[0].EnergyMilliJ != 1234 {
					t.Fatalf("segment %+v", tk.Segments[0])
				}
				if o := mustOrg(t, f.l, "uni-a"); o.Energy.UserMilliJ != 1234 {
					t.Fatalf("energy %+v", o.Energy)
				}
			}},
		{KindDecisions, "allocate", nil,
			func() Command { return decide("uni-b", 3000, alloc("uni-a-1", "uni-a/m1")) },
			func(t *testing.T, f *fed, r Result) {
				if len(r.Decisions) != 1 || r.Decisions[0].Err != nil {
					t.Fatalf("decisions %+v", r.Decisions)
				}
				if tk := mustTask(t, f.l, "uni-a-1"); tk.State != TaskAssigned || tk.Machine != "uni-a/m1" {
					t.Fatalf("task %+v", tk)
				}
				if o := mustOrg(t, f.l, "uni-a"); o.PIMilliW != 100_000 || o.AllocatedMFLOPS != 1000 || o.Assigned != 1 || o.Queued != 2 {
					t.Fatalf("org %+v", o)
				}
				want := []Change{{Machine: "uni-a/m1", MachineOrg: "uni-a", Action: ActionStart, Task: "uni-a-1", Reason: "allocated"}}
				if !slices.Equal(r.Changes, want) {
					t.Fatalf("changes %v", r.Changes)
				}
				if as := f.l.Allocations("uni-a"); len(as) != 1 || as[0].Task.ID != "uni-a-1" || as[0].Machine.ID != "uni-a/m1" {
					t.Fatalf("allocations %+v", as)
				}
			}},
		{KindDecisions, "preempt a running victim",
			func(f *fed) { placeAndStart(f, "uni-b-1", "uni-a/m2", 3000) },
			func() Command { return decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1")) },
			func(t *testing.T, f *fed, r Result) {
				if r.Decisions[0].Err != nil {
					t.Fatalf("decision %v", r.Decisions[0].Err)
				}
				v := mustTask(t, f.l, "uni-b-1")
				if v.State != TaskQueued || v.Machine != "" || v.Segments[0].Outcome != OutcomePreempting {
					t.Fatalf("victim %+v", v)
				}
				if tk := mustTask(t, f.l, "uni-a-1"); tk.State != TaskAssigned || tk.Machine != "uni-a/m2" {
					t.Fatalf("task %+v", tk)
				}
				if a, b := mustOrg(t, f.l, "uni-a"), mustOrg(t, f.l, "uni-b"); a.PIMilliW != 150_000 || b.PIMilliW != 0 {
					t.Fatalf("PI %d, %d", a.PIMilliW, b.PIMilliW)
				}
				want := []Change{
					{Machine: "uni-a/m2", MachineOrg: "uni-a", Action: ActionStop, Task: "uni-b-1", Reason: "preempted"},
					{Machine: "uni-a/m2", MachineOrg: "uni-a", Action: ActionStart, Task: "uni-a-1", Reason: "allocated"},
				}
				if !slices.Equal(r.Changes, want) {
					t.Fatalf("changes %v", r.Changes)
				}
			}},
		{KindTaskStarted, "assigned task on own machine",
			func(f *fed) { f.must(decide("uni-b", 3000, alloc("uni-a-1", "uni-b/x1"))) },
			func() Command { return started("uni-b", "uni-a-1", "uni-b/x1", 3500) },
			func(t *testing.T, f *fed, r Result) {
				tk := mustTask(t, f.l, "uni-a-1")
				if tk.State != TaskRunning || tk.Attempts != 1 || len(tk.Segments) != 1 {
					t.Fatalf("task %+v", tk)
				}
				if s := tk.Segments[0]; s.Machine != "uni-b/x1" || s.MachineOrg != "uni-b" || s.StartMs != 3500 || s.Outcome != OutcomeRunning {
					t.Fatalf("segment %+v", s)
				}
			}},
		{KindTaskStopped, "preempted run reported with energy and checkpoint",
			func(f *fed) {
				placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
				f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1")))
			},
			func() Command {
				return stopped("uni-a", "uni-b-1", "uni-a/m2", 4200, 5000, &CheckpointData{Hash: "abc", SizeBytes: 10, ProgressMFlop: 3000, Holders: []string{peerOf("uni-a")}})
			},
			func(t *testing.T, f *fed, r Result) {
				v := mustTask(t, f.l, "uni-b-1")
				if s := v.Segments[0]; s.Outcome != OutcomePreempted || s.EndMs != 4200 || s.EnergyMilliJ != 5000 || s.Source != EnergyRAPL {
					t.Fatalf("segment %+v", s)
				}
				if v.RemainingMFlop != 12_000 || v.Checkpoint == nil || v.Checkpoint.AtMs != 4200 {
					t.Fatalf("victim %+v", v)
				}
				if a, b := mustOrg(t, f.l, "uni-a"), mustOrg(t, f.l, "uni-b"); b.Energy != (Energy{UserMilliJ: 5000}) || a.Energy != (Energy{OwnerOthersMilliJ: 5000}) {
					t.Fatalf("energy a %+v b %+v", a.Energy, b.Energy)
				}
				if ps := f.l.PendingStops("uni-a"); len(ps) != 0 {
					t.Fatalf("pending stops %v", ps)
				}
			}},
		{KindTaskEnded, "done on own machine",
			func(f *fed) { placeAndStart(f, "uni-a-3", "uni-a/m1", 3000) },
			func() Command { return ended("uni-a", "uni-a-3", "uni-a/m1", 9000, 7000, false) },
			func(t *testing.T, f *fed, r Result) {
				tk := mustTask(t, f.l, "uni-a-3")
				if tk.State != TaskDone || tk.RemainingMFlop != 0 || tk.Machine != "" || tk.EndedMs != 9000 || tk.Segments[0].Outcome != OutcomeDone {
					t.Fatalf("task %+v", tk)
				}
				if a := mustOrg(t, f.l, "uni-a"); a.Energy != (Energy{UserMilliJ: 7000, OwnerSelfMilliJ: 7000}) || a.PIMilliW != 0 || a.Done != 1 {
					t.Fatalf("org %+v", a)
				}
			}},
		{KindTaskEnded, "failed",
			func(f *fed) { placeAndStart(f, "uni-a-3", "uni-b/x1", 3000) },
			func() Command { return ended("uni-b", "uni-a-3", "uni-b/x1", 9000, 700, true) },
			func(t *testing.T, f *fed, r Result) {
				tk := mustTask(t, f.l, "uni-a-3")
				if tk.State != TaskFailed || tk.ExitCode != 2 || tk.Reason != "exit status 2" || tk.RemainingMFlop != 30_000 {
					t.Fatalf("task %+v", tk)
				}
				if b := mustOrg(t, f.l, "uni-b"); b.Energy != (Energy{OwnerOthersMilliJ: 700}) {
					t.Fatalf("energy %+v", b.Energy)
				}
			}},
		{KindHeartbeat, "brings a lost machine back",
			func(f *fed) { f.must(lost("uni-a", "uni-a/m1", 3000)) },
			func() Command {
				c := act("uni-a", 5000)
				c.Heartbeat = &Heartbeat{Machine: "uni-a/m1"}
				return c
			},
			func(t *testing.T, f *fed, r Result) {
				if m := mustMachine(t, f.l, "uni-a/m1"); m.State != MachineUp || m.LastHeartbeatMs != 5000 {
					t.Fatalf("machine %+v", m)
				}
			}},
		{KindMachineLost, "declared by the leader: running task requeued, declared energy",
			func(f *fed) { placeAndStart(f, "uni-a-2", "uni-a/m2", 3000) },
			func() Command { return lost("uni-b", "uni-a/m2", 13_000) },
			func(t *testing.T, f *fed, r Result) {
				tk := mustTask(t, f.l, "uni-a-2")
				// 150 W for 10 s = 1500 J.
				if s := tk.Segments[0]; tk.State != TaskQueued || s.Outcome != OutcomeLost || s.EnergyMilliJ != 1_500_000 || s.Source != EnergyDeclared {
					t.Fatalf("task %+v", tk)
				}
				if m := mustMachine(t, f.l, "uni-a/m2"); m.State != MachineLost || m.Task != "" {
					t.Fatalf("machine %+v", m)
				}
				if a := mustOrg(t, f.l, "uni-a"); a.PIMilliW != 0 || a.MachinesUp != 1 || a.QuotaMFLOPS != 1000 {
					t.Fatalf("org %+v", a)
				}
				if len(r.Changes) != 1 || r.Changes[0].Reason != "lost" {
					t.Fatalf("changes %v", r.Changes)
				}
			}},
		{KindCheckpoint, "running task",
			func(f *fed) { placeAndStart(f, "uni-a-2", "uni-a/m2", 3000) },
			func() Command { return ckpt("uni-a", "uni-a-2", "uni-a/m2", 6000, 4000) },
			func(t *testing.T, f *fed, r Result) {
				tk := mustTask(t, f.l, "uni-a-2")
				if tk.RemainingMFlop != 16_000 || tk.Checkpoint.ProgressMFlop != 4000 || tk.Checkpoint.AtMs != 6000 || tk.Checkpoint.Hash != "sha256-ab12" {
					t.Fatalf("task %+v", tk)
				}
			}},
	}
	seen := map[Kind]bool{}
	for _, tc := range cases {
		t.Run(string(tc.kind)+"/"+tc.name, func(t *testing.T) {
			f := base(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			before := f.l.Hash()
			r := f.apply(tc.cmd())
			if !r.Applied() || r.Kind != tc.kind {
				t.Fatalf("not applied: kind %q err %v", r.Kind, r.Err)
			}
			if f.l.Hash() == before {
				t.Fatal("state hash unchanged by an applied command")
			}
			tc.check(t, f, r)
			seen[tc.kind] = true
		})
	}
	for _, k := range allKinds {
		if !seen[k] {
			t.Errorf("no valid case for %s", k)
		}
	}
}

var allKinds = []Kind{KindRegisterOrg, KindAddMachine, KindRemoveMachine, KindSetLimit, KindSubmitTasks,
	KindCancelTask, KindDecisions, KindTaskStarted, KindTaskStopped, KindTaskEnded, KindHeartbeat,
	KindMachineLost, KindCheckpoint}

func orgNames(l *Ledger) []string {
	var out []string
	for _, o := range l.Orgs() {
		out = append(out, o.Name)
	}
	return out
}

func TestApplyRejects(t *testing.T) {
	withBody := func(c Command, set func(*Command)) Command { set(&c); return c }
	cases := []struct {
		name  string
		setup func(f *fed)
		cmd   Command
		raw   string // used instead of cmd when set
		code  Code
	}{
		{name: "not JSON", raw: "{not json", code: CodeMalformed},
		{name: "empty", raw: "", code: CodeMalformed},
		{name: "no version", raw: `{"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1}}`, code: CodeMalformed},
		{name: "future version", raw: `{"v":4,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1},"new_field":true}`, code: CodeBadVersion},
		{name: "version 0", raw: `{"v":0,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1}}`, code: CodeBadVersion},
		{name: "unknown field", raw: `{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1},"extra":1}`, code: CodeMalformed},
		{name: "unknown nested field", raw: `{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1,"percent":80}}`, code: CodeMalformed},
		{name: "trailing data", raw: `{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1}} {}`, code: CodeMalformed},
		{name: "float where int", raw: `{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1.5,"set_limit":{"limit_mw":1}}`, code: CodeMalformed},
		{name: "no body", cmd: act("uni-a", 1), code: CodeMalformed},
		{name: "two bodies", cmd: withBody(act("uni-a", 1), func(c *Command) {
			c.SetLimit = &SetLimit{LimitMilliW: 1}
			c.Heartbeat = &Heartbeat{Machine: "uni-a/m1"}
		}), code: CodeMalformed},
		{name: "bad org name", cmd: withBody(act("../x", 1), func(c *Command) { c.SetLimit = &SetLimit{LimitMilliW: 1} }), code: CodeMalformed},
		{name: "negative time", cmd: withBody(act("uni-a", -1), func(c *Command) { c.SetLimit = &SetLimit{LimitMilliW: 1} }), code: CodeMalformed},
		{name: "negative limit", cmd: withBody(act("uni-a", 1), func(c *Command) { c.SetLimit = &SetLimit{LimitMilliW: -1} }), code: CodeMalformed},
		{name: "zero-size task", cmd: submit("uni-a", 1, 5, 0), code: CodeMalformed},
		{name: "empty submission", cmd: submit("uni-a", 1), code: CodeMalformed},
		{name: "bad env key", cmd: withBody(submit("uni-a", 1, 5), func(c *Command) { c.SubmitTasks.Tasks[0].Spec.Env["1X"] = "v" }), code: CodeMalformed},
		{name: "input escapes", cmd: withBody(submit("uni-a", 1, 5), func(c *Command) { c.SubmitTasks.Tasks[0].Spec.Inputs = []string{"../etc/passwd"} }), code: CodeMalformed},
		{name: "machine without power", cmd: register("uni-c", 1, mspec("y", 100, 0)), code: CodeMalformed},
		{name: "duplicate machine names", cmd: register("uni-c", 1, mspec("y", 100, 1), mspec("y", 100, 1)), code: CodeMalformed},
		{name: "bad energy source", cmd: withBody(ended("uni-a", "uni-a-1", "uni-a/m1", 1, 1, false), func(c *Command) { c.TaskEnded.Source = "guess" }), code: CodeMalformed},
		{name: "checkpoint without holders", cmd: withBody(ckpt("uni-a", "uni-a-1", "uni-a/m1", 1, 1), func(c *Command) { c.Checkpoint.Checkpoint.Holders = nil }), code: CodeMalformed},
		{name: "unknown org", cmd: withBody(act("uni-z", 1), func(c *Command) { c.SetLimit = &SetLimit{LimitMilliW: 1} }), code: CodeUnknownOrg},
		{name: "peer acting for another org", cmd: withBody(act("uni-a", 1), func(c *Command) {
			c.Peer = peerOf("uni-b")
			c.SetLimit = &SetLimit{LimitMilliW: 1}
		}), code: CodeNotOwner},
		{name: "submit for another org", cmd: withBody(submit("uni-a", 1, 5), func(c *Command) { c.Peer = peerOf("uni-b") }), code: CodeNotOwner},
		{name: "cancel another org's task", cmd: withBody(act("uni-b", 1), func(c *Command) { c.CancelTask = &CancelTask{Task: "uni-a-1"} }), code: CodeNotOwner},
		{name: "decisions from an unregistered peer", cmd: withBody(decide("uni-b", 1, alloc("uni-a-1", "uni-a/m1")), func(c *Command) { c.Peer = "12D3KooWintruder" }), code: CodeNotOwner},
		{name: "start on another org's machine", setup: func(f *fed) { f.must(decide("uni-b", 1, alloc("uni-a-1", "uni-b/x1"))) },
			cmd: started("uni-a", "uni-a-1", "uni-b/x1", 2), code: CodeNotOwner},
		{name: "remove another org's machine", cmd: withBody(act("uni-b", 1), func(c *Command) { c.RemoveMachine = &RemoveMachine{Machine: "uni-a/m1"} }), code: CodeNotOwner},
		{name: "heartbeat for another org's machine", cmd: withBody(act("uni-b", 1), func(c *Command) { c.Heartbeat = &Heartbeat{Machine: "uni-a/m1"} }), code: CodeNotOwner},
		{name: "organisation registered twice", cmd: register("uni-a", 1), code: CodeExists},
		{name: "peer registered twice", cmd: withBody(register("uni-c", 1), func(c *Command) { c.Peer = peerOf("uni-a") }), code: CodeExists},
		{name: "machine added twice", cmd: withBody(act("uni-a", 1), func(c *Command) { c.AddMachine = &AddMachine{Machine: mspec("m1", 1, 1)} }), code: CodeExists},
		{name: "remove a busy machine", setup: func(f *fed) { f.must(decide("uni-b", 1, alloc("uni-a-1", "uni-a/m1"))) },
			cmd: withBody(act("uni-a", 2), func(c *Command) { c.RemoveMachine = &RemoveMachine{Machine: "uni-a/m1"} }), code: CodeMachineBusy},
		{name: "remove a machine with an unreported run", setup: func(f *fed) {
			placeAndStart(f, "uni-a-1", "uni-a/m1", 1)
			c := act("uni-a", 2)
			c.CancelTask = &CancelTask{Task: "uni-a-1"}
			f.must(c)
		}, cmd: withBody(act("uni-a", 3), func(c *Command) { c.RemoveMachine = &RemoveMachine{Machine: "uni-a/m1"} }), code: CodeMachineBusy},
		{name: "limit below current PI", setup: func(f *fed) { f.must(decide("uni-b", 1, alloc("uni-a-1", "uni-a/m2"))) },
			cmd: withBody(act("uni-a", 2), func(c *Command) { c.SetLimit = &SetLimit{LimitMilliW: 149_999} }), code: CodeLimitExceeded},
		{name: "unknown machine", cmd: withBody(act("uni-a", 1), func(c *Command) { c.Heartbeat = &Heartbeat{Machine: "uni-a/m9"} }), code: CodeUnknownMachine},
		{name: "lost unknown machine", cmd: lost("uni-a", "uni-c/m1", 1), code: CodeUnknownMachine},
		{name: "unknown task", cmd: withBody(act("uni-a", 1), func(c *Command) { c.CancelTask = &CancelTask{Task: "uni-a-99"} }), code: CodeUnknownTask},
		{name: "start a queued task", cmd: started("uni-a", "uni-a-1", "uni-a/m1", 1), code: CodeBadState},
		{name: "start on the wrong machine", setup: func(f *fed) { f.must(decide("uni-b", 1, alloc("uni-a-1", "uni-a/m1"))) },
			cmd: started("uni-a", "uni-a-1", "uni-a/m2", 2), code: CodeBadState},
		{name: "cancel a done task", setup: func(f *fed) {
			placeAndStart(f, "uni-a-1", "uni-a/m1", 1)
			f.must(ended("uni-a", "uni-a-1", "uni-a/m1", 2, 10, false))
		}, cmd: withBody(act("uni-a", 3), func(c *Command) { c.CancelTask = &CancelTask{Task: "uni-a-1"} }), code: CodeBadState},
		{name: "stop report without a stopped run", setup: func(f *fed) { placeAndStart(f, "uni-a-1", "uni-a/m1", 1) },
			cmd: stopped("uni-a", "uni-a-1", "uni-a/m1", 2, 10, nil), code: CodeBadState},
		{name: "end a queued task", cmd: ended("uni-a", "uni-a-1", "uni-a/m1", 2, 10, false), code: CodeBadState},
		{name: "done before start", setup: func(f *fed) { f.must(decide("uni-b", 1, alloc("uni-a-1", "uni-a/m1"))) },
			cmd: ended("uni-a", "uni-a-1", "uni-a/m1", 2, 0, false), code: CodeBadState},
		{name: "checkpoint of a task not running", cmd: ckpt("uni-a", "uni-a-1", "uni-a/m1", 1, 1), code: CodeBadState},
		{name: "checkpoint going backwards", setup: func(f *fed) {
			placeAndStart(f, "uni-a-1", "uni-a/m1", 1)
			f.must(ckpt("uni-a", "uni-a-1", "uni-a/m1", 2, 500))
		}, cmd: ckpt("uni-a", "uni-a-1", "uni-a/m1", 3, 400), code: CodeBadState},
		{name: "checkpoint beyond the size", setup: func(f *fed) { placeAndStart(f, "uni-a-1", "uni-a/m1", 1) },
			cmd: ckpt("uni-a", "uni-a-1", "uni-a/m1", 2, 10_001), code: CodeMalformed},
		{name: "machine lost twice", setup: func(f *fed) { f.must(lost("uni-a", "uni-a/m1", 1)) }, cmd: lost("uni-a", "uni-a/m1", 2), code: CodeBadState},
		{name: "decisions batch too large", cmd: decide("uni-b", 1, make([]Decision, MaxDecisionsPerCommand+1)...), code: CodeMalformed},
	}
	seen := map[Code]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := base(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			before := f.l.Hash()
			var r Result
			if tc.raw != "" || tc.cmd.Org == "" {
				r = f.raw([]byte(tc.raw))
			} else {
				r = f.apply(tc.cmd)
			}
			if r.Err == nil || r.Err.Code != tc.code {
				t.Fatalf("got %v, want code %s", r.Err, tc.code)
			}
			if r.Err.Msg == "" {
				t.Fatal("error without a message")
			}
			if r.Applied() || r.Changes != nil || r.TaskIDs != nil || r.Decisions != nil {
				t.Fatalf("rejected result carries effects: %+v", r)
			}
			if after := f.l.Hash(); after != before {
				t.Fatal("state hash changed by a rejected command")
			}
			if f.l.AppliedIndex() != f.idx {
				t.Fatalf("applied index %d, want %d", f.l.AppliedIndex(), f.idx)
			}
			seen[tc.code] = true
		})
	}
	for _, c := range []Code{CodeMalformed, CodeBadVersion, CodeUnknownOrg, CodeUnknownMachine, CodeUnknownTask,
		CodeNotOwner, CodeExists, CodeMachineBusy, CodeLimitExceeded, CodeBadState} {
		if !seen[c] {
			t.Errorf("no case rejects with %s", c)
		}
	}
}

// TestEnergyOverflowRejected drives an account to the edge of int64 (by
// hand: no realistic log gets there) and checks that the report that would
// overflow it is refused without touching the state.
func TestEnergyOverflowRejected(t *testing.T) {
	f := base(t)
	placeAndStart(f, "uni-a-1", "uni-a/m1", 1)
	f.l.orgs["uni-a"].Energy.UserMilliJ = math.MaxInt64 - 5
	before := f.l.Hash()
	f.idx++
	b, _ := EncodeCommand(ended("uni-a", "uni-a-1", "uni-a/m1", 2, 10, false))
	r := f.l.Apply(f.idx, b)
	if CodeOf(r.Err) != CodeOverflow {
		t.Fatalf("got %v, want overflow", r.Err)
	}
	if f.l.Hash() != before {
		t.Fatal("state changed")
	}
	if tk := mustTask(t, f.l, "uni-a-1"); tk.State != TaskRunning {
		t.Fatalf("task %s", tk.State)
	}
}

func TestDecisionsValidatedOneByOne(t *testing.T) {
	f := base(t)
	f.must(lost("uni-b", "uni-b/x1", 1500))
	// uni-b's limit is 200 W: uni-a/m2 (150 W) fits, then uni-a/m1 (100 W)
	// does not.
	r := f.must(decide("uni-a", 3000,
		alloc("uni-b-1", "uni-a/m2"),              // ok
		alloc("uni-b-1", "uni-a/m1"),              // stale: no longer queued
		alloc("uni-b-2", "uni-a/m1"),              // limit: 150 + 100 > 200 W
		alloc("uni-a-1", "uni-a/m2"),              // machine busy
		alloc("uni-a-1", "uni-b/x1"),              // machine down
		alloc("uni-a-9", "uni-a/m1"),              // unknown task
		alloc("uni-a-1", "uni-a/m7"),              // unknown machine
		preempt("uni-a-1", "uni-a/m2", "uni-a-2"), // stale: victim not there
		preempt("uni-a-1", "uni-a/m2", "uni-b-1"), // ok: b's task leaves m2
		alloc("uni-b-1", "uni-a/m1"),              // ok: the victim is placed again in the same pass
		Decision{Kind: "migrate", Task: "uni-a-2", Machine: "uni-a/m1"},
		Decision{Kind: DecideAllocate, Task: "uni-a-2", Machine: "uni-a/m1", Victim: "uni-b-1"},
	))
	want := []Code{"", CodeStale, CodeLimitExceeded, CodeMachineBusy, CodeMachineDown, CodeUnknownTask,
		CodeUnknownMachine, CodeStale, "", "", CodeMalformed, CodeMalformed}
	if len(r.Decisions) != len(want) {
		t.Fatalf("%d results", len(r.Decisions))
	}
	for i, d := range r.Decisions {
		if CodeOf(errOrNil(d.Err)) != want[i] {
			t.Errorf("decision %d (%+v): got %v, want %q", i, d.Decision, d.Err, want[i])
		}
	}
	if r.AcceptedDecisions() != 3 {
		t.Fatalf("%d accepted", r.AcceptedDecisions())
	}
	if a, b := mustOrg(t, f.l, "uni-a"), mustOrg(t, f.l, "uni-b"); a.PIMilliW != 150_000 || b.PIMilliW != 100_000 {
		t.Fatalf("PI a %d b %d", a.PIMilliW, b.PIMilliW)
	}
	if tk := mustTask(t, f.l, "uni-b-1"); tk.Machine != "uni-a/m1" {
		t.Fatalf("victim re-placed on %q", tk.Machine)
	}
	// The assigned (never started) victim leaves no segment behind.
	if tk := mustTask(t, f.l, "uni-b-1"); len(tk.Segments) != 0 {
		t.Fatalf("segments %+v", tk.Segments)
	}
	// Preempting a task of the same organisation releases the machine's
	// power before counting it again: with its limit at exactly 100 W,
	// uni-b's task on m1 (100 W) can still be swapped for another of its
	// tasks.
	f.must(func() Command { c := act("uni-b", 3100); c.SetLimit = &SetLimit{LimitMilliW: 100_000}; return c }())
	r = f.must(decide("uni-a", 3200, preempt("uni-b-2", "uni-a/m1", "uni-b-1")))
	if r.Decisions[0].Err != nil {
		t.Fatalf("same-organisation preemption at the limit: %v", r.Decisions[0].Err)
	}
	if b := mustOrg(t, f.l, "uni-b"); b.PIMilliW != 100_000 {
		t.Fatalf("PI %d", b.PIMilliW)
	}
}

func errOrNil(e *Error) error {
	if e == nil {
		return nil
	}
	return e
}

func TestApplySameOrOlderIndexIsNoop(t *testing.T) {
	f := base(t)
	before := f.l.Hash()
	b, err := EncodeCommand(submit("uni-a", 5000, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, idx := range []uint64{f.idx, f.idx - 1, 0} {
		r := f.l.Apply(idx, b)
		if !r.Skipped || r.Applied() {
			t.Fatalf("index %d: %+v", idx, r)
		}
	}
	if f.l.Hash() != before || f.l.AppliedIndex() != f.idx {
		t.Fatal("a replayed index changed the ledger")
	}
	if r := f.l.Apply(f.idx+1, b); !r.Applied() {
		t.Fatalf("next index: %v", r.Err)
	}
}

// TestPreemptionRaces covers reports that cross a preemption in flight.
func TestPreemptionRaces(t *testing.T) {
	t.Run("finished before it could be stopped, still queued: done", func(t *testing.T) {
		f := base(t)
		placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
		f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1")))
		r := f.must(ended("uni-a", "uni-b-1", "uni-a/m2", 4100, 900, false))
		tk := mustTask(t, f.l, "uni-b-1")
		if tk.State != TaskDone || tk.Segments[0].Outcome != OutcomeDone || len(r.Notes) != 0 {
			t.Fatalf("task %+v notes %v", tk, r.Notes)
		}
	})
	t.Run("finished after being placed elsewhere: run booked, result dropped", func(t *testing.T) {
		f := base(t)
		placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
		f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1"), alloc("uni-b-1", "uni-b/x1")))
		r := f.must(ended("uni-a", "uni-b-1", "uni-a/m2", 4100, 900, false))
		tk := mustTask(t, f.l, "uni-b-1")
		if tk.State != TaskAssigned || tk.Segments[0].Outcome != OutcomePreempted || len(r.Notes) != 1 {
			t.Fatalf("task %+v notes %v", tk, r.Notes)
		}
	})
	t.Run("late checkpoint for a task running again is ignored", func(t *testing.T) {
		f := base(t)
		placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
		f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1"), alloc("uni-b-1", "uni-b/x1")))
		f.must(started("uni-b", "uni-b-1", "uni-b/x1", 4050))
		r := f.must(stopped("uni-a", "uni-b-1", "uni-a/m2", 4100, 900, &CheckpointData{Hash: "h", ProgressMFlop: 100, Holders: []string{peerOf("uni-a")}}))
		tk := mustTask(t, f.l, "uni-b-1")
		if tk.Checkpoint != nil || tk.RemainingMFlop != 15_000 || len(r.Notes) != 1 || tk.Segments[0].Outcome != OutcomePreempted {
			t.Fatalf("task %+v notes %v", tk, r.Notes)
		}
	})
	t.Run("start that lost the race to a preemption is refused", func(t *testing.T) {
		f := base(t)
		f.must(decide("uni-b", 3000, alloc("uni-b-1", "uni-a/m2")))
		f.must(decide("uni-b", 3100, preempt("uni-a-1", "uni-a/m2", "uni-b-1")))
		r := f.apply(started("uni-a", "uni-b-1", "uni-a/m2", 3050))
		if CodeOf(errOrNil(r.Err)) != CodeBadState {
			t.Fatalf("got %v", r.Err)
		}
	})
	t.Run("lost machine closes unreported runs with declared energy", func(t *testing.T) {
		f := base(t)
		placeAndStart(f, "uni-b-1", "uni-a/m1", 3000)
		f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m1", "uni-b-1")))
		f.must(started("uni-a", "uni-a-1", "uni-a/m1", 4000))
		f.must(lost("uni-a", "uni-a/m1", 5000))
		v, tk := mustTask(t, f.l, "uni-b-1"), mustTask(t, f.l, "uni-a-1")
		// 100 W: 2 s for the victim (start 3000 to loss 5000), 1 s for the new task.
		if v.Segments[0].Outcome != OutcomeLost || v.Segments[0].EnergyMilliJ != 200_000 || tk.Segments[0].EnergyMilliJ != 100_000 || tk.State != TaskQueued {
			t.Fatalf("victim %+v task %+v", v.Segments, tk)
		}
		if ps := f.l.PendingStops("uni-a"); len(ps) != 0 {
			t.Fatalf("pending stops %v", ps)
		}
		a, b := mustOrg(t, f.l, "uni-a"), mustOrg(t, f.l, "uni-b")
		if a.Energy != (Energy{UserMilliJ: 100_000, OwnerSelfMilliJ: 100_000, OwnerOthersMilliJ: 200_000}) || b.Energy != (Energy{UserMilliJ: 200_000}) {
			t.Fatalf("energy a %+v b %+v", a.Energy, b.Energy)
		}
	})
	t.Run("segment never ends before it starts", func(t *testing.T) {
		f := base(t)
		placeAndStart(f, "uni-a-1", "uni-b/x1", 5000)
		f.must(ended("uni-b", "uni-a-1", "uni-b/x1", 4000, 1, false))
		if s := mustTask(t, f.l, "uni-a-1").Segments[0]; s.EndMs != 5000 {
			t.Fatalf("segment %+v", s)
		}
	})
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	c := submit("uni-a", 42, 7, 9)
	b1, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeCommand(b1)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := EncodeCommand(d)
	if err != nil {
		t.Fatal(err)
	}
	if string(b1) != string(b2) {
		t.Fatalf("re-encoding differs:\n%s\n%s", b1, b2)
	}
	// Map keys come out sorted whatever the insertion order.
	if !strings.Contains(string(b1), `"env":{"A":"1","B":"2"}`) {
		t.Fatalf("env not canonical: %s", b1)
	}
	if _, err := EncodeCommand(Command{V: MaxCommandVersion() + 1, Org: "a", Peer: "p", SetLimit: &SetLimit{}}); CodeOf(err) != CodeBadVersion {
		t.Fatalf("encode of a foreign version: %v", err)
	}
	if _, err := EncodeCommand(act("uni-a", 1)); CodeOf(err) != CodeMalformed {
		t.Fatalf("encode without body: %v", err)
	}
	var e *Error
	_, err = DecodeCommand([]byte(`{"v":9}`))
	if !errors.As(err, &e) || !errors.Is(err, &Error{Code: CodeBadVersion}) {
		t.Fatalf("decode error %v is not a bad_version *Error", err)
	}
}

func TestResultIsJSON(t *testing.T) {
	// The consensus layer ships Results to clients; they must encode.
	f := base(t)
	r := f.must(decide("uni-b", 3000, alloc("uni-a-1", "uni-a/m1"), alloc("uni-x-1", "uni-a/m2")))
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"code":"unknown_task"`) {
		t.Fatalf("result JSON %s", b)
	}
	if _, err := json.Marshal(f.l.Orgs()); err != nil {
		t.Fatalf("orgs JSON: %v", err)
	}
}

func TestAccessorsReturnCopies(t *testing.T) {
	f := base(t)
	placeAndStart(f, "uni-a-1", "uni-a/m1", 3000)
	h := f.l.Hash()
	tk := mustTask(t, f.l, "uni-a-1")
	tk.Spec.Argv[0] = "evil"
	tk.Spec.Env["A"] = "evil"
	tk.Segments[0].EnergyMilliJ = 99
	for _, x := range f.l.Tasks(TaskFilter{Org: "uni-a"}) {
		x.Spec.Inputs[0] = "evil"
	}
	for _, a := range f.l.Allocations("uni-a") {
		a.Task.Segments[0].Outcome = OutcomeDone
	}
	if f.l.Hash() != h {
		t.Fatal("mutating an accessor's result changed the ledger")
	}
	if got := f.l.Tasks(TaskFilter{States: []TaskState{TaskRunning}}); len(got) != 1 || got[0].ID != "uni-a-1" {
		t.Fatalf("running tasks %v", got)
	}
	if got := f.l.Tasks(TaskFilter{Org: "uni-b"}); len(got) != 2 || got[0].Seq > got[1].Seq {
		t.Fatalf("uni-b tasks %v", got)
	}
	a := mustOrg(t, f.l, "uni-a")
	if a.DP == nil || *a.DP != (1000.0-3000)/3000 || a.Running != 1 || a.Queued != 2 {
		t.Fatalf("org %+v", a)
	}
}
