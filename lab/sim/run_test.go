package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// replay re-derives from a trace alone what the simulator claims, and checks
// the invariants: no machine ever runs two tasks, a preemption names the
// task really running there, every task completes exactly once, no
// organisation is over its limit once all the events of an instant are
// applied (when limits), the work done adds up to each task's size, and the
// energy per organisation as user and as owner.
func replay(t *testing.T, inst *scenario.Instance, cfg Config, events []TraceEvent, r *Result, limits bool) {
	t.Helper()
	org := map[string]int{}
	for i, o := range inst.Orgs {
		org[o.Name] = i
	}
	mach := map[string]int{}
	for i, m := range inst.Machines {
		mach[m.ID] = i
	}
	type seg struct {
		task  string
		start float64
	}
	on := make([]*seg, len(inst.Machines))
	size := map[string]int64{}
	owner := map[string]int{}
	for _, ts := range inst.Tasks {
		size[ts.ID] = ts.SizeMFlop
		owner[ts.ID] = ts.Org
	}
	done := map[string]int{}
	remaining := map[string]float64{}
	for id, s := range size {
		remaining[id] = float64(s)
	}
	userJ := make([]float64, len(inst.Orgs))
	ownerJ := make([]float64, len(inst.Orgs))
	pi := make([]int64, len(inst.Orgs))
	endSeg := func(m int, now float64) (string, float64) {
		s := on[m]
		mc := inst.Machines[m]
		j := float64(mc.BusyMilliW) * (now - s.start) / 1000
		userJ[owner[s.task]] += j
		ownerJ[mc.Owner] += j
		pi[owner[s.task]] -= mc.BusyMilliW
		on[m] = nil
		return s.task, (now - s.start) * float64(mc.MFLOPS)
	}
	checkLimits := func(at float64) {
		if !limits {
			return
		}
		for i, p := range pi {
			if p > inst.Orgs[i].LimitMilliW {
				t.Fatalf("t=%g: org %s at %d mW, limit %d mW", at, inst.Orgs[i].Name, p, inst.Orgs[i].LimitMilliW)
			}
		}
	}
	for k, e := range events {
		m, ok := mach[e.Machine]
		if !ok {
			t.Fatalf("event %d: unknown machine %q", k, e.Machine)
		}
		if k > 0 && e.Time < events[k-1].Time {
			t.Fatalf("event %d: time goes back from %g to %g", k, events[k-1].Time, e.Time)
		}
		if k > 0 && e.Time > events[k-1].Time {
			checkLimits(events[k-1].Time)
		}
		if owner[e.Task] != org[e.Org] {
			t.Fatalf("event %d: task %s reported for org %s", k, e.Task, e.Org)
		}
		switch e.Kind {
		case EventAllocate, EventPreempt:
			if e.Kind == EventPreempt {
				if on[m] == nil || on[m].task != e.Victim || owner[e.Victim] != org[e.VictimOrg] {
					t.Fatalf("event %d: preempt %s on %s, which runs %+v", k, e.Victim, e.Machine, on[m])
				}
				_, work := endSeg(m, e.Time)
				if e.KeptMFlop > work+1e-6 {
					t.Fatalf("event %d: %s keeps %v MFlop of %v done", k, e.Victim, e.KeptMFlop, work)
				}
				if cfg.CheckpointBlockSeconds == 0 && e.KeptMFlop != 0 {
					t.Fatalf("event %d: kept %v without checkpointing", k, e.KeptMFlop)
				}
				remaining[e.Victim] -= e.KeptMFlop
			} else if on[m] != nil {
				t.Fatalf("event %d: allocate %s on %s, which runs %s", k, e.Task, e.Machine, on[m].task)
			}
			for mm, s := range on {
				if s != nil && s.task == e.Task {
					t.Fatalf("event %d: %s placed on %s while running on %s", k, e.Task, e.Machine, inst.Machines[mm].ID)
				}
			}
			if done[e.Task] > 0 {
				t.Fatalf("event %d: %s placed after completing", k, e.Task)
			}
			on[m] = &seg{task: e.Task, start: e.Time}
			pi[owner[e.Task]] += inst.Machines[m].BusyMilliW
		case EventComplete:
			if on[m] == nil || on[m].task != e.Task {
				t.Fatalf("event %d: %s completes on %s, which runs %+v", k, e.Task, e.Machine, on[m])
			}
			task, work := endSeg(m, e.Time)
			if rem := remaining[task]; math.Abs(work-rem) > 1e-6*rem+1 {
				t.Errorf("%s: last segment did %v MFlop, %v remained", task, work, rem)
			}
			done[task]++
		default:
			t.Fatalf("event %d: kind %v", k, e.Kind)
		}
	}
	if len(events) > 0 {
		checkLimits(events[len(events)-1].Time)
	}
	for id := range size {
		if done[id] != 1 {
			t.Errorf("task %s completed %d times", id, done[id])
		}
	}
	var sumU, sumO, sumT float64
	for i, o := range r.Orgs {
		near(t, o.Name+" user J (replayed)", o.UserJ, userJ[i])
		near(t, o.Name+" owner J (replayed)", o.OwnerJ, ownerJ[i])
		sumU += o.UserJ
		sumO += o.OwnerJ
	}
	for _, rec := range r.Tasks {
		sumT += rec.EnergyJ
	}
	near(t, "Σ user J vs Σ owner J", sumU, sumO)
	near(t, "Σ task J vs Σ user J", sumT, sumU)
	near(t, "total J", r.Total.EnergyJ, sumU)
}

