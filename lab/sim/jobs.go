package sim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"

	"github.com/coopgrid/coopgrid/policy"
)

// The rigid-job simulator: seed 002's space-shared machine (Moreira 2003,
// 002_7ead415125793782.txt L712-714). Each job arrives at its submit time
// asking for Procs processors and a requested time; once started it holds
// its processors for its run time, or is killed when it reaches the
// requested time (L497). A job policy (policy.FCFS, EASY, Conservative)
// is asked on every instant where a job arrives or ends, and at every
// reservation it promised, and its plan is applied at once.

// RigidJob is one job of a workload.
type RigidJob struct {
	ID string
	// SubmitSeconds is when it arrives; RunSeconds how long it would run if
	// never killed; RequestedSeconds its tr.
	SubmitSeconds    int64
	Procs            int64
	RequestedSeconds int64
	RunSeconds       int64
	// Alternatives make the job moldable (seed 002 chapter 5): the first is
	// the job's own request (Procs, RequestedSeconds, RunSeconds), the one
	// a user would submit statically.
	Alternatives []MoldableRequest
}

// MoldableRequest is one way to run a moldable job.
type MoldableRequest struct {
	Procs            int64
	RequestedSeconds int64
	RunSeconds       int64
}

// SAMode says how moldable jobs choose their request.
type SAMode int

const (
	// SAStatic: every job runs its own request (Alternatives[0]).
	SAStatic SAMode = iota
	// SASubmit: SA_s chooses at submission (policy.SAChoose) and the job
	// is then rigid; the policy should be conservative.
	SASubmit
	// SAStart: SA_i chooses at submission and again whenever the job could
	// start; the policy must be policy.ConservativeSAi.
	SAStart
)

// JobRecord is what happened to a job.
type JobRecord struct {
	ID               string
	Procs            int64
	RequestedSeconds int64
	SubmitSeconds    int64
	StartSeconds     int64
	EndSeconds       int64
	// Killed says it reached its requested time before its run time.
	Killed bool
	// Choice is the request a moldable job ran with (0: its own).
	Choice int
}

// Turnaround is tt = wait + execution (L559, L584).
func (r JobRecord) Turnaround() int64 { return r.EndSeconds - r.SubmitSeconds }

// Executed is te, the time it held its processors.
func (r JobRecord) Executed() int64 { return r.EndSeconds - r.StartSeconds }

// CheckRigidJobs validates a workload for a machine of procs processors.
func CheckRigidJobs(procs int64, jobs []RigidJob) error {
	if procs <= 0 {
		return fmt.Errorf("rigid jobs: %d processors: want > 0", procs)
	}
	ids := make(map[string]struct{}, len(jobs))
	for i, j := range jobs {
		if _, dup := ids[j.ID]; dup {
			return fmt.Errorf("rigid jobs: job %d: ID %q twice", i, j.ID)
		}
		ids[j.ID] = struct{}{}
		switch {
		case j.SubmitSeconds < 0:
			return fmt.Errorf("rigid jobs: job %q: submit time %d: want ≥ 0", j.ID, j.SubmitSeconds)
		case j.Procs < 1 || j.Procs > procs:
			return fmt.Errorf("rigid jobs: job %q: %d processors: want 1..%d", j.ID, j.Procs, procs)
		case j.RequestedSeconds < 1:
			return fmt.Errorf("rigid jobs: job %q: requested time %d s: want ≥ 1", j.ID, j.RequestedSeconds)
		case j.RunSeconds < 1:
			return fmt.Errorf("rigid jobs: job %q: run time %d s: want ≥ 1", j.ID, j.RunSeconds)
		}
		for k, a := range j.Alternatives {
			if a.Procs < 1 || a.Procs > procs || a.RequestedSeconds < 1 || a.RunSeconds < 1 {
				return fmt.Errorf("rigid jobs: job %q: alternative %d: %d processors, %d s requested, %d s run: want 1..%d processors and ≥ 1 s", j.ID, k, a.Procs, a.RequestedSeconds, a.RunSeconds, procs)
			}
		}
		if len(j.Alternatives) > 0 && j.Alternatives[0] != (MoldableRequest{j.Procs, j.RequestedSeconds, j.RunSeconds}) {
			return fmt.Errorf("rigid jobs: job %q: alternative 0 is not its own request", j.ID)
		}
	}
	return nil
}

