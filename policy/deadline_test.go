package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// hour is the run time of hourWork on a 1000-MFLOPS machine: 3 600 000 ms,
// 3 960 000 ms with the 10 % margin.
const (
	hourWork   = int64(3_600_000)
	hourMargin = int64(3_960_000)
)

func freeDM(id string, mtbf, mflops int64) DeadlineMachine {
	return DeadlineMachine{ID: id, MTBFMs: mtbf, MFLOPS: mflops}
}

func busyDM(id string, mtbf, mflops int64, c TaskClass, task string, remaining int64, reserved bool) DeadlineMachine {
	return DeadlineMachine{ID: id, MTBFMs: mtbf, MFLOPS: mflops, Running: c, RunningID: task, RemainingMFlop: remaining, Reserved: reserved}
}

func soft(deadline int64) DeadlineTask {
	return DeadlineTask{ID: "t", Class: SoftDeadline, SizeMFlop: hourWork, DeadlineMs: deadline}
}

var niceTask = DeadlineTask{ID: "t", Class: Nice, SizeMFlop: hourWork}

func TestPredictor(t *testing.T) {
	for _, c := range []struct{ work, mflops, run, margin int64 }{
		{hourWork, 1000, 3_600_000, 3_960_000},
		{1, 3, 334, 368},                           // 1000/3 = 333.3 -> 334; 334·1.1 = 367.4 -> 368
		{2770, 2770, 1000, 1100},                   // one second on the seed's mean machine
		{39_888_000, 2770, 14_400_000, 15_840_000}, // the seed's smallest task: 4 h (L1199)
	} {
		if got := PredictRunMs(c.work, c.mflops); got != c.run {
			t.Errorf("PredictRunMs(%d, %d) = %d, want %d", c.work, c.mflops, got, c.run)
		}
		if got := WithMargin(c.run); got != c.margin {
			t.Errorf("WithMargin(%d) = %d, want %d", c.run, got, c.margin)
		}
	}
}

// TestMapDeadlineBranches works one case per branch of figures 4.1 and 4.2
// by hand. All machines are 1000 MFLOPS unless said: the task needs 1 h,
// 3 960 000 ms with the margin; now is 0.
// TestAvailableMFLOPS: the speed left to the grid, rounded down, at least
// 1, with the load clamped to 0-1000 and no overflow on large speeds.
func TestAvailableMFLOPS(t *testing.T) {
	for _, c := range []struct{ mflops, load, want int64 }{
		{10_000, 0, 10_000}, {10_000, 250, 7500}, {10_000, 1000, 1}, {10_000, 2000, 1}, {10_000, -5, 10_000},
		{1999, 500, 999}, {3, 334, 1}, {1 << 60, 500, 1 << 59},
	} {
		if got := AvailableMFLOPS(c.mflops, c.load); got != c.want {
			t.Errorf("AvailableMFLOPS(%d, %d) = %d, want %d", c.mflops, c.load, got, c.want)
		}
	}
}

