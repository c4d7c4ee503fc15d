package policy

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// gf converts GFLOPS (as printed in the papers) to MFLOPS; w converts watts
// to milliwatts.
func gf(x float64) int64 { return int64(math.Round(x * 1000)) }
func w(x float64) int64  { return int64(math.Round(x * 1000)) }

// model1 is seed 000 table 2 (L1078): 64 machines, 9192 W.
func model1(limit int64) *State {
	s := &State{Orgs: []Org{{"U1", limit}, {"U2", limit}, {"U3", limit}, {"U4", limit}}}
	add := func(org, n int, g, watts float64) {
		for range n {
			s.Machines = append(s.Machines, Machine{
				ID: s.Orgs[org].Name + "-" + itoa(len(s.Machines)), Owner: org, MFLOPS: gf(g), BusyMilliW: w(watts)})
		}
	}
	add(0, 16, 133.47, 220)
	add(0, 8, 108, 191)
	add(1, 12, 84.53, 99)
	add(1, 8, 95.49, 113.5)
	add(2, 6, 32.42, 134)
	add(2, 6, 17.38, 118)
	add(3, 8, 42.15, 67)
	return s
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

func TestModel1Totals(t *testing.T) {
	s := model1(w(9192))
	tot := ComputeTotals(s)
	// Table 2: 2999.52 / 1778.28 / 298.8 / 338 GFLOPS; 5048 / 2096 / 1512 / 536 W.
	// U4's 8 × 42.15 GFLOPS is 337.2, not the printed 338 (and the total
	// 5413.8, not 5414.6): the table rounds; the CSQ(U4) ≈ 0.936
	// matches 337.2.
	wantQ := []int64{gf(2999.52), gf(1778.28), gf(298.8), gf(337.2)}
	wantP := []int64{w(5048), w(2096), w(1512), w(536)}
	if !reflect.DeepEqual(tot.QuotaMFLOPS, wantQ) || !reflect.DeepEqual(tot.PowerQuotaMilliW, wantP) {
		t.Fatalf("totals = %v %v, want %v %v", tot.QuotaMFLOPS, tot.PowerQuotaMilliW, wantQ, wantP)
	}
	if tot.ComputeSystemMFLOPS != gf(5413.8) || tot.PowerSystemMilliW != w(9192) {
		t.Fatalf("system = %d MFLOPS %d mW, want 5413800 and 9192000", tot.ComputeSystemMFLOPS, tot.PowerSystemMilliW)
	}
	// CSQ worked by hand from table 2 (issue 2): U1 ≈ 0.991, U2 ≈ 0.694,
	// U3 ≈ 2.980, U4 ≈ 0.936.
	for i, want := range []float64{0.991, 0.694, 2.980, 0.936} {
		got := CSQ(tot.PowerQuotaMilliW[i], tot.PowerSystemMilliW, tot.ComputeSystemMFLOPS, tot.QuotaMFLOPS[i])
		if math.Abs(got-want) > 0.0006 {
			t.Errorf("CSQ(U%d) = %.4f, want %.3f", i+1, got, want)
		}
	}
}

func TestFormulas(t *testing.T) {
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"DP deficit", DP(50, 200), -0.75},
		{"DP served exactly", DP(200, 200), 0},
		{"DP excess", DP(300, 200), 0.5},
		{"DP no quota", DP(0, 0), math.Inf(1)},
		{"PRE_Preemp keeps excess", PREPreempt(300, 200, 50), 0.25},
		{"PRE_Preemp into deficit", PREPreempt(300, 200, 150), -0.25},
		{"PRE_Aloc", PREAlloc(50, 200, 100), -0.25},
		{"CSQ equal share", CSQ(100, 400, 1000, 250), 1},
		{"waste without checkpointing", Waste(Running{RunSeconds: 700}, 1000, 0), 700_000},
		{"waste with 5-minute blocks", Waste(Running{RunSeconds: 700}, 1000, 300), 100_000},
		{"waste on a block boundary", Waste(Running{RunSeconds: 600}, 1000, 300), 0},
		{"waste since a recorded checkpoint", Waste(Running{RunSeconds: 700, HasCheckpoint: true, SinceCheckpointSeconds: 42}, 1000, 300), 42_000},
		{"executed", Executed(Running{RunSeconds: 700}, 1000), 700_000},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestFinalState(t *testing.T) {
	for _, tc := range []struct {
		dp      float64
		waiting int
		want    int
	}{{0, 0, 1}, {0.5, 3, 2}, {-0.1, 0, 3}, {-1, 2, 4}} {
		if got := FinalState(tc.dp, tc.waiting); got != tc.want {
			t.Errorf("FinalState(%v, %d) = %d, want %d", tc.dp, tc.waiting, got, tc.want)
		}
	}
}

// fed builds small hand-worked federations: orgs "name:limitW", machines
// "id:owner:GFLOPS:W".
type fed struct{ s State }

func newFed(orgs ...Org) *fed { return &fed{s: State{Orgs: orgs}} }

func (f *fed) machine(id string, owner int, gflops, watts float64) *fed {
	f.s.Machines = append(f.s.Machines, Machine{ID: id, Owner: owner, MFLOPS: gf(gflops), BusyMilliW: w(watts)})
	return f
}

func (f *fed) task(id string, org int, gflop float64, seq uint64) *fed {
	f.s.Queued = append(f.s.Queued, Task{ID: id, Org: org, SizeMFlop: gf(gflop), Seq: seq})
	return f
}

func (f *fed) run(id string, org int, gflop float64, machine string, seconds float64) *fed {
	for i, m := range f.s.Machines {
		if m.ID == machine {
			f.s.Running = append(f.s.Running, Running{Task: Task{ID: id, Org: org, SizeMFlop: gf(gflop)}, Machine: i, RunSeconds: seconds})
			return f
		}
	}
	panic("no machine " + machine)
}

// summary renders decisions as "task@machine" and "task@machine!victim".
func summary(s *State, ds []Decision) string {
	var parts []string
	for _, d := range ds {
		p := d.Task + "@" + s.Machines[d.Machine].ID
		if d.Kind == Preempt {
			p += "!" + d.Victim
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// TestEHOSEPHandWorked checks decision sequences worked by hand from
// algorithms 3-5, one tie-break or rule per case.
func TestEHOSEPHandWorked(t *testing.T) {
	const big = 1e6 // watts: no limit in practice
	tests := []struct {
		name    string
		fed     *fed
		bestFit bool
		want    string
	}{
		{
			// Alg. 4 L835: least energy s/d·c, i.e. least W per GFLOPS;
			// m2 and m3 tie at 1 W/GFLOPS and the larger d wins.
			name: "least energy machine, tie to larger power",
			fed: newFed(Org{"A", w(big)}).
				machine("m1", 0, 100, 200).machine("m2", 0, 50, 50).machine("m3", 0, 100, 100).
				task("t1", 0, 10, 1).task("t2", 0, 20, 2).task("t3", 0, 30, 3),
			want: "t1@m3 t2@m2 t3@m1",
		},
		{
			// Alg. 4 line 1: smallest task first; equal sizes by submission
			// order, then ID.
			name: "smallest task first, ties by submission then id",
			fed: newFed(Org{"A", w(big)}).
				machine("m1", 0, 10, 10).machine("m2", 0, 10, 20).machine("m3", 0, 10, 30).
				task("b", 0, 5, 2).task("a", 0, 5, 2).task("c", 0, 5, 1).task("z", 0, 1, 9),
			want: "z@m1 c@m2 a@m3",
		},
		{
			name:    "best fit serves the largest task first",
			bestFit: true,
			fed: newFed(Org{"A", w(big)}).
				machine("m1", 0, 10, 10).machine("m2", 0, 10, 20).
				task("small", 0, 1, 1).task("large", 0, 9, 2).task("mid", 0, 5, 3),
			want: "large@m1 mid@m2",
		},
		{
			// Alg. 3 line 8: c + PI ≤ Lim. A's 150 W limit admits the
			// 100 W machine, then nothing (100 + 100 > 150; the 40 W machine
			// would fit but it is the less efficient... no: it is chosen by
			// energy among those that fit).
			name: "power limit bounds the machines considered",
			fed: newFed(Org{"A", w(150)}).
				machine("big", 0, 200, 100).machine("small", 0, 10, 40).machine("huge", 0, 1000, 400).
				task("t1", 0, 1, 1).task("t2", 0, 1, 2).task("t3", 0, 1, 3),
			// huge is the most efficient (0.4 W/GFLOPS) but draws 400 W > 150 W.
			// t1 → big (0.5 W/GFLOPS); then PI = 100 W: small fits (140 ≤ 150).
			// Then PI = 140 < 150 but no free machine fits: A stops.
			want: "t1@big t2@small",
		},
		{
			// Alg. 3 line 5: equal DP (both −1) → larger quota first
			// (B: 30 GFLOPS), and between equal quotas the smaller power
			// quota (C: 10 W against A's 20 W).
			name: "organisation order ties: larger quota, then smaller power quota",
			fed: newFed(Org{"A", w(big)}, Org{"B", w(big)}, Org{"C", w(big)}).
				machine("a", 0, 10, 20).machine("b", 1, 30, 30).machine("c", 2, 10, 10).
				machine("x1", 0, 10, 1000).
				task("ta", 0, 1, 1).task("tb", 1, 1, 2).task("tc", 2, 1, 3),
			// B first takes the best machine by energy: c (1 W/GFLOPS),
			// b (1 W/GFLOPS) tie → larger d: b. Then DP_B = 0; A (−1) and
			// C (−1) tie on quota 20 vs 10? A's quota is 20 (a + x1), C's is 10:
			// A first → best remaining: c (1 W/GFLOPS). Then C → a (2), last x1.
			want: "tb@b ta@c tc@a",
		},
		{
			// Alg. 5: A (deficit) preempts B (excess). The victim machine is
			// the one whose task wastes least: tb2 ran 10 s, tb1 100 s.
			// PRE_Preemp(B, y) = (40 − 20 − 10)/20 = 0.5 ≥ 0: preempt; then
			// (30 − 20 − 10)/20 = 0 ≥ 0: preempt again; then DP_B = 0: stop.
			name: "preemption takes the least-waste task while the victim stays in excess",
			fed: newFed(Org{"A", w(big)}, Org{"B", w(big)}).
				machine("a1", 0, 10, 10).machine("a2", 0, 10, 10).machine("b1", 1, 10, 10).machine("b2", 1, 10, 10).
				run("tb1", 1, 100, "a1", 100).run("tb2", 1, 100, "a2", 10).
				run("tb3", 1, 100, "b1", 50).run("tb4", 1, 100, "b2", 60).
				task("ta1", 0, 5, 1).task("ta2", 0, 6, 2).task("ta3", 0, 7, 3),
			want: "ta1@a2!tb2 ta2@b1!tb3",
		},
		{
			// Alg. 5 line 6, second clause: the least-waste victim machine
			// (b, 30 GFLOPS, ran 0 s) would put B into deficit
			// (PRE = (40 − 30 − 30)/30 < 0), but A's limit (100 W) is lower
			// than B's: preempt.
			name: "preempt into deficit when the beneficiary's limit is lower",
			fed: newFed(Org{"A", w(100)}, Org{"B", w(1000)}).
				machine("a", 0, 10, 50).machine("b", 1, 30, 50).
				run("tb1", 1, 100, "a", 100).run("tb2", 1, 100, "b", 0).
				task("ta", 0, 5, 1),
			want: "ta@b!tb2",
		},
		{
			// Same, but A's limit is not lower: no preemption, and faithful to
			// the paper only that one machine is tried, although taking a
			// (PRE = 0) would have been allowed.
			name: "one victim machine tried: no preemption when the rule fails",
			fed: newFed(Org{"A", w(1000)}, Org{"B", w(1000)}).
				machine("a", 0, 10, 50).machine("b", 1, 30, 50).
				run("tb1", 1, 100, "a", 100).run("tb2", 1, 100, "b", 0).
				task("ta", 0, 5, 1),
			want: "",
		},
		{
			// Alg. 5 line 3: the victim organisation is the one in excess with
			// the largest CSQ·PI. B and C are both in excess by one machine;
			// C's machines are less efficient (CSQ higher) and it draws more.
			name: "victim organisation has the largest CSQ·PI",
			fed: newFed(Org{"A", w(big)}, Org{"B", w(big)}, Org{"C", w(big)}).
				machine("a1", 0, 10, 10).machine("a2", 0, 10, 10).
				machine("b1", 1, 10, 10).machine("c1", 2, 10, 100).
				run("tb1", 1, 100, "b1", 5).run("tb2", 1, 100, "a1", 5).
				run("tc1", 2, 100, "c1", 5).run("tc2", 2, 100, "a2", 5).
				task("ta", 0, 1, 1),
			// C's PI = 100 + 10 W with CSQ = (100/130)·(40/10) ≈ 3.08, B's
			// PI = 20 W with CSQ ≈ 0.31: C loses. Victim machine: equal
			// waste and power → ID order: a2 before c1.
			want: "ta@a2!tc2",
		},
		{
			// Algorithm 3 line 7: PI_i < Lim_i is strict; an organisation at
			// its limit is skipped even when machines are free.
			name: "organisation at its limit is not served",
			fed: newFed(Org{"A", w(10)}).
				machine("a1", 0, 10, 10).machine("a2", 0, 10, 10).
				run("t0", 0, 100, "a1", 1).task("t1", 0, 1, 1),
			want: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &tc.fed.s
			got, err := EHOSEP{BestFit: tc.bestFit}.Schedule(s)
			if err != nil {
				t.Fatal(err)
			}
			if g := summary(s, got); g != tc.want {
				t.Errorf("decisions = %q, want %q", g, tc.want)
			}
			ref, err := referenceEHOSEP(s, tc.bestFit)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, ref) {
				t.Errorf("fast %q differs from reference %q", summary(s, got), summary(s, ref))
			}
			if _, err := ApplyDecisions(s, got); err != nil {
				t.Errorf("decisions do not apply: %v", err)
			}
		})
	}
}

func TestPreemptionKeepsCheckpointedWork(t *testing.T) {
	f := newFed(Org{"A", w(1e6)}, Org{"B", w(1e6)}).
		machine("a1", 0, 1, 10).machine("b1", 1, 1, 10).
		run("tb1", 1, 5000, "a1", 700).run("tb2", 1, 5000, "b1", 800).
		task("ta", 0, 1, 1)
	f.s.CheckpointBlockSeconds = 300
	ds, err := EHOSEP{}.Schedule(&f.s)
	if err != nil {
		t.Fatal(err)
	}
	// Waste: a1 700 mod 300 = 100 s · 1 GFLOPS = 100 GFlop; b1 800 mod 300 = 200 s.
	if len(ds) != 1 || ds[0].Victim != "tb1" {
		t.Fatalf("decisions = %q, want ta@a1!tb1", summary(&f.s, ds))
	}
	if ds[0].VictimWasteMFlop != 100_000 || ds[0].VictimKeptMFlop != 600_000 {
		t.Errorf("waste/kept = %v/%v MFlop, want 100000/600000", ds[0].VictimWasteMFlop, ds[0].VictimKeptMFlop)
	}
	after, err := ApplyDecisions(&f.s, ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range after.Queued {
		if q.ID == "tb1" && q.SizeMFlop != gf(5000)-600_000 {
			t.Errorf("requeued tb1 has %d MFlop left, want %d", q.SizeMFlop, gf(5000)-600_000)
		}
	}
}

func TestHOSEPHandWorked(t *testing.T) {
	// Free machines: the fastest first, to the lowest-DP organisation's
	// smallest task; no power limits.
	f := newFed(Org{"A", 1}, Org{"B", 1}).
		machine("slow", 0, 10, 10).machine("fast", 1, 50, 500).
		task("a1", 0, 3, 1).task("b1", 1, 2, 2)
	ds, err := HOSEP{}.Schedule(&f.s)
	if err != nil {
		t.Fatal(err)
	}
	// Both DP −1; B has the larger quota → B first on the fastest machine.
	if g := summary(&f.s, ds); g != "b1@fast a1@slow" {
		t.Errorf("decisions = %q", g)
	}
	// Preemption: B holds both machines; A in deficit takes B's slowest.
	g := newFed(Org{"A", 1}, Org{"B", 1}).
		machine("a", 0, 10, 10).machine("b", 1, 50, 10).
		run("tb1", 1, 100, "a", 5).run("tb2", 1, 100, "b", 5).task("ta", 0, 1, 1)
	ds, err = HOSEP{}.Schedule(&g.s)
	if err != nil {
		t.Fatal(err)
	}
	// PRE_Preemp(B, a) = (60 − 50 − 10)/50 = 0 ≥ 0.
	if got := summary(&g.s, ds); got != "ta@a!tb1" {
		t.Errorf("preemption = %q, want ta@a!tb1", got)
	}
}

func TestOSEPCountsMachines(t *testing.T) {
	// B runs on all three machines, A owns two: OSEP gives A back two
	// machines, whatever their power.
	f := newFed(Org{"A", 1}, Org{"B", 1}).
		machine("a1", 0, 10, 10).machine("a2", 0, 99, 10).machine("b1", 1, 10, 10).
		run("tb1", 1, 100, "a1", 5).run("tb2", 1, 100, "a2", 1).run("tb3", 1, 100, "b1", 3).
		task("ta1", 0, 1, 1).task("ta2", 0, 2, 2).task("ta3", 0, 3, 3)
	ds, err := OSEP{}.Schedule(&f.s)
	if err != nil {
		t.Fatal(err)
	}
	// Least waste first: tb1 on a1 (5 s · 10 = 50) vs tb2 (1 s · 99 = 99) vs
	// tb3 (30): tb3, then tb1.
	if g := summary(&f.s, ds); g != "ta1@b1!tb3 ta2@a1!tb1" {
		t.Errorf("decisions = %q", g)
	}
}

func TestValidateRejectsMalformedState(t *testing.T) {
	base := func() *fed {
		return newFed(Org{"A", 10}).machine("m", 0, 1, 1).task("t", 0, 1, 1)
	}
	tests := []struct {
		name   string
		mutate func(s *State)
		want   string
	}{
		{"owner out of range", func(s *State) { s.Machines[0].Owner = 3 }, "owner index"},
		{"zero power", func(s *State) { s.Machines[0].MFLOPS = 0 }, "must be > 0"},
		{"task of unknown org", func(s *State) { s.Queued[0].Org = -1 }, "org index"},
		{"duplicate task", func(s *State) { s.Queued = append(s.Queued, s.Queued[0]) }, "duplicate id"},
		{"queued task also running", func(s *State) { s.Running = []Running{{Task: s.Queued[0], Machine: 0}} }, "duplicate id"},
		{"machine runs two tasks", func(s *State) {
			s.Running = []Running{{Task: Task{ID: "x"}, Machine: 0}, {Task: Task{ID: "y"}, Machine: 0}}
		}, "runs more than its capacity"},
		{"NaN run time", func(s *State) { s.Running = []Running{{Task: Task{ID: "x"}, RunSeconds: math.NaN()}} }, "finite"},
		{"negative limit", func(s *State) { s.Orgs[0].LimitMilliW = -1 }, "limit"},
		{"duplicate org", func(s *State) { s.Orgs = append(s.Orgs, s.Orgs[0]) }, "duplicate name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			tc.mutate(&f.s)
			for _, name := range Names() {
				p, _ := New(name)
				_, err := p.Schedule(&f.s)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: err = %v, want it to mention %q", name, err, tc.want)
				}
			}
		})
	}
	if _, err := New("fifo"); err == nil {
		t.Error("New(fifo) succeeded")
	}
}

// randomState draws a small federation with many ties: few distinct powers,
// draws, sizes and run times, so the tie-breaks are exercised.
func randomState(r *rand.Rand) *State {
	s := &State{}
	nOrg := 1 + r.IntN(5)
	for i := range nOrg {
		s.Orgs = append(s.Orgs, Org{Name: string(rune('A' + i))})
	}
	nM := 1 + r.IntN(16)
	for i := range nM {
		s.Machines = append(s.Machines, Machine{
			ID: "m" + itoa(i), Owner: r.IntN(nOrg),
			MFLOPS: int64(10+10*r.IntN(3)) * 1000, BusyMilliW: int64(50+50*r.IntN(3)) * 1000})
	}
	tot := ComputeTotals(s)
	for i := range s.Orgs {
		switch r.IntN(4) {
		case 0:
			s.Orgs[i].LimitMilliW = tot.PowerSystemMilliW
		case 1:
			s.Orgs[i].LimitMilliW = tot.PowerQuotaMilliW[i] * int64(50+50*r.IntN(3)) / 100
		default:
			s.Orgs[i].LimitMilliW = int64(r.IntN(6)) * 50_000
		}
	}
	perm := r.Perm(nM)
	nRun := r.IntN(nM + 1)
	seq := uint64(0)
	pi := make([]int64, nOrg)
	for k := range nRun {
		seq++
		org := r.IntN(nOrg)
		if pi[org]+s.Machines[perm[k]].BusyMilliW > s.Orgs[org].LimitMilliW {
			continue // a committed state never has PI over the limit
		}
		pi[org] += s.Machines[perm[k]].BusyMilliW
		s.Running = append(s.Running, Running{
			Task:    Task{ID: "r" + itoa(k), Org: org, SizeMFlop: int64(1+r.IntN(4)) * 100_000, Seq: seq},
			Machine: perm[k], RunSeconds: float64(r.IntN(4) * 200)})
	}
	nQ := r.IntN(25)
	for k := range nQ {
		seq++
		s.Queued = append(s.Queued, Task{ID: "q" + itoa(k), Org: r.IntN(nOrg),
			SizeMFlop: int64(1+r.IntN(4)) * 100_000, Seq: uint64(r.IntN(int(seq) + 1))})
	}
	if r.IntN(2) == 0 {
		s.CheckpointBlockSeconds = 300
	}
	return s
}

// TestEHOSEPProperties checks, on thousands of random federations, that the
// indexed EHOSEP agrees with the reference decision for decision, never
// breaks a limit or double-books a machine, never ping-pongs, is
// deterministic whatever the input order, and stops in one of the final
// states i-iv of seed 000 §3.4 with no organisation left servable.
func TestEHOSEPProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for iter := range n {
		s := randomState(r)
		for _, bestFit := range []bool{false, true} {
			p := EHOSEP{BestFit: bestFit}
			got, err := p.Schedule(s)
			if err != nil {
				t.Fatalf("case %d: %v", iter, err)
			}
			ref, err := referenceEHOSEP(s, bestFit)
			if err != nil {
				t.Fatalf("case %d: reference: %v", iter, err)
			}
			if !reflect.DeepEqual(got, ref) {
				t.Fatalf("case %d (bestFit %v): fast %q != reference %q", iter, bestFit, summary(s, got), summary(s, ref))
			}
			// A prepared Federation changes nothing but the cost.
			fed, err := NewFederation(len(s.Orgs), s.Machines)
			if err != nil {
				t.Fatal(err)
			}
			withFed := *s
			withFed.Federation = fed
			if g, err := p.Schedule(&withFed); err != nil || !reflect.DeepEqual(g, got) {
				t.Fatalf("case %d: with a Federation: %q, %v; without: %q", iter, summary(s, g), err, summary(s, got))
			}
			// Limits and machines: ApplyDecisions rejects any decision that
			// double-books a machine or takes an org over its limit.
			after, err := ApplyDecisions(s, got)
			if err != nil {
				t.Fatalf("case %d: %v", iter, err)
			}
			checkNoPingPong(t, iter, got)
			// Quiescence: the pass stopped because nobody can be served, so
			// a second pass on the result decides nothing.
			again, err := p.Schedule(after)
			if err != nil {
				t.Fatal(err)
			}
			if len(again) != 0 {
				t.Fatalf("case %d: second pass decided %q", iter, summary(after, again))
			}
			checkFinalStates(t, iter, after)
			// Determinism: shuffled inputs give the same decisions.
			sh := *s
			sh.Queued = append([]Task(nil), s.Queued...)
			sh.Running = append([]Running(nil), s.Running...)
			r.Shuffle(len(sh.Queued), func(a, b int) { sh.Queued[a], sh.Queued[b] = sh.Queued[b], sh.Queued[a] })
			r.Shuffle(len(sh.Running), func(a, b int) { sh.Running[a], sh.Running[b] = sh.Running[b], sh.Running[a] })
			if g2, _ := p.Schedule(&sh); !reflect.DeepEqual(g2, got) {
				t.Fatalf("case %d: input order changed the decisions", iter)
			}
		}
		for _, name := range []string{"hosep", "osep"} {
			p, _ := New(name)
			ds, err := p.Schedule(s)
			if err != nil {
				t.Fatalf("case %d %s: %v", iter, name, err)
			}
			noLimits := *s
			noLimits.Orgs = nil
			for _, o := range s.Orgs {
				noLimits.Orgs = append(noLimits.Orgs, Org{Name: o.Name, LimitMilliW: math.MaxInt64 / 4})
			}
			after, err := ApplyDecisions(&noLimits, ds)
			if err != nil {
				t.Fatalf("case %d %s: %v", iter, name, err)
			}
			if again, _ := p.Schedule(after); len(again) != 0 {
				t.Fatalf("case %d %s: not quiescent: %q", iter, name, summary(after, again))
			}
			checkNoPingPong(t, iter, ds)
		}
	}
}