// SimulateJobs runs the workload on a machine of procs processors under
// the job policy and returns one record per job, in submission order
// (submit time, then position in jobs). It is deterministic.
func SimulateJobs(ctx context.Context, procs int64, jobs []RigidJob, pol policy.JobPolicy) ([]JobRecord, error) {
	return SimulateMoldable(ctx, procs, jobs, pol, SAStatic)
}

// SimulateMoldable is SimulateJobs with moldable jobs choosing their
// requests as mode says; JobRecord.Choice is the request each ran with.
func SimulateMoldable(ctx context.Context, procs int64, jobs []RigidJob, pol policy.JobPolicy, mode SAMode) ([]JobRecord, error) {
	if err := CheckRigidJobs(procs, jobs); err != nil {
		return nil, err
	}
	s := newJobSim(procs, jobs, mode)
	for passes := 1; !s.done(); passes++ {
		if passes%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if err := s.step(pol); err != nil {
			return nil, err
		}
	}
	return s.recs, nil
}

func (s *jobSim) done() bool {
	return s.next == len(s.order) && len(s.queue) == 0 && s.ends.Len() == 0
}

// step is one instant of the loop: ends, arrivals, a pass of pol and its
// plan applied.
func (s *jobSim) step(pol policy.JobPolicy) error {
	now := s.nextInstant()
	for s.ends.Len() > 0 && s.ends[0].at <= now {
		delete(s.running, heap.Pop(&s.ends).(jobEnd).id)
	}
	if err := s.admit(now); err != nil {
		return err
	}
	plan, err := pol(&policy.JobState{Now: now, Procs: s.procs, Queue: s.queue, Running: s.runningNow()})
	if err != nil {
		return fmt.Errorf("simulate jobs: at %d s: %w", now, err)
	}
	s.apply(now, plan)
	return nil
}

// jobSim is the state of one SimulateMoldable run.
type jobSim struct {
	procs int64
	jobs  []RigidJob
	mode  SAMode
	// order is jobs' indices by submit time; recs[k] is order[k]'s record
	// and index maps an ID to k.
	order   []int
	recs    []JobRecord
	index   map[string]int
	ends    endHeap
	running map[string]policy.JobRunning
	queue   []policy.Job
	next    int   // the next arrival, in order
	wake    int64 // the earliest reservation, -1: none
	// target, when ≥ 0, is the order index of a job that chooses its
	// request as targetMode says instead of mode (SimulateTargets).
	target     int
	targetMode SAMode
}

func newJobSim(procs int64, jobs []RigidJob, mode SAMode) *jobSim {
	s := &jobSim{procs: procs, jobs: jobs, mode: mode, order: make([]int, len(jobs)), recs: make([]JobRecord, len(jobs)),
		index: make(map[string]int, len(jobs)), running: map[string]policy.JobRunning{}, wake: -1, target: -1}
	for i := range s.order {
		s.order[i] = i
	}
	slices.SortStableFunc(s.order, func(a, b int) int { return cmp.Compare(jobs[a].SubmitSeconds, jobs[b].SubmitSeconds) })
	for k, i := range s.order {
		j := jobs[i]
		s.recs[k] = JobRecord{ID: j.ID, Procs: j.Procs, RequestedSeconds: j.RequestedSeconds, SubmitSeconds: j.SubmitSeconds, StartSeconds: -1}
		s.index[j.ID] = k
	}
	return s
}

// nextInstant is the next arrival, end or reservation.
func (s *jobSim) nextInstant() int64 {
	now := int64(1<<63 - 1)
	if s.next < len(s.order) {
		now = s.jobs[s.order[s.next]].SubmitSeconds
	}
	if s.ends.Len() > 0 {
		now = min(now, s.ends[0].at)
	}
	if s.wake >= 0 {
		now = min(now, s.wake)
	}
	return now
}