func TestMapDeadlineBranches(t *testing.T) {
	cases := []struct {
		name     string
		machines []DeadlineMachine
		may      []bool
		task     DeadlineTask
		draw     uint64
		want     Mapping
	}{
		{"soft: most stable free machine that meets the deadline (fig 4.1 L19-25)",
			// c is the most stable but at 500 MFLOPS needs 7 920 000 ms.
			[]DeadlineMachine{freeDM("a", 100, 1000), freeDM("b", 500, 1000), freeDM("c", 900, 500)}, nil,
			soft(4_000_000), 0, Mapping{Outcome: MapRun, Machine: 1, FinishMs: hourMargin}},
		{"soft: deadline exactly at the predicted finish is met",
			[]DeadlineMachine{freeDM("a", 100, 1000)}, nil,
			soft(hourMargin), 0, Mapping{Outcome: MapRun, Machine: 0, FinishMs: hourMargin}},
		{"soft: MTBF tie broken by ID",
			[]DeadlineMachine{freeDM("z", 500, 1000), freeDM("y", 500, 1000)}, nil,
			soft(hourMargin), 0, Mapping{Outcome: MapRun, Machine: 1, FinishMs: hourMargin}},
		{"soft: no free machine, preempt the nice task on the most stable machine that meets it (L3-7)",
			[]DeadlineMachine{busyDM("a", 100, 1000, Nice, "n1", 5, false), busyDM("b", 300, 1000, Nice, "n2", 5, true),
				busyDM("c", 900, 1000, SoftDeadline, "s1", 5, false), busyDM("d", 950, 400, Nice, "n3", 5, false)}, nil,
			soft(4_000_000), 0, Mapping{Outcome: MapPreemptNice, Machine: 1, Victim: "n2", FinishMs: hourMargin}},
		{"soft: a protected nice task is not preempted; the next most stable is",
			[]DeadlineMachine{busyDM("a", 100, 1000, Nice, "n1", 5, false), {ID: "b", MTBFMs: 900, MFLOPS: 1000, Running: Nice, RunningID: "n2", RemainingMFlop: 5, Protected: true}}, nil,
			soft(4_000_000), 0, Mapping{Outcome: MapPreemptNice, Machine: 0, Victim: "n1", FinishMs: hourMargin}},
		{"soft: free machines too slow, preempt a nice task (L27-31)",
			[]DeadlineMachine{freeDM("slow", 900, 500), busyDM("a", 100, 1000, Nice, "n1", 5, false)}, nil,
			soft(4_000_000), 0, Mapping{Outcome: MapPreemptNice, Machine: 1, Victim: "n1", FinishMs: hourMargin}},
		{"soft: reserve behind a running soft task when the sum meets it (L9-12)",
			// b: 1 800 000 + 3 600 000 MFlop = 5 400 000 ms, 5 940 000 with margin;
			// a's nice task is on a 500-MFLOPS machine (7 920 000 ms): no preemption.
			[]DeadlineMachine{busyDM("a", 100, 500, Nice, "n1", 5, false), busyDM("b", 900, 1000, SoftDeadline, "s1", 1_800_000, false),
				busyDM("c", 950, 1000, SoftDeadline, "s2", 1_800_000, true)}, nil,
			soft(6_000_000), 0, Mapping{Outcome: MapReserveSoft, Machine: 1, FinishMs: 5_940_000}},
		{"soft: free machines too slow, reserve behind a soft task (L33-36)",
			[]DeadlineMachine{freeDM("slow", 900, 500), busyDM("b", 100, 1000, SoftDeadline, "s1", 1_800_000, false)}, nil,
			soft(6_000_000), 0, Mapping{Outcome: MapReserveSoft, Machine: 1, FinishMs: 5_940_000}},
		{"soft: refused when the sum misses the deadline (L13-16)",
			[]DeadlineMachine{busyDM("b", 900, 1000, SoftDeadline, "s1", 1_800_000, false)}, nil,
			soft(5_939_999), 0, Mapping{Outcome: MapRefused, Machine: -1}},
		{"soft: refused when free machines are too slow and nothing else fits (L37-40)",
			[]DeadlineMachine{freeDM("slow", 900, 500), busyDM("b", 900, 1000, SoftDeadline, "s1", 1, true)}, nil,
			soft(4_000_000), 0, Mapping{Outcome: MapRefused, Machine: -1}},
		{"soft: a machine EHOSEP forbids is invisible",
			[]DeadlineMachine{freeDM("a", 100, 1000), freeDM("b", 900, 1000)}, []bool{true, false},
			soft(4_000_000), 0, Mapping{Outcome: MapRun, Machine: 0, FinishMs: hourMargin}},
		{"nice: least stable free machine, whatever its speed (fig 4.2 L3-6)",
			[]DeadlineMachine{freeDM("a", 500, 1000), freeDM("b", 100, 10), busyDM("c", 50, 1000, Nice, "n1", 5, false)}, nil,
			niceTask, 0, Mapping{Outcome: MapRun, Machine: 1}},
		{"nice: no free machine, reserve behind the first (most stable) unreserved nice task (L8-11)",
			[]DeadlineMachine{busyDM("a", 100, 1000, Nice, "n1", 5, false), busyDM("b", 500, 1000, Nice, "n2", 5, true),
				busyDM("c", 300, 1000, Nice, "n3", 5, false), busyDM("d", 900, 1000, SoftDeadline, "s1", 5, false)}, nil,
			niceTask, 0, Mapping{Outcome: MapReserveNice, Machine: 2}},
		{"nice: nothing to reserve, the queue of machine Draw mod n in ID order (L13-16)",
			[]DeadlineMachine{busyDM("c", 100, 1000, SoftDeadline, "s1", 5, false), busyDM("a", 500, 1000, Nice, "n2", 5, true),
				busyDM("b", 900, 1000, SoftDeadline, "s2", 5, true)}, nil,
			niceTask, 4, Mapping{Outcome: MapQueueRandom, Machine: 2}}, // 4 mod 3 = 1: "b"
		{"nice: random only among the machines it may use",
			[]DeadlineMachine{busyDM("c", 100, 1000, SoftDeadline, "s1", 5, false), busyDM("a", 500, 1000, Nice, "n2", 5, true),
				busyDM("b", 900, 1000, SoftDeadline, "s2", 5, true)}, []bool{true, true, false},
			niceTask, 3, Mapping{Outcome: MapQueueRandom, Machine: 0}}, // a, c; 3 mod 2 = 1: "c"
		{"nice: refused when it may use no machine",
			[]DeadlineMachine{freeDM("a", 100, 1000)}, []bool{false},
			niceTask, 0, Mapping{Outcome: MapRefused, Machine: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := DeadlineInput{Machines: c.machines, May: c.may, Task: c.task, Draw: c.draw}
			got, err := MapDeadline(in)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("MapDeadline = %+v, want %+v", got, c.want)
			}
			ref, err := referenceMapDeadline(in)
			if err != nil || ref != c.want {
				t.Errorf("reference = %+v, %v; want %+v", ref, err, c.want)
			}
		})
	}
}

