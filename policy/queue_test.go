package policy

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// queueOf returns a Queue holding s's waiting tasks and a copy of s that
// holds them there instead of in Queued.
func queueOf(t *testing.T, s *State, bestFit bool) *State {
	t.Helper()
	q := NewQueue(len(s.Orgs), bestFit)
	for _, task := range s.Queued {
		if err := q.Add(task); err != nil {
			t.Fatal(err)
		}
	}
	c := *s
	c.Queued, c.Queue = nil, q
	return &c
}

// randomWideState is randomState with many organisations (up to 60, some
// without machines: quota 0, DP = +Inf) competing for few machines, so
// that the order of organisations and the victim organisation are chosen
// among many with equal keys.
func randomWideState(r *rand.Rand) *State {
	s := &State{}
	nOrg := 1 + r.IntN(60)
	for i := range nOrg {
		s.Orgs = append(s.Orgs, Org{Name: "o" + itoa(i)})
	}
	nM := 1 + r.IntN(40)
	for i := range nM {
		s.Machines = append(s.Machines, Machine{ID: "m" + itoa(i), Owner: r.IntN(1 + nOrg/2),
			MFLOPS: int64(10+10*r.IntN(3)) * 1000, BusyMilliW: int64(50+50*r.IntN(3)) * 1000})
	}
	tot := ComputeTotals(s)
	for i := range s.Orgs {
		switch r.IntN(3) {
		case 0:
			s.Orgs[i].LimitMilliW = tot.PowerSystemMilliW
		case 1:
			s.Orgs[i].LimitMilliW = tot.PowerQuotaMilliW[i] * int64(50+50*r.IntN(3)) / 100
		default:
			s.Orgs[i].LimitMilliW = int64(r.IntN(6)) * 50_000
		}
	}
	pi := make([]int64, nOrg)
	seq := uint64(0)
	for k, m := range r.Perm(nM)[:r.IntN(nM+1)] {
		org := r.IntN(nOrg)
		if pi[org]+s.Machines[m].BusyMilliW > s.Orgs[org].LimitMilliW {
			continue
		}
		pi[org] += s.Machines[m].BusyMilliW
		seq++
		s.Running = append(s.Running, Running{Task: Task{ID: "r" + itoa(k), Org: org, SizeMFlop: int64(1+r.IntN(4)) * 100_000, Seq: seq},
			Machine: m, RunSeconds: float64(r.IntN(4) * 200)})
	}
	for k := range r.IntN(120) {
		seq++
		s.Queued = append(s.Queued, Task{ID: "q" + itoa(k), Org: r.IntN(nOrg), SizeMFlop: int64(1+r.IntN(4)) * 100_000, Seq: seq})
	}
	if r.IntN(2) == 0 {
		s.CheckpointBlockSeconds = 300
	}
	return s
}

// TestQueuePassAgreesWithReference checks that a pass reading a kept
// Queue decides, decision for decision, what the reference decides on the
// same tasks listed in Queued, and that Decides answers whether it decides
// anything, on small federations with many ties and on wide ones with
// many organisations.
func TestQueuePassAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 4))
	n := 1500
	if testing.Short() {
		n = 200
	}
	for iter := range n {
		s := randomState(r)
		if iter%2 == 1 {
			s = randomWideState(r)
		}
		for _, bestFit := range []bool{false, true} {
			p := EHOSEP{BestFit: bestFit}
			ref, err := referenceEHOSEP(s, bestFit)
			if err != nil {
				t.Fatalf("case %d: reference: %v", iter, err)
			}
			listed, err := p.Schedule(s)
			if err != nil || !reflect.DeepEqual(listed, ref) {
				t.Fatalf("case %d (bestFit %v): listed %q (%v) != reference %q", iter, bestFit, summary(s, listed), err, summary(s, ref))
			}
			kept := queueOf(t, s, bestFit)
			got, err := p.Schedule(kept)
			if err != nil || !reflect.DeepEqual(got, ref) {
				t.Fatalf("case %d (bestFit %v): with a Queue %q (%v) != reference %q", iter, bestFit, summary(s, got), err, summary(s, ref))
			}
			if any, err := Decides(p, kept); err != nil || any != (len(ref) > 0) {
				t.Fatalf("case %d: Decides = %v, %v; the pass decides %d", iter, any, err, len(ref))
			}
			if got, _ := p.Schedule(kept); !reflect.DeepEqual(got, ref) {
				t.Fatalf("case %d: a second pass on the same Queue decided otherwise: the pass changed it", iter)
			}
		}
	}
}