// Properties over many random federations, under every real policy, with
// and without checkpointing.
func TestInvariantsRandomFederations(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for _, name := range policy.Names() {
		for _, block := range []float64{0, 300, 137.3} { // a block of fractional seconds keeps fractional MFlop, rounded down
			limits := strings.HasPrefix(name, "ehosep")
			t.Run(fmt.Sprintf("%s/block=%v", name, block), func(t *testing.T) {
				p := mustPolicy(t, name)
				preempted := 0
				for seed := uint64(1); seed <= uint64(seeds); seed++ {
					inst := randomFederation(seed)
					if !limits {
						for i := range inst.Orgs {
							inst.Orgs[i].LimitMilliW = math.MaxInt64 / 4
						}
					}
					var events []TraceEvent
					cfg := Config{
						TickSeconds: DefaultTickSeconds, CheckpointBlockSeconds: block,
						CheckInvariants: true, EnforceLimits: limits,
						Trace: func(e TraceEvent) { events = append(events, e) },
					}
					r, err := Run(context.Background(), inst, p, cfg)
					if err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
					replay(t, inst, cfg, events, r, limits)
					preempted += r.Total.Preemptions
					if t.Failed() {
						t.Fatalf("seed %d failed", seed)
					}
				}
				t.Logf("%d preemptions over %d federations", preempted, seeds)
			})
		}
	}
}

func fmtResult(r *Result) string { return fmt.Sprintf("%#v", *r) }

func TestDeterminism(t *testing.T) {
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			p := mustPolicy(t, name)
			cfg := Config{TickSeconds: DefaultTickSeconds, CheckpointBlockSeconds: DefaultCheckpointBlockSeconds}
			a, err := Run(context.Background(), model1(3, "U2", 0.8), p, cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Run(context.Background(), model1(3, "U2", 0.8), p, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if fmtResult(a) != fmtResult(b) {
				t.Fatal("two runs of the same instance differ")
			}
			c, err := Run(context.Background(), model1(4, "U2", 0.8), p, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if fmtResult(a) == fmtResult(c) {
				t.Fatal("different seeds gave identical results: the comparison is blind")
			}
		})
	}
}