func TestMapDeadlineRejectsBadInput(t *testing.T) {
	ok := DeadlineInput{Machines: []DeadlineMachine{freeDM("a", 1, 1000)}, Task: soft(10)}
	cases := []struct {
		name, want string
		edit       func(*DeadlineInput)
	}{
		{"class", "neither nice", func(in *DeadlineInput) { in.Task.Class = 7 }},
		{"size", "size 0", func(in *DeadlineInput) { in.Task.SizeMFlop = 0 }},
		{"huge size", "outside [1, 2^40]", func(in *DeadlineInput) { in.Task.SizeMFlop = MaxDeadlineMFlop + 1 }},
		{"now", "now -1", func(in *DeadlineInput) { in.NowMs = -1 }},
		{"mflops", "MFLOPS 0", func(in *DeadlineInput) { in.Machines[0].MFLOPS = 0 }},
		{"mtbf", "negative MTBF", func(in *DeadlineInput) { in.Machines[0].MTBFMs = -1 }},
		{"duplicate", "duplicate ID", func(in *DeadlineInput) { in.Machines = append(in.Machines, freeDM("a", 1, 1)) }},
		{"may", "1 may entries for 2", func(in *DeadlineInput) {
			in.Machines = append(in.Machines, freeDM("b", 1, 1))
			in.May = []bool{true}
		}},
		{"free with reservation", "free but", func(in *DeadlineInput) { in.Machines[0].Reserved = true }},
		{"running class", "running class 9", func(in *DeadlineInput) { in.Machines[0].Running = 9 }},
	}
	for _, c := range cases {
		in := ok
		in.Machines = append([]DeadlineMachine(nil), ok.Machines...)
		c.edit(&in)
		_, err := MapDeadline(in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func randomDeadlineInput(r *rand.Rand) DeadlineInput {
	n := r.IntN(8)
	in := DeadlineInput{NowMs: r.Int64N(1_000_000), Draw: r.Uint64()}
	for j := range n {
		m := DeadlineMachine{ID: fmt.Sprintf("m%d", r.IntN(3*n+1)*10+j), MFLOPS: 1 + r.Int64N(4000), MTBFMs: r.Int64N(4) * 1000}
		switch r.IntN(3) {
		case 1:
			m.Running, m.RunningID = Nice, fmt.Sprintf("n%d", j)
		case 2:
			m.Running, m.RunningID = SoftDeadline, fmt.Sprintf("s%d", j)
		}
		if m.Running != 0 {
			m.RemainingMFlop = r.Int64N(3_000_000)
			m.Reserved = r.IntN(3) == 0
			m.Protected = r.IntN(4) == 0
		}
		in.Machines = append(in.Machines, m)
	}
	if r.IntN(3) == 0 {
		in.May = make([]bool, n)
		for j := range in.May {
			in.May[j] = r.IntN(4) != 0
		}
	}
	in.Task = DeadlineTask{ID: "t", Class: Nice, SizeMFlop: 1 + r.Int64N(3_000_000)}
	if r.IntN(2) == 0 {
		in.Task.Class = SoftDeadline
		in.Task.DeadlineMs = in.NowMs + r.Int64N(8_000_000)
	}
	return in
}

// TestMapDeadlineMatchesReference checks the one-scan mapping against the
// line-by-line transcription on random inputs, and that every outcome is
// reached.
func TestMapDeadlineMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 4))
	seen := map[MapOutcome]int{}
	for i := range 200_000 {
		in := randomDeadlineInput(r)
		got, err := MapDeadline(in)
		ref, rerr := referenceMapDeadline(in)
		if (err != nil) != (rerr != nil) || got != ref {
			t.Fatalf("case %d: %+v\nMapDeadline = %+v, %v\nreference = %+v, %v", i, in, got, err, ref, rerr)
		}
		if err == nil {
			seen[got.Outcome]++
			checkMapping(t, in, got)
		}
	}
	for o := MapRun; o <= MapRefused; o++ {
		if seen[o] == 0 {
			t.Errorf("outcome %v never reached", o)
		}
	}
}

