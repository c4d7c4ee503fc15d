package policy

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// saFederation: organisation a owns two 4-cpu machines, m0 and m1; m0
// runs a 4-cpu task of b with busyLeftMs of its limit left (none when 0).
func saFederation(busyLeftMs int64) *State {
	s := &State{
		Orgs: []Org{{Name: "a", LimitMilliW: 1 << 40}, {Name: "b", LimitMilliW: 1 << 40}},
		Machines: []Machine{
			{ID: "m0", Owner: 0, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 4}},
			{ID: "m1", Owner: 0, MFLOPS: 100, BusyMilliW: 100, Capacity: Resources{CPUs: 4}},
		},
	}
	if busyLeftMs > 0 {
		s.Running = []Running{{Task: Task{ID: "busy", Org: 1, SizeMFlop: 1, Seq: 1, Request: Resources{CPUs: 4}, WallLimitMs: busyLeftMs + 10_000}, Machine: 0, RunSeconds: 10}}
	}
	return s
}

// TestSAChooseLiveByHand: the seed's trade-off worked by hand. The job is
// 8 cpus for 60 s (two machines) or 4 cpus for 100 s (one machine).
func TestSAChooseLiveByHand(t *testing.T) {
	wide := SARequest{Nodes: 2, CPUs: 4, WallLimitMs: 60_000}
	narrow := SARequest{Nodes: 1, CPUs: 4, WallLimitMs: 100_000}
	job := Task{ID: "job", Org: 1, SizeMFlop: 1, Executable: "x"}
	cases := []struct {
		name   string
		s      *State
		queued []Task
		gangs  []GangJob
		policy string
		alts   []SARequest
		choice int
		preds  []SAPrediction
	}{
		// Idle: the wide one ends at 60 s, the narrow at 100 s.
		{name: "idle", s: saFederation(0), alts: []SARequest{narrow, wide}, choice: 1,
			preds: []SAPrediction{{0, 100_000}, {0, 60_000}}},
		// m0 busy 50 s more: wide starts at 50 s, ends at 110 s; narrow
		// takes m1 now and ends at 100 s.
		{name: "busy", s: saFederation(50_000), alts: []SARequest{wide, narrow}, choice: 1,
			preds: []SAPrediction{{50_000, 110_000}, {0, 100_000}}},
		// Busy 30 s: wide ends at 90 s, before narrow's 100 s.
		{name: "busy-short", s: saFederation(30_000), alts: []SARequest{narrow, wide}, choice: 1,
			preds: []SAPrediction{{0, 100_000}, {30_000, 90_000}}},
		// A task ahead reserved on m1 for 200 s: narrow waits for m0 at
		// 30 s (ends 130 s); wide needs both: 200 s, ends 260 s.
		{name: "queued-ahead", s: saFederation(30_000), policy: "conservative",
			queued: []Task{{ID: "ahead", Org: 0, SizeMFlop: 1, Seq: 5, Request: Resources{CPUs: 4}, WallLimitMs: 200_000}},
			alts:   []SARequest{wide, narrow}, choice: 1, preds: []SAPrediction{{200_000, 260_000}, {30_000, 130_000}}},
		// A gang ahead of 2×4 cpus for 20 s: reserved on both at 30 s;
		// narrow then at 50 s (150 s), wide at 50 s too (110 s).
		{name: "gang-ahead", s: saFederation(30_000), policy: "easy",
			gangs: []GangJob{SAGangOf(Task{ID: "g", Org: 0, SizeMFlop: 1, Seq: 4, Request: Resources{CPUs: 4}, WallLimitMs: 20_000}, 2)},
			alts:  []SARequest{narrow, wide}, choice: 1, preds: []SAPrediction{{50_000, 150_000}, {50_000, 110_000}}},
		// Ties go to the first listed.
		{name: "tie", s: saFederation(0), alts: []SARequest{{Nodes: 1, CPUs: 2, WallLimitMs: 60_000}, wide}, choice: 0,
			preds: []SAPrediction{{0, 60_000}, {0, 60_000}}},
		// Three machines of one owner do not exist: a 3-node alternative
		// never runs and is not chosen.
		{name: "too-wide", s: saFederation(0), alts: []SARequest{{Nodes: 3, CPUs: 1, WallLimitMs: 1_000}, narrow}, choice: 1,
			preds: []SAPrediction{{Unbounded, Unbounded}, {0, 100_000}}},
		// A task ahead that never ends holds m1 forever, and the one
		// behind it that needs m1 too waits forever: the plan stops there.
		{name: "stuck-ahead", s: saFederation(30_000), policy: "fcfs",
			queued: []Task{{ID: "forever", Org: 0, SizeMFlop: 1, Seq: 5, Request: Resources{CPUs: 4}},
				{ID: "stuck", Org: 0, SizeMFlop: 1, Seq: 6, Request: Resources{CPUs: 4}}},
			alts: []SARequest{narrow, wide}, choice: 0, preds: []SAPrediction{{Unbounded, Unbounded}, {Unbounded, Unbounded}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.s.Queued, c.s.Gangs = c.queued, c.gangs
			choice, preds, err := SAChooseLive(SAInput{State: c.s, JobPolicy: c.policy, Task: job, Alternatives: c.alts})
			if err != nil {
				t.Fatal(err)
			}
			if choice != c.choice || !reflect.DeepEqual(preds, c.preds) {
				t.Fatalf("choice %d %v, want %d %v", choice, preds, c.choice, c.preds)
			}
		})
	}
}

