package sim

import (
	"cmp"
	"context"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

func readSmallSWF(t *testing.T) (*SWFTrace, []RigidJob) {
	t.Helper()
	f, err := os.Open("testdata/small.swf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := ReadSWF(f, "small.swf")
	if err != nil {
		t.Fatal(err)
	}
	jobs, _, err := tr.RigidJobs(8, false)
	if err != nil {
		t.Fatal(err)
	}
	return tr, jobs
}

func TestReadSWF(t *testing.T) {
	tr, jobs := readSmallSWF(t)
	if p, err := tr.MaxProcs(); p != 8 || err != nil {
		t.Fatalf("MaxProcs = %d, %v; want 8", p, err)
	}
	if tr.Header["Version"] != "2.2" || tr.Header["UnixStartTime"] != "1700000000" || len(tr.Comments) != 13 {
		t.Fatalf("header %v, %d comment lines", tr.Header, len(tr.Comments))
	}
	if len(tr.Jobs) != 14 || tr.Jobs[8].Field(6) != 12 || tr.Jobs[8].Line != 22 {
		t.Fatalf("%d jobs; job 9: %+v", len(tr.Jobs), tr.Jobs[8])
	}
	_, sk, err := tr.RigidJobs(8, false)
	if err != nil || sk != (SWFSkipped{Cancelled: 1, NoRun: 1, TooWide: 1}) || len(jobs) != 11 {
		t.Fatalf("kept %d, skipped %+v, %v", len(jobs), sk, err)
	}
	// Job 10 recorded no request: n is the allocated processors, tr the run.
	want := RigidJob{ID: "10", SubmitSeconds: 21, Procs: 3, RequestedSeconds: 30, RunSeconds: 30}
	if !reflect.DeepEqual(jobs[6], want) {
		t.Fatalf("job 10: %+v, want %+v", jobs[6], want)
	}
	withCancelled, sk, _ := tr.RigidJobs(8, true)
	if len(withCancelled) != 12 || sk.Cancelled != 0 {
		t.Fatalf("keeping cancelled jobs: %d kept, %+v", len(withCancelled), sk)
	}
}

func TestReadSWFErrorsNameLineAndField(t *testing.T) {
	good := "1 0 -1 5 2 -1 -1 2 10 -1 1 1 1 -1 1 -1 -1 -1\n"
	cases := []struct{ in, want string }{
		{"; MaxProcs: 8\n1 0 -1 5 2\n", "t.swf:2: 5 fields, want 18"},
		{good + "2 0 -1 x 2 -1 -1 2 10 -1 1 1 1 -1 1 -1 -1 -1\n", `t.swf:2: field 4 (run time): "x": not an integer`},
		{good + "2 0 -1 5 2.5 -1 -1 2 10 -1 1 1 1 -1 1 -1 -1 -1\n", `t.swf:2: field 5 (allocated processors): "2.5"`},
		{good + "2 0 -1 5 2 -1 -1 2 -7 -1 1 1 1 -1 1 -1 -1 -1\n", "t.swf:2: field 9 (requested time): -7: want ≥ 0, or -1"},
		{good + good, "t.swf:2: field 1 (job number): 1: already on line 1"},
		{"; only a header\n", "t.swf: no jobs"},
	}
	for _, c := range cases {
		_, err := ReadSWF(strings.NewReader(c.in), "t.swf")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
	tr, err := ReadSWF(strings.NewReader("; MaxProcs: many\n"+good), "t.swf")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.MaxProcs(); err == nil || !strings.Contains(err.Error(), `header MaxProcs: "many"`) {
		t.Fatalf("bad MaxProcs: %v", err)
	}
	tr, _ = ReadSWF(strings.NewReader("1 -1 -1 5 2 -1 -1 2 10 -1 1 1 1 -1 1 -1 -1 -1\n"), "t.swf")
	if _, _, err := tr.RigidJobs(8, false); err == nil || !strings.Contains(err.Error(), "t.swf:1: field 2 (submit time)") {
		t.Fatalf("unknown submit time: %v", err)
	}
}

// The small trace run by hand under both backfilling variants (jobs 1-5
// are figures 8-9 doubled: E starts at 4 under EASY, delaying D to 20,
// while conservative keeps D at 12 and E waits until 16).
func TestSimulateSmallSWFByHand(t *testing.T) {
	_, jobs := readSmallSWF(t)
	want := map[string]map[string][2]int64{
		"easy": {"1": {0, 4}, "2": {0, 8}, "3": {8, 12}, "4": {20, 24}, "5": {4, 20}, "9": {24, 74}, "10": {24, 54},
			"11": {74, 114}, "12": {26, 29}, "13": {114, 164}, "14": {29, 34}},
		"conservative": {"1": {0, 4}, "2": {0, 8}, "3": {8, 12}, "4": {12, 16}, "5": {16, 32}, "9": {20, 70}, "10": {21, 51},
			"11": {70, 110}, "12": {26, 29}, "13": {110, 160}, "14": {32, 37}},
	}
	recs := map[string][]JobRecord{}
	for name, w := range want {
		pol, _ := policy.NewJobPolicy(name)
		rs, err := SimulateJobs(context.Background(), 8, jobs, pol)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][2]int64{}
		for _, r := range rs {
			got[r.ID] = [2]int64{r.StartSeconds, r.EndSeconds}
			if r.Killed != (r.ID == "9") {
				t.Errorf("%s: job %s killed = %v", name, r.ID, r.Killed)
			}
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s:\n got %v\nwant %v", name, got, w)
		}
		recs[name] = rs
	}
	rp, err := JobRelativePerformance(recs["conservative"], recs["easy"])
	if err != nil {
		t.Fatal(err)
	}
	if rp.ABetter != 5.0/11 || rp.Tie != 4.0/11 || rp.BBetter != 2.0/11 {
		t.Fatalf("relative performance: conservative better %v, tie %v, EASY better %v; want 5/11, 4/11, 2/11", rp.ABetter, rp.Tie, rp.BBetter)
	}
	// By n (ranked by value, then ID as a string; thirds of 3, 4 and 4
	// jobs): the small third is 12, 9, 13 (n 1, 1, 2): 9 and 13
	// conservative, 12 equal; the large third is 2, 3, 11, 4 (n 4, 6, 8,
	// 8): 11 and 4 conservative, 2 and 3 equal.
	groups, err := JobRelativeByCharacteristic(recs["conservative"], recs["easy"])
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 15 || groups[0] != (RelPerfGroup{"n", "small", 3, 2.0 / 3, 1.0 / 3, 0}) ||
		groups[2] != (RelPerfGroup{"n", "large", 4, 0.5, 0.5, 0}) {
		t.Fatalf("by characteristic: %+v", groups)
	}
}

func TestJobMetricsByHand(t *testing.T) {
	// Machine of 4: a waits 10 s and runs 5 (n 2), b runs 200 s at once (n 4).
	recs := []JobRecord{
		{ID: "a", Procs: 2, SubmitSeconds: 0, StartSeconds: 10, EndSeconds: 15},
		{ID: "b", Procs: 4, SubmitSeconds: 15, StartSeconds: 15, EndSeconds: 215, Killed: true},
	}
	m, err := JobMetricsOf(4, recs)
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("mean tt", m.MeanTurnaround, (15+200)/2.0)
	near("mean wait", m.MeanWait, 5)
	near("slowdown", m.MeanSlowdown, (15/5.0+1)/2)
	near("bsld 10", m.MeanBoundedSlowdown10, (15/10.0+1)/2)
	near("bsld 100", m.MeanBoundedSlowdown100, (15/100.0+1)/2)
	near("pp-bsld", m.MeanPerProcessorBoundedSlowdown, (15/(2*10.0)+200/(4*200.0))/2)
	near("geometric mean", m.GeometricMeanTurnaround, math.Sqrt(15*200))
	near("throughput", m.ThroughputPerHour, 2/215.0*3600)
	near("utilisation", m.Utilisation, (2*5+4*200)/(4*215.0))
	if m.Killed != 1 || m.MakespanSeconds != 215 {
		t.Errorf("killed %d, makespan %d", m.Killed, m.MakespanSeconds)
	}
	if _, err := JobMetricsOf(4, []JobRecord{{ID: "x", SubmitSeconds: 5, StartSeconds: 5, EndSeconds: 5}}); err == nil {
		t.Error("a job that never ran was summarised")
	}
}

// On the synthetic workload every policy runs every job once, never holds
// more processors than the machine has, and gives the same records twice.
func TestSimulateJobsSynthetic(t *testing.T) {
	m := LublinModel{Procs: 64, Jobs: 1500, Load: 0.9, EstimateFactor: 5, KilledShare: 0.05, Seed: 3}
	jobs, err := m.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range policy.JobPolicyNames() {
		pol, _ := policy.NewJobPolicy(name)
		a, err := SimulateJobs(context.Background(), m.Procs, jobs, pol)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := SimulateJobs(context.Background(), m.Procs, jobs, pol)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs differ", name)
		}
		type ev struct{ t, d int64 }
		var evs []ev
		for _, r := range a {
			if r.StartSeconds < r.SubmitSeconds || r.Executed() < 1 {
				t.Fatalf("%s: %+v", name, r)
			}
			evs = append(evs, ev{r.StartSeconds, r.Procs}, ev{r.EndSeconds, -r.Procs})
		}
		// Ends before starts at the same instant.
		slices.SortFunc(evs, func(x, y ev) int { return cmp.Or(cmp.Compare(x.t, y.t), cmp.Compare(x.d, y.d)) })
		var used int64
		for _, e := range evs {
			if used += e.d; used > m.Procs {
				t.Fatalf("%s: %d processors in use at %d", name, used, e.t)
			}
		}
	}
}

func TestLublinModel(t *testing.T) {
	m := LublinModel{Procs: 128, Jobs: 20000, Load: 0.7, EstimateFactor: 5, KilledShare: 0.05, Seed: 9}
	a, err := m.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Generate()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different workloads")
	}
	m.Seed++
	if c, _ := m.Generate(); reflect.DeepEqual(a, c) {
		t.Fatal("another seed, same workload")
	}
	var serial, pow2, killed int
	var area float64
	for _, j := range a {
		if err := CheckRigidJobs(128, []RigidJob{j}); err != nil {
			t.Fatal(err)
		}
		if j.Procs == 1 {
			serial++
		} else if j.Procs&(j.Procs-1) == 0 {
			pow2++
		}
		if j.RunSeconds > j.RequestedSeconds {
			killed++
		} else if j.RequestedSeconds > 5*j.RunSeconds+60 {
			t.Fatalf("job %s: tr %d > 5·te + 1 min (te %d)", j.ID, j.RequestedSeconds, j.RunSeconds)
		}
		area += float64(j.Procs) * float64(min(j.RunSeconds, j.RequestedSeconds))
	}
	share := func(k int) float64 { return float64(k) / float64(len(a)) }
	if s := share(serial); math.Abs(s-0.244) > 0.015 {
		t.Errorf("serial share %v, model 0.244", s)
	}
	// Power-of-two parallel jobs: 0.576 by rounding, plus the unrounded
	// ones that land on a power of two.
	if s := share(pow2); s < 0.576 || s > 0.70 {
		t.Errorf("power-of-two share %v, model ≥ 0.576", s)
	}
	if s := share(killed); math.Abs(s-0.05) > 0.01 {
		t.Errorf("killed share %v, want 0.05", s)
	}
	load := area / (128 * float64(a[len(a)-1].SubmitSeconds-a[0].SubmitSeconds))
	if math.Abs(load-0.7) > 0.001 {
		t.Errorf("offered load %v, want 0.7", load)
	}
	for _, bad := range []LublinModel{{Procs: 0, Jobs: 1, EstimateFactor: 1}, {Procs: 8, Jobs: 1, EstimateFactor: 0.5}, {Procs: 8, Jobs: 1, EstimateFactor: 1, Load: 3}} {
		if _, err := bad.Generate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestMakeMoldable(t *testing.T) {
	jobs := []RigidJob{{ID: "a", Procs: 8, RequestedSeconds: 1000, RunSeconds: 400}, {ID: "b", Procs: 1, RequestedSeconds: 60, RunSeconds: 60}}
	m, err := MakeMoldable(jobs, 16, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	// f = 0: perfect speed-up; 32 processors are beyond the machine.
	want := []MoldableRequest{{8, 1000, 400}, {2, 4000, 1600}, {4, 2000, 800}, {16, 500, 200}}
	if !reflect.DeepEqual(m[0].Alternatives, want) {
		t.Fatalf("alternatives %+v, want %+v", m[0].Alternatives, want)
	}
	if got := m[1].Alternatives; len(got) != 3 || got[1].Procs != 2 || got[1].RunSeconds != 30 {
		t.Fatalf("serial job: %+v", got)
	}
	// A serial fraction makes speed-up sublinear: doubling never halves.
	m, _ = MakeMoldable(jobs, 16, 0.5, 2)
	for _, a := range m[0].Alternatives[1:] {
		if a.Procs > 8 && a.RunSeconds*a.Procs <= 400*8 {
			t.Fatalf("%+v: linear or better speed-up", a)
		}
	}
	if _, err := MakeMoldable(jobs, 4, 0, 1); err == nil {
		t.Fatal("a job wider than the machine was accepted")
	}
}

// SA on a moldable synthetic workload: SA_s and SA_i runs complete every
// job with a listed request, never over-commit the machine, are
// deterministic, run every job with a request it listed, and only the SA
// modes run requests other than the jobs' own.
func TestSimulateMoldable(t *testing.T) {
	m := LublinModel{Procs: 128, Jobs: 2000, Load: 0.8, EstimateFactor: 5, KilledShare: 0.05, Seed: 5}
	rigid, err := m.Generate()
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := MakeMoldable(rigid, 128, 0.1, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode SAMode
		pol  policy.JobPolicy
	}{{SAStatic, policy.Conservative}, {SASubmit, policy.Conservative}, {SAStart, policy.ConservativeSAi}} {
		a, err := SimulateMoldable(context.Background(), 128, jobs, c.pol, c.mode)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := SimulateMoldable(context.Background(), 128, jobs, c.pol, c.mode)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("mode %d: two runs differ", c.mode)
		}
		type ev struct{ t, d int64 }
		var evs []ev
		chose := 0
		for k, r := range a {
			alt := jobs[k].Alternatives[r.Choice]
			if r.Procs != alt.Procs || r.RequestedSeconds != alt.RequestedSeconds || r.Executed() != min(alt.RunSeconds, alt.RequestedSeconds) {
				t.Fatalf("mode %d: job %s ran %+v, its choice %d is %+v", c.mode, r.ID, r, r.Choice, alt)
			}
			if r.Choice != 0 {
				chose++
			}
			evs = append(evs, ev{r.StartSeconds, r.Procs}, ev{r.EndSeconds, -r.Procs})
		}
		if (chose == 0) != (c.mode == SAStatic) {
			t.Fatalf("mode %d: %d jobs ran another request than their own", c.mode, chose)
		}
		slices.SortFunc(evs, func(x, y ev) int { return cmp.Or(cmp.Compare(x.t, y.t), cmp.Compare(x.d, y.d)) })
		var used int64
		for _, e := range evs {
			if used += e.d; used > 128 {
				t.Fatalf("mode %d: %d processors in use at %d", c.mode, used, e.t)
			}
		}
		if _, err := JobMetricsOf(128, a); err != nil {
			t.Fatal(err)
		}
	}
}