// checkMapping asserts what the seed says of each outcome, independently of
// how the machine was chosen.
func checkMapping(t *testing.T, in DeadlineInput, m Mapping) {
	t.Helper()
	if m.Outcome == MapRefused {
		return
	}
	mc := in.Machines[m.Machine]
	if in.May != nil && !in.May[m.Machine] {
		t.Fatalf("%+v: placed on machine %d it may not use", in, m.Machine)
	}
	if in.Task.Class == SoftDeadline && m.FinishMs > in.Task.DeadlineMs {
		t.Fatalf("%+v: soft task placed to finish at %d after its deadline", in, m.FinishMs)
	}
	wantRunning := map[MapOutcome]TaskClass{MapRun: 0, MapPreemptNice: Nice, MapReserveSoft: SoftDeadline, MapReserveNice: Nice}
	if c, ok := wantRunning[m.Outcome]; ok && mc.Running != c {
		t.Fatalf("%+v: outcome %v on a machine running %v", in, m.Outcome, mc.Running)
	}
	if m.Outcome == MapPreemptNice && mc.Protected {
		t.Fatalf("%+v: preempted a protected task", in)
	}
	if (m.Outcome == MapReserveSoft || m.Outcome == MapReserveNice) && mc.Reserved {
		t.Fatalf("%+v: reserved a machine already reserved", in)
	}
}