// checkNoPingPong checks what the dissertation's argument against a
// preempt/re-allocate cycle (seed 000 L1000-1004) guarantees in practice:
// the pass terminates (Schedule has a bound and errors past it), a task that
// was running when the pass began loses work at most once, and a machine
// that goes back to the organisation it was taken from in the same pass
// only ever stops a task placed in this very pass (no work lost).
//
// The argument itself only covers line 6's second clause (Lim_i < Lim_z).
// Through the first clause (PRE_Preemp ≥ 0) a machine can return within one
// pass: i takes machines from z by the limit clause until z is in deficit
// and i in excess, then z takes the last one back with PRE_Preemp(i) ≥ 0.
// The random search below finds such cases; they converge and the next
// pass decides nothing (checked by the caller).
func checkNoPingPong(t *testing.T, iter int, ds []Decision) {
	t.Helper()
	placed := map[string]bool{}
	from := map[int]int{} // machine → org it was last taken from
	victims := map[string]bool{}
	for _, d := range ds {
		if d.Kind == Preempt {
			if !placed[d.Victim] {
				if victims[d.Victim] {
					t.Fatalf("case %d: running task %s preempted twice in one pass", iter, d.Victim)
				}
				victims[d.Victim] = true
			}
			if prev, ok := from[d.Machine]; ok && prev == d.Org && !placed[d.Victim] {
				t.Fatalf("case %d: machine %d went back to org %d stopping real work (%s)", iter, d.Machine, d.Org, d.Victim)
			}
			from[d.Machine] = d.VictimOrg
		}
		placed[d.Task] = true
	}
}

