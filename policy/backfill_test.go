package policy

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The worked examples of seed 002 (figures 6-9, 002_7ead415125793782.txt
// L522-549). The figures are images absent from the text, so the
// instances below are reconstructed to satisfy every sentence the text
// says about them, on a machine of 4 processors; each assertion names the
// sentence it checks.

func job(id string, seq uint64, procs, tr int64) Job {
	return Job{ID: id, Seq: seq, Procs: procs, RequestedSeconds: tr}
}

func reserved(j Job, at int64) Job { j.Reserved, j.ReservedAt = true, at; return j }

// Figures 6-7: A(2 procs, tr 4), B(4, 2), C(2, 3), D(3, 2), E(2, 2) are
// submitted in that order at time 1 to an idle machine.
var (
	fig6A = job("A", 1, 2, 4)
	fig6B = job("B", 2, 4, 2)
	fig6C = job("C", 3, 2, 3)
	fig6D = job("D", 4, 3, 2)
	fig6E = job("E", 5, 2, 2)
)

func TestConservativeFigure6And7(t *testing.T) {
	// Figure 6 (L522): "C is placed before B because at time=1 the free
	// resources are not enough for B but suffice for C".
	fig6 := &JobState{Now: 1, Procs: 4, Queue: []Job{fig6A, fig6B, fig6C, fig6D, fig6E}}
	got, err := Conservative(fig6)
	if err != nil {
		t.Fatal(err)
	}
	want := JobPlan{Start: []string{"A", "C"}, Reservations: []JobReservation{{"B", 5}, {"D", 7}, {"E", 9}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figure 6: got %+v, want %+v", got, want)
	}
	// Figure 7 (L528-530): A, reserved to run until 5, ends at time 2. "B is
	// promoted to start right after C [at 4], D follows B [at 6], but E can
	// end before B's estimated start and is advanced to start at once."
	fig7 := &JobState{Now: 2, Procs: 4,
		Running: []JobRunning{{ID: "C", Procs: 2, EndBy: 4}},
		Queue:   []Job{reserved(fig6B, 5), reserved(fig6D, 7), reserved(fig6E, 9)}}
	got, err = Conservative(fig7)
	if err != nil {
		t.Fatal(err)
	}
	want = JobPlan{Start: []string{"E"}, Reservations: []JobReservation{{"B", 4}, {"D", 6}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figure 7: got %+v, want %+v", got, want)
	}
}

// Figures 8-9: A(2 procs, tr 4) and B(2, 4) start at time 0 on an idle
// machine; C(3, 2), D(4, 2) and E(1, 8) wait.
var (
	fig8A = job("A", 1, 2, 4)
	fig8B = job("B", 2, 2, 4)
	fig8C = job("C", 3, 3, 2)
	fig8D = job("D", 4, 4, 2)
	fig8E = job("E", 5, 1, 8)
)

func TestEASYFigure8And9(t *testing.T) {
	fig8 := &JobState{Now: 0, Procs: 4, Queue: []Job{fig8A, fig8B, fig8C, fig8D, fig8E}}
	got, err := EASY(fig8)
	if err != nil {
		t.Fatal(err)
	}
	want := JobPlan{Start: []string{"A", "B"}, Reservations: []JobReservation{{"C", 4}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figure 8, EASY: got %+v, want %+v", got, want)
	}
	// Figure 8's allocation list: the estimated starts C 4, D 6 (L546), E 8.
	list, err := Conservative(fig8)
	if err != nil {
		t.Fatal(err)
	}
	wantList := []JobReservation{{"C", 4}, {"D", 6}, {"E", 8}}
	if !reflect.DeepEqual(list.Reservations, wantList) {
		t.Fatalf("figure 8 list: got %+v, want %+v", list.Reservations, wantList)
	}
	// A ends at time 2 (L544-546): "B is already running, C is the first of
	// the queue and E can be advanced, there being resources for it without
	// delaying C".
	at2 := &JobState{Now: 2, Procs: 4,
		Running: []JobRunning{{ID: "B", Procs: 2, EndBy: 4}},
		Queue:   []Job{fig8C, fig8D, fig8E}}
	got, err = EASY(at2)
	if err != nil {
		t.Fatal(err)
	}
	want = JobPlan{Start: []string{"E"}, Reservations: []JobReservation{{"C", 4}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figure 9, EASY at 2: got %+v, want %+v", got, want)
	}
	// Figure 9: "though this delays D's estimated start: D was to start at
	// time 6 and after the backfilling it is to start at time 10".
	after := &JobState{Now: 2, Procs: 4,
		Running: []JobRunning{{ID: "B", Procs: 2, EndBy: 4}, {ID: "E", Procs: 1, EndBy: 10}},
		Queue:   []Job{fig8C, fig8D}}
	list, err = Conservative(after)
	if err != nil {
		t.Fatal(err)
	}
	wantList = []JobReservation{{"C", 4}, {"D", 10}}
	if !reflect.DeepEqual(list.Reservations, wantList) {
		t.Fatalf("figure 9 list: got %+v, want %+v", list.Reservations, wantList)
	}
	// Conservative backfilling on the same event keeps every reservation:
	// E would delay D, so it does not start (the contrast L888-892 draws).
	cons := &JobState{Now: 2, Procs: 4,
		Running: []JobRunning{{ID: "B", Procs: 2, EndBy: 4}},
		Queue:   []Job{reserved(fig8C, 4), reserved(fig8D, 6), reserved(fig8E, 8)}}
	got, err = Conservative(cons)
	if err != nil {
		t.Fatal(err)
	}
	want = JobPlan{Reservations: []JobReservation{{"C", 4}, {"D", 6}, {"E", 8}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figure 9, conservative at 2: got %+v, want %+v", got, want)
	}
	// FCFS starts nothing behind the blocked head.
	got, err = FCFS(at2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Start) != 0 {
		t.Fatalf("FCFS at 2 started %v behind the blocked head C", got.Start)
	}
}

// EASY's shadow time counts every job ending at that instant: two jobs end
// at 5, the head needs both, and one more processor is extra.
func TestEASYShadowCountsAllJobsEndingThen(t *testing.T) {
	s := &JobState{Now: 0, Procs: 5,
		Running: []JobRunning{{ID: "r1", Procs: 2, EndBy: 5}, {ID: "r2", Procs: 2, EndBy: 5}},
		Queue:   []Job{job("head", 1, 3, 10), job("long", 2, 1, 100)}}
	got, err := EASY(s)
	if err != nil {
		t.Fatal(err)
	}
	want := JobPlan{Start: []string{"long"}, Reservations: []JobReservation{{"head", 5}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestJobPoliciesRejectBadStates(t *testing.T) {
	cases := []struct {
		name string
		s    *JobState
		want string
	}{
		{"nil", nil, "nil"},
		{"no processors", &JobState{Procs: 0}, "0 processors"},
		{"too wide", &JobState{Procs: 4, Queue: []Job{job("w", 1, 5, 1)}}, `job "w": 5 processors`},
		{"no time", &JobState{Procs: 4, Queue: []Job{job("z", 1, 1, 0)}}, "requested time 0"},
		{"duplicate", &JobState{Procs: 4, Running: []JobRunning{{ID: "x", Procs: 1, EndBy: 3}}, Queue: []Job{job("x", 1, 1, 1)}}, `"x" twice`},
		{"ended", &JobState{Now: 5, Procs: 4, Running: []JobRunning{{ID: "r", Procs: 1, EndBy: 5}}}, "not after now"},
		{"over-committed", &JobState{Procs: 4, Running: []JobRunning{{ID: "a", Procs: 3, EndBy: 9}, {ID: "b", Procs: 2, EndBy: 9}}}, "hold 5 processors of 4"},
		{"choice out of range", &JobState{Procs: 4, Queue: []Job{{ID: "m", Procs: 1, RequestedSeconds: 1, Alternatives: []JobRequest{{1, 1}}, Choice: 3}}}, "choice 3 of 1"},
		{"choice not what runs", &JobState{Procs: 4, Queue: []Job{{ID: "m", Procs: 2, RequestedSeconds: 1, Alternatives: []JobRequest{{1, 1}}}}}, "its choice 0 is 1 for 1 s"},
		{"past reservation", &JobState{Now: 5, Procs: 4, Queue: []Job{reserved(job("p", 1, 1, 1), 4)}}, "before now"},
	}
	for _, c := range cases {
		for _, name := range JobPolicyNames() {
			pol, _ := NewJobPolicy(name)
			if _, err := pol(c.s); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: error %v, want one containing %q", c.name, name, err, c.want)
			}
		}
	}
	// Reservations that over-commit the machine cannot come from a
	// conservative plan.
	bad := &JobState{Procs: 4, Queue: []Job{reserved(job("a", 1, 3, 5), 2), reserved(job("b", 2, 3, 5), 4)}}
	if _, err := Conservative(bad); err == nil || !strings.Contains(err.Error(), "need 6 processors of 4 at 4") {
		t.Fatalf("over-committing reservations: error %v", err)
	}
	if _, err := NewJobPolicy("sjf"); err == nil {
		t.Fatal("unknown job policy accepted")
	}
}

// rjob is a job of a random workload: it arrives at submit and, once
// started, runs run seconds, or is killed at tr.
type rjob struct {
	Job
	submit, run int64
	// runs[i] is the run time with Alternatives[i] (moldable jobs).
	runs []int64
}

// moldable gives every other job of a random workload two to four
// alternative requests, the first its own; run times scale with the
// requested time.
func moldable(r *rand.Rand, procs int64, jobs []rjob) {
	for k := range jobs {
		if k%2 == 1 {
			continue
		}
		j := &jobs[k]
		j.Alternatives = []JobRequest{{j.Procs, j.RequestedSeconds}}
		j.runs = []int64{j.run}
		for n := 1 + r.IntN(3); n > 0; n-- {
			p := int64(1 + r.IntN(int(procs)))
			tr := max(1, j.RequestedSeconds*j.Procs/p+int64(r.IntN(5)))
			j.Alternatives = append(j.Alternatives, JobRequest{p, tr})
			j.runs = append(j.runs, max(1, j.run*tr/j.RequestedSeconds))
		}
	}
}

func randomWorkload(r *rand.Rand) (int64, []rjob) {
	procs := int64(2 + r.IntN(31))
	n := 20 + r.IntN(100)
	jobs := make([]rjob, n)
	var t int64
	for i := range jobs {
		if r.IntN(3) == 0 {
			t += int64(r.IntN(20))
		}
		p := int64(1 + r.IntN(int(procs)))
		if r.IntN(2) == 0 {
			p = int64(1 + r.IntN(int(min(procs, 4))))
		}
		tr := int64(1 + r.IntN(60))
		run := int64(1 + r.IntN(int(tr)))
		switch r.IntN(5) {
		case 0:
			run = tr // used all its time
		case 1:
			run = tr + int64(1+r.IntN(10)) // killed at tr
		}
		jobs[i] = rjob{Job: job(fmt.Sprintf("j%03d", i), uint64(i), p, tr), submit: t, run: run}
	}
	return procs, jobs
}

// jobTrace is what happened to each job in a driven run.
type jobTrace struct {
	start    map[string]int64
	firstRes map[string]int64
}

// drive runs a workload through pol event by event, as the simulator
// does, calling check on every pass with the state and the plan; the
// plan's starts are applied and the reservations fed back.
func drive(t *testing.T, procs int64, jobs []rjob, pol JobPolicy, check func(s *JobState, p JobPlan)) jobTrace {
	t.Helper()
	tr := jobTrace{start: map[string]int64{}, firstRes: map[string]int64{}}
	byID := map[string]rjob{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	type run struct {
		JobRunning
		end int64
	}
	var running []run
	var queue []Job
	next, wake := 0, int64(-1)
	for pass := 0; next < len(jobs) || len(running) > 0 || len(queue) > 0; pass++ {
		if pass > 100*len(jobs)+100 {
			t.Fatalf("no progress after %d passes", pass)
		}
		now := int64(1 << 62)
		if next < len(jobs) {
			now = jobs[next].submit
		}
		for _, r := range running {
			now = min(now, r.end)
		}
		if wake >= 0 {
			now = min(now, wake)
		}
		running = slices.DeleteFunc(running, func(r run) bool { return r.end <= now })
		for ; next < len(jobs) && jobs[next].submit <= now; next++ {
			queue = append(queue, jobs[next].Job)
		}
		s := &JobState{Now: now, Procs: procs, Queue: slices.Clone(queue)}
		for _, r := range running {
			s.Running = append(s.Running, r.JobRunning)
		}
		plan, err := pol(s)
		if err != nil {
			t.Fatalf("at %d: %v", now, err)
		}
		check(s, plan)
		for _, c := range plan.Choices {
			k := slices.IndexFunc(queue, func(q Job) bool { return q.ID == c.ID })
			a := queue[k].Alternatives[c.Choice]
			queue[k].Choice, queue[k].Procs, queue[k].RequestedSeconds = c.Choice, a.Procs, a.RequestedSeconds
		}
		for _, id := range plan.Start {
			j := queue[slices.IndexFunc(queue, func(q Job) bool { return q.ID == id })]
			runFor := byID[id].run
			if len(j.Alternatives) > 0 {
				runFor = byID[id].runs[j.Choice]
			}
			running = append(running, run{JobRunning{id, j.Procs, now + j.RequestedSeconds}, now + min(runFor, j.RequestedSeconds)})
			tr.start[id] = now
			queue = slices.DeleteFunc(queue, func(q Job) bool { return q.ID == id })
		}
		var used int64
		for _, r := range running {
			used += r.Procs
		}
		if used > procs {
			t.Fatalf("at %d: %d processors in use of %d", now, used, procs)
		}
		wake = -1
		for k := range queue {
			queue[k].Reserved = false
		}
		for _, res := range plan.Reservations {
			if _, ok := tr.firstRes[res.ID]; !ok {
				tr.firstRes[res.ID] = res.At
			}
			k := slices.IndexFunc(queue, func(q Job) bool { return q.ID == res.ID })
			queue[k].Reserved, queue[k].ReservedAt = true, res.At
			if wake < 0 || res.At < wake {
				wake = res.At
			}
		}
	}
	if len(tr.start) != len(jobs) {
		t.Fatalf("%d of %d jobs started", len(tr.start), len(jobs))
	}
	return tr
}

// Fast and reference policies agree decision for decision on random
// workloads, passes on shuffled input agree, and each policy keeps its
// promise: conservative never starts a job later than any reservation it
// was given and never moves a reservation later; EASY never moves the
// head's reservation later nor starts it later; FCFS starts in submission
// order. drive checks that no pass over-commits the machine.
func TestJobPoliciesMatchReferenceAndKeepPromises(t *testing.T) {
	refs := map[string]JobPolicy{"fcfs": referenceFCFS, "easy": referenceEASY, "conservative": referenceConservative}
	for seed := uint64(1); seed <= 80; seed++ {
		for _, name := range JobPolicyNames() {
			r := rand.New(rand.NewPCG(seed, 21))
			procs, jobs := randomWorkload(r)
			fast, _ := NewJobPolicy(name)
			last := map[string]int64{}
			shuffle := rand.New(rand.NewPCG(seed, 7))
			tr := drive(t, procs, jobs, fast, func(s *JobState, p JobPlan) {
				ref, err := refs[name](s)
				if err != nil {
					t.Fatalf("seed %d %s at %d: reference: %v", seed, name, s.Now, err)
				}
				if !reflect.DeepEqual(p, ref) {
					t.Fatalf("seed %d %s at %d: fast %+v, reference %+v (state %+v)", seed, name, s.Now, p, ref, s)
				}
				sh := &JobState{Now: s.Now, Procs: s.Procs, Running: slices.Clone(s.Running), Queue: slices.Clone(s.Queue)}
				shuffle.Shuffle(len(sh.Running), func(a, b int) { sh.Running[a], sh.Running[b] = sh.Running[b], sh.Running[a] })
				shuffle.Shuffle(len(sh.Queue), func(a, b int) { sh.Queue[a], sh.Queue[b] = sh.Queue[b], sh.Queue[a] })
				again, err := fast(sh)
				if err != nil || !reflect.DeepEqual(again, p) {
					t.Fatalf("seed %d %s at %d: shuffled input gave %+v, %v; want %+v", seed, name, s.Now, again, err, p)
				}
				for _, res := range p.Reservations {
					if prev, ok := last[res.ID]; ok && res.At > prev {
						t.Fatalf("seed %d %s at %d: %s's reservation moved from %d to %d", seed, name, s.Now, res.ID, prev, res.At)
					}
					last[res.ID] = res.At
				}
				for _, id := range p.Start {
					if prev, ok := last[id]; ok && s.Now > prev {
						t.Fatalf("seed %d %s: %s reserved at %d started at %d", seed, name, id, prev, s.Now)
					}
				}
			})
			for id, first := range tr.firstRes {
				if tr.start[id] > first {
					t.Fatalf("seed %d %s: %s first reserved at %d started at %d", seed, name, id, first, tr.start[id])
				}
			}
			if name == "fcfs" {
				for k := 1; k < len(jobs); k++ {
					if tr.start[jobs[k].ID] < tr.start[jobs[k-1].ID] {
						t.Fatalf("seed %d fcfs: %s started before %s", seed, jobs[k].ID, jobs[k-1].ID)
					}
				}
			}
		}
	}
}

// SA: ConservativeSAi agrees with its reference decision for decision and
// never lets a job's promised end move later (its start may: a request
// that ends sooner can start later); SAChoose agrees with its reference on
// every state of a conservative run, for random alternatives.
func TestSAMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 22))
		procs, jobs := randomWorkload(r)
		moldable(r, procs, jobs)
		ends := map[string]int64{}
		drive(t, procs, jobs, ConservativeSAi, func(s *JobState, p JobPlan) {
			ref, err := referenceConservativeSAi(s)
			if err != nil || !reflect.DeepEqual(p, ref) {
				t.Fatalf("seed %d at %d: fast %+v, reference %+v, %v", seed, s.Now, p, ref, err)
			}
			tr := map[string]int64{}
			for _, j := range s.Queue {
				tr[j.ID] = j.RequestedSeconds
				for _, c := range p.Choices {
					if c.ID == j.ID {
						tr[j.ID] = j.Alternatives[c.Choice].RequestedSeconds
					}
				}
			}
			check := func(id string, end int64) {
				if prev, ok := ends[id]; ok && end > prev {
					t.Fatalf("seed %d at %d: %s's promised end moved from %d to %d", seed, s.Now, id, prev, end)
				}
				ends[id] = end
			}
			for _, res := range p.Reservations {
				check(res.ID, res.At+tr[res.ID])
			}
			for _, id := range p.Start {
				check(id, s.Now+tr[id])
			}
		})
		r = rand.New(rand.NewPCG(seed, 23))
		procs, jobs = randomWorkload(r)
		drive(t, procs, jobs, Conservative, func(s *JobState, _ JobPlan) {
			alts := []JobRequest{{1 + r.Int64N(procs), 1 + r.Int64N(40)}, {1 + r.Int64N(procs), 1 + r.Int64N(40)}, {1 + r.Int64N(procs), 1 + r.Int64N(40)}}
			got, err := SAChoose(s, alts)
			want, rerr := referenceSAChoose(s, alts)
			if err != nil || rerr != nil || got != want {
				t.Fatalf("seed %d at %d: SAChoose %d (%v), reference %d (%v)", seed, s.Now, got, err, want, rerr)
			}
		})
	}
}

// SA_s by hand on figure 6's machine at time 1 (A and C running, B, D, E
// reserved at 5, 7, 9): a wide short request waits for the whole queue, a
// narrow long one fits beside it.
func TestSAChooseByHand(t *testing.T) {
	s := &JobState{Now: 1, Procs: 4,
		Running: []JobRunning{{ID: "A", Procs: 2, EndBy: 5}, {ID: "C", Procs: 2, EndBy: 4}},
		Queue:   []Job{reserved(fig6B, 5), reserved(fig6D, 7), reserved(fig6E, 9)}}
	// Free processors: 0 until 4, 2 in [4,5), 0 in [5,7) (B), 1 in [7,9)
	// (D), 2 in [9,11) (E), 4 from 11. (4, 2 s) ends at 13; (1, 6 s) can
	// start at 7 only if one processor is free until 13: it is (1 in
	// [7,9), 2 in [9,11), 4 after), so it ends at 13 too, and the first
	// listed wins the tie; (1, 5 s) ends at 12.
	got, err := SAChoose(s, []JobRequest{{4, 2}, {1, 6}, {1, 5}})
	if err != nil || got != 2 {
		t.Fatalf("SAChoose = %d, %v; want 2 (1 processor for 5 s, ends at 12)", got, err)
	}
	got, _ = SAChoose(s, []JobRequest{{4, 2}, {1, 6}})
	if got != 0 {
		t.Fatalf("SAChoose on a tie = %d, want 0 (the first listed)", got)
	}
	if _, err := SAChoose(s, []JobRequest{{5, 2}}); err == nil || !strings.Contains(err.Error(), "alternative 0: 5 processors") {
		t.Fatalf("too wide a request: %v", err)
	}
}