func (s *jobSim) runningNow() []policy.JobRunning {
	out := make([]policy.JobRunning, 0, len(s.running))
	for _, r := range s.running {
		out = append(out, r)
	}
	return out
}

// admit queues the jobs arriving by now; under SA a moldable job's request
// is chosen as it arrives, against the queue so far.
func (s *jobSim) admit(now int64) error {
	for ; s.next < len(s.order) && s.jobs[s.order[s.next]].SubmitSeconds <= now; s.next++ {
		j := s.jobs[s.order[s.next]]
		q := policy.Job{ID: j.ID, Seq: uint64(s.next), Procs: j.Procs, RequestedSeconds: j.RequestedSeconds}
		mode := s.mode
		if s.next == s.target {
			mode = s.targetMode
		}
		if mode != SAStatic && len(j.Alternatives) > 1 {
			alts := make([]policy.JobRequest, len(j.Alternatives))
			for k, a := range j.Alternatives {
				alts[k] = policy.JobRequest{Procs: a.Procs, RequestedSeconds: a.RequestedSeconds}
			}
			c, err := policy.SAChoose(&policy.JobState{Now: now, Procs: s.procs, Queue: s.queue, Running: s.runningNow()}, alts)
			if err != nil {
				return fmt.Errorf("simulate jobs: at %d s: SA for %s: %w", now, j.ID, err)
			}
			q.Procs, q.RequestedSeconds = alts[c].Procs, alts[c].RequestedSeconds
			s.recs[s.next].Choice = c
			if mode == SAStart {
				q.Alternatives, q.Choice = alts, c
			}
		}
		s.queue = append(s.queue, q)
	}
	return nil
}

// apply starts the plan's jobs with their chosen requests and feeds the
// reservations and choices back into the queue (conservative keeps
// reservations; the other policies ignore them); it wakes at the earliest.
func (s *jobSim) apply(now int64, plan policy.JobPlan) {
	for _, c := range plan.Choices {
		s.recs[s.index[c.ID]].Choice = c.Choice
	}
	started := make(map[string]bool, len(plan.Start))
	for _, id := range plan.Start {
		k := s.index[id]
		j := s.jobs[s.order[k]]
		req := MoldableRequest{j.Procs, j.RequestedSeconds, j.RunSeconds}
		if c := s.recs[k].Choice; c > 0 {
			req = j.Alternatives[c]
		}
		run := min(req.RunSeconds, req.RequestedSeconds)
		r := &s.recs[k]
		r.Procs, r.RequestedSeconds = req.Procs, req.RequestedSeconds
		r.StartSeconds, r.EndSeconds, r.Killed = now, now+run, req.RunSeconds > req.RequestedSeconds
		s.running[id] = policy.JobRunning{ID: id, Procs: req.Procs, EndBy: now + req.RequestedSeconds}
		heap.Push(&s.ends, jobEnd{at: now + run, id: id})
		started[id] = true
	}
	if len(started) > 0 {
		s.queue = slices.DeleteFunc(s.queue, func(q policy.Job) bool { return started[q.ID] })
	}
	res := make(map[string]int64, len(plan.Reservations))
	s.wake = -1
	for _, r := range plan.Reservations {
		res[r.ID] = r.At
		if s.wake < 0 || r.At < s.wake {
			s.wake = r.At
		}
	}
	for k := range s.queue {
		q := &s.queue[k]
		q.ReservedAt, q.Reserved = res[q.ID]
		if len(q.Alternatives) > 0 {
			q.Choice = s.recs[s.index[q.ID]].Choice
			q.Procs, q.RequestedSeconds = q.Alternatives[q.Choice].Procs, q.Alternatives[q.Choice].RequestedSeconds
		}
	}
}

type jobEnd struct {
	at int64
	id string
}

type endHeap []jobEnd

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(a, b int) bool {
	return h[a].at < h[b].at || h[a].at == h[b].at && h[a].id < h[b].id
}
func (h endHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(jobEnd)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