func TestMTBFHandComputed(t *testing.T) {
	up := func(at int64) AvailabilityEvent { return AvailabilityEvent{AtMs: at, Up: true} }
	down := func(at int64) AvailabilityEvent { return AvailabilityEvent{AtMs: at} }
	cases := []struct {
		name   string
		events []AvailabilityEvent
		now    int64
		want   Stability
	}{
		{"no history", nil, 100, Stability{}},
		{"up, never failed: MTBF is the time seen up", []AvailabilityEvent{up(10)}, 110, Stability{UpMs: 100, MTBFMs: 100}},
		// up 0-100, down 100-130, up 130-250, down 250-300, up 300-400:
		// up 100+120+100 = 320 over 2 failures = 160.
		{"two failures", []AvailabilityEvent{up(0), down(100), up(130), down(250), up(300)}, 400,
			Stability{UpMs: 320, DownMs: 80, Failures: 2, MTBFMs: 160}},
		{"down now", []AvailabilityEvent{up(0), down(100), up(130), down(250)}, 400,
			Stability{UpMs: 220, DownMs: 180, Failures: 2, MTBFMs: 110}},
		{"repeats and events before joining are ignored",
			[]AvailabilityEvent{down(0), up(5), up(50), down(105), down(110), up(200)}, 205,
			Stability{UpMs: 105, DownMs: 95, Failures: 1, MTBFMs: 105}},
		{"rounded down", []AvailabilityEvent{up(0), down(10), up(10), down(21), up(21), down(31)}, 31,
			Stability{UpMs: 31, Failures: 3, MTBFMs: 10}},
	}
	for _, c := range cases {
		got, err := MTBF(c.events, c.now)
		if err != nil || got != c.want {
			t.Errorf("%s: MTBF = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if _, err := MTBF([]AvailabilityEvent{up(10), down(5)}, 20); err == nil || !strings.Contains(err.Error(), "before event 0") {
		t.Errorf("out of order: err = %v", err)
	}
	if _, err := MTBF([]AvailabilityEvent{up(30)}, 20); err == nil || !strings.Contains(err.Error(), "outside [0, now=20]") {
		t.Errorf("after now: err = %v", err)
	}
}

func TestMTBFMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 2))
	for i := range 5000 {
		var ev []AvailabilityEvent
		at := r.Int64N(20)
		for range r.IntN(10) {
			at += r.Int64N(30)
			ev = append(ev, AvailabilityEvent{AtMs: at, Up: r.IntN(2) == 0})
		}
		now := at + r.Int64N(30)
		got, err := MTBF(ev, now)
		if want := referenceMTBF(ev, now); err != nil || got != want {
			t.Fatalf("case %d: %+v now %d: MTBF = %+v, %v; reference %+v", i, ev, now, got, err, want)
		}
	}
}