// TestSAChooseLiveEHOSEPOrder: under ehosep the job is planned where
// EHOSEP's order puts it: organisation b (DP 0) comes before
// a, whose task arrived first; under conservative, after it. Only m0 has
// room for the job (b's m1 has one cpu).
func TestSAChooseLiveEHOSEPOrder(t *testing.T) {
	s := saFederation(0)
	s.Machines[1].Owner, s.Machines[1].Capacity = 1, Resources{CPUs: 1}
	s.Running = []Running{{Task: Task{ID: "run", Org: 0, SizeMFlop: 1, Seq: 1, Request: Resources{CPUs: 4}, WallLimitMs: 10_000}, Machine: 0}}
	s.Queued = []Task{{ID: "a-task", Org: 0, SizeMFlop: 1, Seq: 2, Request: Resources{CPUs: 4}, WallLimitMs: 50_000}}
	job := Task{ID: "job", Org: 1, SizeMFlop: 1}
	alts := []SARequest{{Nodes: 1, CPUs: 4, WallLimitMs: 5_000}}
	for policy, want := range map[string]SAPrediction{"ehosep": {10_000, 15_000}, "conservative": {60_000, 65_000}} {
		_, preds, err := SAChooseLive(SAInput{State: s, JobPolicy: policy, Task: job, Alternatives: alts})
		if err != nil {
			t.Fatal(err)
		}
		if preds[0] != want {
			t.Errorf("%s: predicted %v, want %v", policy, preds[0], want)
		}
	}
}

func TestSAChooseLiveBadInput(t *testing.T) {
	s := saFederation(0)
	job := Task{ID: "job", Org: 0, SizeMFlop: 1}
	for name, in := range map[string]SAInput{
		"none":      {State: s, Task: job},
		"zero-time": {State: s, Task: job, Alternatives: []SARequest{{Nodes: 1, WallLimitMs: 0}}},
		"no-nodes":  {State: s, Task: job, Alternatives: []SARequest{{Nodes: 0, WallLimitMs: 1}}},
		"org":       {State: s, Task: Task{ID: "job", Org: 7}, Alternatives: []SARequest{{Nodes: 1, WallLimitMs: 1}}},
		"gang-size": {State: &State{Orgs: s.Orgs, Machines: s.Machines, Gangs: []GangJob{SAGangOf(Task{ID: "g", Org: 0, SizeMFlop: 1}, 1)}}, Task: job, Alternatives: []SARequest{{Nodes: 1, WallLimitMs: 1}}},
	} {
		if _, _, err := SAChooseLive(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSAChooseLiveAgreesWithReference: for one-machine alternatives under
// a submission-order policy, each prediction is the start the reference
// conservative plan gives the job appended to the queue (a job it never
// plans never starts), plus its limit; the choice is the earliest end.
func TestSAChooseLiveAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 5))
	finite := 0
	for i := range 2000 {
		s := randomLiveState(r)
		job := Task{ID: "zz-job", Org: r.IntN(len(s.Orgs)), SizeMFlop: 1000}
		alts := make([]SARequest, 1+r.IntN(4))
		for k := range alts {
			alts[k] = SARequest{Nodes: 1, CPUs: int64(1 + r.IntN(6)), WallLimitMs: int64(1+r.IntN(12)) * 1000}
		}
		choice, preds, err := SAChooseLive(SAInput{State: s, JobPolicy: LiveModes()[r.IntN(3)], Task: job, Alternatives: alts})
		if err != nil {
			t.Fatalf("state %d: %v", i, err)
		}
		var seq uint64
		for _, q := range s.Queued {
			seq = max(seq, q.Seq)
		}
		want := make([]SAPrediction, len(alts))
		best := 0
		for k, a := range alts {
			c := *s
			cand := job
			cand.Seq, cand.Request.CPUs, cand.WallLimitMs = seq+1, a.CPUs, a.WallLimitMs
			c.Queued = append(append([]Task(nil), s.Queued...), cand)
			plan, err := referenceLiveBackfill("conservative", &c)
			if err != nil {
				t.Fatal(err)
			}
			want[k] = SAPrediction{Unbounded, Unbounded}
			for _, d := range plan.Starts {
				if d.Task == cand.ID {
					want[k] = SAPrediction{0, a.WallLimitMs}
				}
			}
			for _, res := range plan.Reservations {
				if res.Task == cand.ID {
					want[k] = SAPrediction{res.AtMs, res.AtMs + a.WallLimitMs}
				}
			}
			if want[k].EndMs < want[best].EndMs {
				best = k
			}
			if want[k].EndMs != Unbounded {
				finite++
			}
		}
		if choice != best || !reflect.DeepEqual(preds, want) {
			t.Fatalf("state %d: chose %d %v, reference %d %v\nstate %+v\nalts %+v", i, choice, preds, best, want, s, alts)
		}
	}
	if finite < 1000 {
		t.Fatalf("only %d finite predictions: the test does not exercise the plan", finite)
	}
}