// checkFinalStates verifies seed 000 §3.4's non-service conditions by
// independent scans: an organisation with waiting work and room under its
// limit has no free machine that fits, and if it is in deficit, preemption
// is impossible (nobody in excess, no fitting victim machine on the chosen
// victim, or the rule of line 6 fails).
func checkFinalStates(t *testing.T, iter int, s *State) {
	t.Helper()
	tot, use := ComputeTotals(s), ComputeUsage(s)
	busy := make([]bool, len(s.Machines))
	for _, r := range s.Running {
		busy[r.Machine] = true
	}
	for i, o := range s.Orgs {
		dp := DP(use.AllocatedMFLOPS[i], tot.QuotaMFLOPS[i])
		st := FinalState(dp, use.Waiting[i])
		if use.PIMilliW[i] > o.LimitMilliW {
			t.Fatalf("case %d: org %s PI %d > limit %d", iter, o.Name, use.PIMilliW[i], o.LimitMilliW)
		}
		if (st != 2 && st != 4) || use.PIMilliW[i] >= o.LimitMilliW {
			continue
		}
		for m, mc := range s.Machines {
			if !busy[m] && mc.BusyMilliW+use.PIMilliW[i] <= o.LimitMilliW {
				t.Fatalf("case %d: org %s in state %d but free machine %s fits", iter, o.Name, st, mc.ID)
			}
		}
	}
}