// TestDeadlineMappingKeepsPowerLimit is the composition property: whatever
// the mapping decides among the machines DeadlineMay allows, with the
// running tasks DeadlineProtected protects, PI <= Lim still holds for every
// organisation after the decision is applied, and a soft task takes another
// organisation's machine only as EHOSEP's algorithm 5 would (from one in
// excess, for one in deficit). Without the restriction both fail, so the
// test can.
func TestDeadlineMappingKeepsPowerLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 3))
	unrestrictedBroke, unprotectedTook := 0, 0
	for i := range 20_000 {
		s, in, pi := randomLimitedState(r)
		task := Task{ID: "new", Org: r.IntN(len(s.Orgs)), SizeMFlop: in.Task.SizeMFlop}
		in.May = DeadlineMay(s, task)
		protected := DeadlineProtected(s, task)
		dp := orgDPs(s)
		for _, restricted := range []bool{true, false} {
			for j := range in.Machines {
				in.Machines[j].Protected = restricted && protected[j]
			}
			if !restricted {
				in.May = nil
			}
			m, err := MapDeadline(in)
			if err != nil {
				t.Fatal(err)
			}
			after := append([]int64(nil), pi...)
			switch m.Outcome {
			case MapRun:
				after[task.Org] += s.Machines[m.Machine].BusyMilliW
			case MapPreemptNice:
				for _, run := range s.Running {
					if run.Machine != m.Machine {
						continue
					}
					after[run.Task.Org] -= s.Machines[m.Machine].BusyMilliW
					if v := run.Task.Org; v != task.Org && !(dp[v] > 0 && dp[task.Org] < 0) {
						if restricted {
							t.Fatalf("case %d: org %d (DP %v) took a machine from org %d (DP %v)", i, task.Org, dp[task.Org], v, dp[v])
						}
						unprotectedTook++
					}
				}
				after[task.Org] += s.Machines[m.Machine].BusyMilliW
			}
			for o, p := range after {
				if p > s.Orgs[o].LimitMilliW {
					if restricted {
						t.Fatalf("case %d: %v on machine %d: org %d PI %d > Lim %d", i, m.Outcome, m.Machine, o, p, s.Orgs[o].LimitMilliW)
					}
					unrestrictedBroke++
					break
				}
			}
		}
	}
	if unrestrictedBroke == 0 || unprotectedTook == 0 {
		t.Fatalf("the unrestricted mapping broke %d limits and took %d machines against EHOSEP's rule: the property test exercises nothing", unrestrictedBroke, unprotectedTook)
	}
}

// orgDPs is each organisation's DP, recomputed by a plain scan.
func orgDPs(s *State) []float64 {
	quota, alloc := make([]int64, len(s.Orgs)), make([]int64, len(s.Orgs))
	for _, m := range s.Machines {
		quota[m.Owner] += m.MFLOPS
	}
	for _, r := range s.Running {
		alloc[r.Task.Org] += s.Machines[r.Machine].MFLOPS
	}
	dp := make([]float64, len(s.Orgs))
	for o := range dp {
		dp[o] = DP(alloc[o], quota[o])
	}
	return dp
}

// randomLimitedState builds one-slot machines, organisations with limits,
// and running tasks within the limits; the mapping input mirrors it.
func randomLimitedState(r *rand.Rand) (*State, DeadlineInput, []int64) {
	s := &State{}
	for o := range 1 + r.IntN(3) {
		s.Orgs = append(s.Orgs, Org{Name: fmt.Sprintf("o%d", o), LimitMilliW: r.Int64N(500)})
	}
	pi := make([]int64, len(s.Orgs))
	in := DeadlineInput{NowMs: 0, Draw: r.Uint64()}
	for j := range 1 + r.IntN(6) {
		mc := Machine{ID: fmt.Sprintf("m%d", j), Owner: r.IntN(len(s.Orgs)), MFLOPS: 500 + r.Int64N(1500), BusyMilliW: 1 + r.Int64N(200)}
		s.Machines = append(s.Machines, mc)
		dm := DeadlineMachine{ID: mc.ID, MFLOPS: mc.MFLOPS, MTBFMs: r.Int64N(5)}
		if o := r.IntN(len(s.Orgs)); r.IntN(2) == 0 && pi[o]+mc.BusyMilliW <= s.Orgs[o].LimitMilliW {
			pi[o] += mc.BusyMilliW
			id := fmt.Sprintf("r%d", j)
			s.Running = append(s.Running, Running{Task: Task{ID: id, Org: o, SizeMFlop: 1}, Machine: j})
			dm.Running, dm.RunningID, dm.RemainingMFlop = Nice, id, r.Int64N(2_000_000)
			if r.IntN(2) == 0 {
				dm.Running = SoftDeadline
			}
		}
		in.Machines = append(in.Machines, dm)
	}
	in.Task = DeadlineTask{ID: "new", Class: SoftDeadline, SizeMFlop: 1 + r.Int64N(2_000_000), DeadlineMs: r.Int64N(6_000_000)}
	if r.IntN(2) == 0 {
		in.Task.Class, in.Task.DeadlineMs = Nice, 0
	}
	return s, in, pi
}
