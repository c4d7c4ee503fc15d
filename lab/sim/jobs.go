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
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(jobs[a].SubmitSeconds, jobs[b].SubmitSeconds) })
	recs := make([]JobRecord, len(jobs))
	index := make(map[string]int, len(jobs)) // ID -> position in order
	for k, i := range order {
		j := jobs[i]
		recs[k] = JobRecord{ID: j.ID, Procs: j.Procs, RequestedSeconds: j.RequestedSeconds, SubmitSeconds: j.SubmitSeconds, StartSeconds: -1}
		index[j.ID] = k
	}
	var (
		ends    endHeap
		running = map[string]policy.JobRunning{}
		queue   []policy.Job
		next    int
		wake    int64 = -1
		passes  int
	)
	for next < len(order) || len(queue) > 0 || ends.Len() > 0 {
		if passes++; passes%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		now := int64(1<<63 - 1)
		if next < len(order) {
			now = jobs[order[next]].SubmitSeconds
		}
		if ends.Len() > 0 {
			now = min(now, ends[0].at)
		}
		if wake >= 0 {
			now = min(now, wake)
		}
		for ends.Len() > 0 && ends[0].at <= now {
			e := heap.Pop(&ends).(jobEnd)
			delete(running, e.id)
		}
		runningNow := func() []policy.JobRunning {
			out := make([]policy.JobRunning, 0, len(running))
			for _, r := range running {
				out = append(out, r)
			}
			return out
		}
		for ; next < len(order) && jobs[order[next]].SubmitSeconds <= now; next++ {
			j := jobs[order[next]]
			q := policy.Job{ID: j.ID, Seq: uint64(next), Procs: j.Procs, RequestedSeconds: j.RequestedSeconds}
			if mode != SAStatic && len(j.Alternatives) > 1 {
				alts := make([]policy.JobRequest, len(j.Alternatives))
				for k, a := range j.Alternatives {
					alts[k] = policy.JobRequest{Procs: a.Procs, RequestedSeconds: a.RequestedSeconds}
				}
				c, err := policy.SAChoose(&policy.JobState{Now: now, Procs: procs, Queue: queue, Running: runningNow()}, alts)
				if err != nil {
					return nil, fmt.Errorf("simulate jobs: at %d s: SA for %s: %w", now, j.ID, err)
				}
				q.Procs, q.RequestedSeconds = alts[c].Procs, alts[c].RequestedSeconds
				recs[next].Choice = c
				if mode == SAStart {
					q.Alternatives, q.Choice = alts, c
				}
			}
			queue = append(queue, q)
		}
		st := &policy.JobState{Now: now, Procs: procs, Queue: queue, Running: runningNow()}
		plan, err := pol(st)
		if err != nil {
			return nil, fmt.Errorf("simulate jobs: at %d s: %w", now, err)
		}
		for _, c := range plan.Choices {
			recs[index[c.ID]].Choice = c.Choice
		}
		started := make(map[string]bool, len(plan.Start))
		for _, id := range plan.Start {
			k := index[id]
			j := jobs[order[k]]
			req := MoldableRequest{j.Procs, j.RequestedSeconds, j.RunSeconds}
			if c := recs[k].Choice; c > 0 {
				req = j.Alternatives[c]
			}
			run := min(req.RunSeconds, req.RequestedSeconds)
			recs[k].Procs, recs[k].RequestedSeconds = req.Procs, req.RequestedSeconds
			recs[k].StartSeconds, recs[k].EndSeconds = now, now+run
			recs[k].Killed = req.RunSeconds > req.RequestedSeconds
			running[id] = policy.JobRunning{ID: id, Procs: req.Procs, EndBy: now + req.RequestedSeconds}
			heap.Push(&ends, jobEnd{at: now + run, id: id})
			started[id] = true
		}
		if len(started) > 0 {
			queue = slices.DeleteFunc(queue, func(q policy.Job) bool { return started[q.ID] })
		}
		// Feed the reservations back (conservative keeps them; the others
		// ignore them) and wake at the earliest.
		res := make(map[string]int64, len(plan.Reservations))
		wake = -1
		for _, r := range plan.Reservations {
			res[r.ID] = r.At
			if wake < 0 || r.At < wake {
				wake = r.At
			}
		}
		for k := range queue {
			queue[k].ReservedAt, queue[k].Reserved = res[queue[k].ID]
			if q := &queue[k]; len(q.Alternatives) > 0 {
				q.Choice = recs[index[q.ID]].Choice
				q.Procs, q.RequestedSeconds = q.Alternatives[q.Choice].Procs, q.Alternatives[q.Choice].RequestedSeconds
			}
		}
	}
	return recs, nil
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