// TestQueueKeptAcrossPasses runs a federation through many passes, keeping
// one Queue in step by single additions and removals (the placed tasks
// leave it, preempted ones come back, tasks arrive, some are cancelled,
// running ones finish), as the ledger does, and checks every pass against
// the reference on the state listed in full.
func TestQueueKeptAcrossPasses(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 5))
	runs := 150
	if testing.Short() {
		runs = 20
	}
	for run := range runs {
		s := randomWideState(r)
		if run%3 == 0 {
			s = randomState(r)
		}
		bestFit := run%2 == 1
		p := EHOSEP{BestFit: bestFit}
		kept := queueOf(t, s, bestFit)
		q := kept.Queue
		next := 0
		for step := range 12 {
			ref, err := referenceEHOSEP(s, bestFit)
			if err != nil {
				t.Fatal(err)
			}
			kept.Running = s.Running
			got, err := p.Schedule(kept)
			if err != nil || !reflect.DeepEqual(got, ref) {
				t.Fatalf("run %d step %d: kept %q (%v) != reference %q", run, step, summary(s, got), err, summary(s, ref))
			}
			after, err := ApplyDecisions(s, got)
			if err != nil {
				t.Fatal(err)
			}
			stopped := map[string]bool{}
			for _, d := range got {
				if !q.Remove(d.Task) && !stopped[d.Task] {
					t.Fatalf("run %d step %d: placed task %s was neither in the queue nor stopped in this pass", run, step, d.Task)
				}
				if d.Kind == Preempt {
					stopped[d.Victim] = true
				}
			}
			for _, task := range after.Queued {
				if !q.Has(task.ID) { // a preempted task back in its queue
					if err := q.Add(task); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Time passes, some runs end, tasks arrive and leave.
			var running []Running
			for _, ru := range after.Running {
				ru.RunSeconds += float64(r.IntN(3) * 100)
				if r.IntN(4) != 0 {
					running = append(running, ru)
				}
			}
			queued := after.Queued
			for k := range r.IntN(6) {
				if len(queued) > 0 && k%2 == 0 {
					at := r.IntN(len(queued))
					q.Remove(queued[at].ID)
					queued = slices.Delete(queued, at, at+1)
				}
				next++
				task := Task{ID: "n" + itoa(next), Org: r.IntN(len(s.Orgs)), SizeMFlop: int64(1+r.IntN(4)) * 100_000, Seq: uint64(1000 + next)}
				if err := q.Add(task); err != nil {
					t.Fatal(err)
				}
				queued = append(queued, task)
			}
			s = &State{Orgs: s.Orgs, Machines: s.Machines, CheckpointBlockSeconds: s.CheckpointBlockSeconds, Queued: queued, Running: running}
			if a, b := ids(q.Tasks()), ids(queued); !reflect.DeepEqual(a, b) {
				t.Fatalf("run %d step %d: the queue holds %v, the state %v", run, step, a, b)
			}
		}
	}
}

func ids(ts []Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	slices.Sort(out)
	return out
}

func TestQueueRefusesBadTasks(t *testing.T) {
	good := Task{ID: "a", Org: 1, SizeMFlop: 10}
	for _, tc := range []struct {
		name string
		task Task
		want string
	}{
		{"org out of range", Task{ID: "x", Org: 2, SizeMFlop: 1}, "org index 2 out of range"},
		{"negative org", Task{ID: "x", Org: -1, SizeMFlop: 1}, "org index -1 out of range"},
		{"negative size", Task{ID: "x", Org: 0, SizeMFlop: -1}, "size -1 MFlop < 0"},
		{"bad request", Task{ID: "x", Org: 0, Request: Resources{CPUs: -2}}, "cpus -2 out of range"},
		{"bad requirement", Task{ID: "x", Org: 0, Requirements: []Requirement{{Attribute: "colour", Operator: "="}}}, `attribute "colour"`},
		{"duplicate", Task{ID: "a", Org: 0, SizeMFlop: 5}, `task "a": already waiting`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue(2, false)
			if err := q.Add(good); err != nil {
				t.Fatal(err)
			}
			err := q.Add(tc.task)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Add = %v, want an error with %q", err, tc.want)
			}
			if q.Len() != 1 || q.Waiting(0) != 0 || q.Waiting(1) != 1 || !reflect.DeepEqual(q.Tasks(), []Task{good}) {
				t.Fatalf("a refused task changed the queue: %v", q.Tasks())
			}
		})
	}
	q := NewQueue(1, false)
	if q.Remove("nobody") {
		t.Error("Remove of a task not waiting reported true")
	}
}