func TestRunManyIndependentOfWorkers(t *testing.T) {
	const runs = 6
	p := mustPolicy(t, "ehosep")
	gen := func(run int) (*scenario.Instance, error) { return model1(100+uint64(run), "U1", 1), nil }
	var first string
	for _, workers := range []int{1, 2, 5, 0} {
		s, err := RunMany(context.Background(), gen, p, DefaultConfig(), runs, workers)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("%#v %#v %#v", s.Orgs, s.Total, *s.First)
		for _, r := range s.PerRun {
			got += fmtResult(r)
		}
		if first == "" {
			first = got
		} else if got != first {
			t.Fatalf("%d workers: summary differs from 1 worker", workers)
		}
		if s.Runs != runs || len(s.PerRun) != runs || s.Orgs[0].TurnaroundMean.N != runs {
			t.Fatalf("runs %d, per run %d, N %d; want %d", s.Runs, len(s.PerRun), s.Orgs[0].TurnaroundMean.N, runs)
		}
	}
	// The summary is the plain statistics of the individual runs, in order.
	vals := make([]float64, runs)
	for k := 0; k < runs; k++ {
		inst, _ := gen(k)
		r, err := Run(context.Background(), inst, p, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		vals[k] = r.Orgs[2].UserJ
	}
	s, err := RunMany(context.Background(), gen, p, DefaultConfig(), runs, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := NewStat(vals); s.Orgs[2].UserJ != want {
		t.Errorf("U3 user J = %+v, want %+v", s.Orgs[2].UserJ, want)
	}
	if len(s.First.Tasks) != 300 || s.PerRun[1].Tasks != nil {
		t.Errorf("first run keeps %d task records, later runs %d; want 300 and none", len(s.First.Tasks), len(s.PerRun[1].Tasks))
	}
}

func TestRunManyTracesRunZeroOnly(t *testing.T) {
	var n int
	cfg := Config{Trace: func(TraceEvent) { n++ }}
	gen := func(run int) (*scenario.Instance, error) { return handFIFO(), nil }
	if _, err := RunMany(context.Background(), gen, fifo{}, cfg, 4, 2); err != nil {
		t.Fatal(err)
	}
	if n != 8 { // handFIFO: 4 allocations and 4 completions
		t.Errorf("trace saw %d events, want the 8 of one run", n)
	}
}

func TestRunManyErrors(t *testing.T) {
	boom := errors.New("boom")
	gen := func(run int) (*scenario.Instance, error) {
		if run == 3 {
			return nil, boom
		}
		return handFIFO(), nil
	}
	_, err := RunMany(context.Background(), gen, fifo{}, Config{}, 8, 2)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "run 3") {
		t.Errorf("err = %v, want run 3's boom", err)
	}
	if _, err := RunMany(context.Background(), gen, fifo{}, Config{}, 0, 2); err == nil {
		t.Error("0 runs: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunMany(ctx, func(int) (*scenario.Instance, error) { return handFIFO(), nil }, fifo{}, Config{}, 4, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

func TestTraceWriterJSONLines(t *testing.T) {
	var buf bytes.Buffer
	w := NewTraceWriter(&buf)
	if _, err := Run(context.Background(), handPreempt(), mustPolicy(t, "ehosep"), Config{Trace: w.Event}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	var lines []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	// a1→mA, a2→mB, preempt a2 by b1, a1 completes, a2→mA, b1 and a2 complete.
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7", len(lines))
	}
	pre := lines[2]
	want := map[string]any{"t": 400.0, "kind": "preempt", "org": "B", "task": "b1", "machine": "mB", "victim": "a2", "victim_org": "A"}
	for k, v := range want {
		if pre[k] != v {
			t.Errorf("preempt line %s = %v, want %v (line %v)", k, pre[k], v, pre)
		}
	}
	if _, has := lines[0]["victim"]; has || lines[0]["kind"] != "allocate" {
		t.Errorf("allocate line = %v: want kind allocate and no victim", lines[0])
	}
	if last := lines[6]; last["kind"] != "complete" || last["task"] != "a2" || last["t"] != 1200.0 {
		t.Errorf("last line = %v, want a2 completing at 1200", last)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTraceWriterError(t *testing.T) {
	w := NewTraceWriter(failWriter{})
	for i := 0; i < 10000; i++ { // more than the buffer holds
		w.Event(TraceEvent{Time: float64(i), Kind: EventComplete, Task: "x"})
	}
	if err := w.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Flush = %v, want disk full", err)
	}
}

func TestWriteTasksCSV(t *testing.T) {
	r, err := Run(context.Background(), handPreempt(), mustPolicy(t, "ehosep"), Config{CheckpointBlockSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTasksCSV(&buf, r, r); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+2*3 {
		t.Fatalf("%d rows, want header + 6", len(rows))
	}
	if strings.Join(rows[0], ",") != "run,id,org,size_mflop,submit_s,first_start_s,completion_s,turnaround_s,run_s,preemptions,wasted_mflop,energy_j" {
		t.Errorf("header = %v", rows[0])
	}
	// a2 (second in submission order): 60000 MFlop, preempted once at 400
	// keeping 27000, done at 930 after 400 + 330 s on machines, wasting
	// 9000 MFlop, 400·12 + 330·10 J.
	want := []string{"0", "a2", "A", "60000", "0", "0", "930", "930", "730", "1", "9000", "8100"}
	if strings.Join(rows[2], ",") != strings.Join(want, ",") {
		t.Errorf("a2 row = %v, want %v", rows[2], want)
	}
	if rows[4][0] != "1" {
		t.Errorf("second result's rows are run %q, want 1", rows[4][0])
	}
}

// A Model-1-sized run (64 machines, 300 tasks, seed 000 table 2) under
// EHOSEP with the 30 s tick: the unit of the reproduction campaign, which
// runs about 112 cases × 60 runs of it.
func BenchmarkModel1EHOSEP(b *testing.B) {
	for _, bc := range []struct {
		name  string
		block float64
		late  string
		frac  float64
	}{
		{"system-limits", 0, "", 0},
		{"U2-late-80pct", 0, "U2", 0.8},
		{"U2-late-80pct-checkpoint", DefaultCheckpointBlockSeconds, "U2", 0.8},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := mustPolicy(b, "ehosep")
			inst := model1(1, bc.late, bc.frac)
			cfg := Config{TickSeconds: DefaultTickSeconds, CheckpointBlockSeconds: bc.block}
			var passes int
			b.ReportAllocs()
			for b.Loop() {
				r, err := Run(context.Background(), inst, p, cfg)
				if err != nil {
					b.Fatal(err)
				}
				passes = r.Passes
			}
			b.ReportMetric(float64(passes), "passes/run")
		})
	}
}

// One campaign case: 60 runs in parallel on every core.
func BenchmarkModel1Case60Runs(b *testing.B) {
	p := mustPolicy(b, "ehosep")
	gen := func(run int) (*scenario.Instance, error) { return model1(uint64(run), "U1", 0.8), nil }
	for b.Loop() {
		if _, err := RunMany(context.Background(), gen, p, DefaultConfig(), 60, 0); err != nil {
			b.Fatal(err)
		}
	}
}