// TestQueueStateChecks: a State holding both Queued and a Queue, a Queue
// for another number of organisations, a running task also waiting, and
// a queue in the other variant's order are refused.
func TestQueueStateChecks(t *testing.T) {
	base := func() *State {
		return &State{Orgs: []Org{{"A", 1_000_000}}, Machines: []Machine{{ID: "m", MFLOPS: 1000, BusyMilliW: 100}}}
	}
	task := Task{ID: "t", SizeMFlop: 10}
	for _, tc := range []struct {
		name string
		set  func(s *State)
		want string
	}{
		{"both", func(s *State) { s.Queued = []Task{task}; s.Queue = NewQueue(1, false) }, "both Queued and Queue"},
		{"orgs", func(s *State) { s.Queue = NewQueue(2, false) }, "the queue knows 2 organisations, the state 1"},
		{"running and waiting", func(s *State) {
			s.Queue = NewQueue(1, false)
			_ = s.Queue.Add(task)
			s.Running = []Running{{Task: task, Machine: 0}}
		}, "also waiting in the queue"},
		{"variant", func(s *State) { s.Queue = NewQueue(1, true) }, "order of the other variant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.set(s)
			_, err := EHOSEP{}.Schedule(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Schedule = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestOrgOrderQueries checks the organisation treap's queries against scans
// of the same order, through random updates of keys and headrooms.
func TestOrgOrderQueries(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 6))
	for iter := range 200 {
		n := 1 + r.IntN(80)
		dp := make([]float64, n)
		tie := make([]int32, n)
		for i, p := range r.Perm(n) {
			tie[i] = int32(p)
		}
		before := func(a, b int) bool { return dp[a] < dp[b] || dp[a] == dp[b] && tie[a] < tie[b] }
		o := newOrgOrder(dp, tie)
		for i := range n {
			dp[i], o.head[i] = float64(r.IntN(10)), int64(r.IntN(5))-1
			if r.IntN(10) == 0 {
				dp[i] = math.Inf(1)
			}
			o.insert(int32(i))
		}
		sorted := func() []int {
			s := make([]int, n)
			for i := range s {
				s[i] = i
			}
			slices.SortFunc(s, func(a, b int) int {
				if before(a, b) {
					return -1
				}
				return 1
			})
			return s
		}
		for step := range 60 {
			order := sorted()
			bound := int64(1 + r.IntN(4))
			var want []int32
			for _, i := range order {
				if o.head[i] >= bound {
					want = append(want, int32(i))
				}
			}
			var got []int32
			for c := o.first(bound); c >= 0; c = o.after(c, bound) {
				got = append(got, c)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("iter %d step %d: walk %v, scan %v", iter, step, got, want)
			}
			if a := int32(order[r.IntN(n)]); true {
				exp := int32(-1)
				for k, i := range order {
					if int32(i) == a {
						for _, j := range order[k+1:] {
							if o.head[j] >= bound {
								exp = int32(j)
								break
							}
						}
					}
				}
				if g := o.after(a, bound); g != exp {
					t.Fatalf("iter %d step %d: after(%d) = %d, want %d", iter, step, a, g, exp)
				}
			}
			i := r.IntN(n)
			o.remove(int32(i))
			dp[i], o.head[i] = float64(r.IntN(10)), int64(r.IntN(5))-1
			o.insert(int32(i))
		}
	}
}

// TestBusySetsPrefix checks the victim sets' prefix query and lowest
// machine against scans, through random additions and removals.
func TestBusySetsPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 7))
	for iter := range 200 {
		nM, nOrg := 1+r.IntN(60), 1+r.IntN(4)
		pos := r.Perm(nM)
		waste := make([]float64, nM)
		ms := make([]Machine, nM)
		for j := range ms {
			ms[j] = Machine{ID: "m" + itoa(100+j), MFLOPS: int64(1 + r.IntN(2))}
		}
		better := func(a, b int32) bool { return victimBetter(waste[a], waste[b], ms[a], ms[b]) }
		// The ties ranked as the pass ranks them, checked against victimBetter.
		b := newBusySets(nOrg, pos, waste, newWattOrder(ms).victim)
		in := make([]int, nM) // org+1, 0 when in no set
		for step := range 100 {
			m := r.IntN(nM)
			if in[m] > 0 {
				b.remove(in[m]-1, int32(m))
				in[m] = 0
			} else {
				waste[m] = float64(r.IntN(5))
				org := r.IntN(nOrg)
				b.add(org, int32(m))
				in[m] = org + 1
			}
			org, k := r.IntN(nOrg), r.IntN(nM+1)
			want, low := int32(-1), int32(-1)
			for j := range nM {
				if in[j] != org+1 {
					continue
				}
				if pos[j] < k && (want < 0 || better(int32(j), want)) {
					want = int32(j)
				}
				if low < 0 || pos[j] < pos[low] {
					low = int32(j)
				}
			}
			if got := b.prefix(org, k); got != want {
				t.Fatalf("iter %d step %d: prefix(%d, %d) = %d, want %d", iter, step, org, k, got, want)
			}
			if got := b.lowest(org); got != low {
				t.Fatalf("iter %d step %d: lowest(%d) = %d, want %d", iter, step, org, got, low)
			}
		}
	}
}
