package policy

import (
	"cmp"
	"fmt"
	"slices"
)

// Rigid parallel jobs on a space-shared machine (seed 002, Moreira 2003,
// 002_7ead415125793782.txt L401, L497): a job asks for Procs processors and
// a requested time tr (RequestedSeconds), all its processors start
// together, and it is killed when it runs longer than tr. The machine is P
// interchangeable processors; which ones a job gets does not matter to the
// policies (the seed's model), only how many are free.
//
// The three job policies are pure functions of a JobState (no clock: Now is
// given) and return a JobPlan: the jobs to start now and the reservations of
// the jobs left waiting. Times are whole seconds; ties between jobs are
// broken by (Seq, ID), so the plan does not depend on the order of the
// input slices.

// JobPolicyNames are the job policies, in the order docs/POLICY.md
// describes them. NewJobPolicy also knows "conservative-sai", conservative
// backfilling with SA_i for moldable jobs (backfill_sa.go).
func JobPolicyNames() []string { return []string{"fcfs", "easy", "conservative"} }

// JobPolicy plans one scheduling pass over a machine's queue.
type JobPolicy func(s *JobState) (JobPlan, error)

// NewJobPolicy returns the named job policy.
func NewJobPolicy(name string) (JobPolicy, error) {
	switch name {
	case "fcfs":
		return FCFS, nil
	case "easy":
		return EASY, nil
	case "conservative":
		return Conservative, nil
	case "conservative-sai":
		return ConservativeSAi, nil
	}
	return nil, fmt.Errorf("job policy %q: want one of %v", name, JobPolicyNames())
}

// Job is a rigid job waiting in the queue.
type Job struct {
	ID string
	// Seq orders submissions (smaller: submitted earlier); ID breaks ties.
	Seq uint64
	// Procs is n, the processors it needs, all at once.
	Procs int64
	// RequestedSeconds is tr: the job is killed when it has run that long,
	// so the policies plan with it as the job's length.
	RequestedSeconds int64
	// Reserved says ReservedAt holds the start the previous conservative
	// plan promised the job (JobPlan.Reservations); a newly submitted job
	// has none. EASY and FCFS ignore it.
	Reserved   bool
	ReservedAt int64
	// Alternatives are a moldable job's requests (seed 002 chapter 5,
	// L1060-1062); Procs and RequestedSeconds are Alternatives[Choice].
	// Empty for a rigid job. Only ConservativeSAi changes the choice.
	Alternatives []JobRequest
	Choice       int
}

// JobRequest is one (n, tr) a moldable job may run with.
type JobRequest struct {
	Procs            int64
	RequestedSeconds int64
}

// JobRunning is a job holding processors.
type JobRunning struct {
	ID    string
	Procs int64
	// EndBy is its start plus its requested time: it ends at or before it.
	EndBy int64
}

// JobState is what a pass sees.
type JobState struct {
	Now int64
	// Procs is P, the machine's processors.
	Procs   int64
	Running []JobRunning
	Queue   []Job
}

// JobPlan is the outcome of a pass.
type JobPlan struct {
	// Start are the queued jobs to start now, in the order decided.
	Start []string
	// Reservations are promised starts of jobs left waiting, in queue
	// order: conservative backfilling gives every waiting job one, EASY
	// only the head of the queue, FCFS none.
	Reservations []JobReservation
	// Choices are the requests of the moldable jobs of the queue (started
	// or not), in queue order; set by ConservativeSAi only.
	Choices []JobChoice
}

// JobChoice is the request chosen for a moldable job: an index into its
// Alternatives.
type JobChoice struct {
	ID     string
	Choice int
}

// JobReservation is a promised start.
type JobReservation struct {
	ID string
	At int64
}

// ValidateJobs checks that s is well formed: P > 0, every job needs between
// 1 and P processors and at least 1 s, IDs are unique, running jobs end
// after Now and fit together, reservations are not in the past.
func ValidateJobs(s *JobState) error {
	if s == nil {
		return fmt.Errorf("job state: nil")
	}
	if s.Procs <= 0 {
		return fmt.Errorf("job state: %d processors: want > 0", s.Procs)
	}
	ids := make(map[string]struct{}, len(s.Running)+len(s.Queue))
	seen := func(id string) error {
		if _, dup := ids[id]; dup {
			return fmt.Errorf("job state: job %q twice", id)
		}
		ids[id] = struct{}{}
		return nil
	}
	var used int64
	for _, r := range s.Running {
		if err := seen(r.ID); err != nil {
			return err
		}
		if r.Procs < 1 || r.Procs > s.Procs {
			return fmt.Errorf("job state: running job %q: %d processors: want 1..%d", r.ID, r.Procs, s.Procs)
		}
		if r.EndBy <= s.Now {
			return fmt.Errorf("job state: running job %q: ends by %d, not after now (%d)", r.ID, r.EndBy, s.Now)
		}
		used += r.Procs
	}
	if used > s.Procs {
		return fmt.Errorf("job state: running jobs hold %d processors of %d", used, s.Procs)
	}
	for _, j := range s.Queue {
		if err := seen(j.ID); err != nil {
			return err
		}
		if j.Procs < 1 || j.Procs > s.Procs {
			return fmt.Errorf("job state: job %q: %d processors: want 1..%d", j.ID, j.Procs, s.Procs)
		}
		if j.RequestedSeconds < 1 {
			return fmt.Errorf("job state: job %q: requested time %d s: want ≥ 1", j.ID, j.RequestedSeconds)
		}
		if j.Reserved && j.ReservedAt < s.Now {
			return fmt.Errorf("job state: job %q: reserved at %d, before now (%d)", j.ID, j.ReservedAt, s.Now)
		}
		if err := validateAlternatives(s.Procs, j); err != nil {
			return err
		}
	}
	return nil
}

// jobBefore is the queue order: submission, then ID.
func jobBefore(a, b Job) int {
	return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
}

func sortedQueue(s *JobState) []Job {
	q := slices.Clone(s.Queue)
	slices.SortFunc(q, jobBefore)
	return q
}

func freeNow(s *JobState) int64 {
	free := s.Procs
	for _, r := range s.Running {
		free -= r.Procs
	}
	return free
}

// FCFS starts jobs in submission order while the next one fits; a job that
// does not fit blocks every job behind it (no backfilling).
func FCFS(s *JobState) (JobPlan, error) {
	if err := ValidateJobs(s); err != nil {
		return JobPlan{}, err
	}
	free := freeNow(s)
	var plan JobPlan
	for _, j := range sortedQueue(s) {
		if j.Procs > free {
			break
		}
		plan.Start = append(plan.Start, j.ID)
		free -= j.Procs
	}
	return plan, nil
}

// EASY is EASY backfilling (seed 002 L535-549, after Lifka's EASY and
// Mu'alem & Feitelson 2001): jobs start in submission order while they fit;
// the first that does not (the head) gets a reservation at the shadow time,
// the earliest time enough running jobs will have ended for it; then every
// later job that fits now starts if it does not delay the head: it ends by
// the shadow time, or it only uses the extra processors the head will leave
// free at the shadow time. Other waiting jobs may be delayed (L544-546).
func EASY(s *JobState) (JobPlan, error) {
	if err := ValidateJobs(s); err != nil {
		return JobPlan{}, err
	}
	free := freeNow(s)
	q := sortedQueue(s)
	running := slices.Clone(s.Running)
	var plan JobPlan
	i := 0
	for ; i < len(q) && q[i].Procs <= free; i++ {
		plan.Start = append(plan.Start, q[i].ID)
		free -= q[i].Procs
		running = append(running, JobRunning{ID: q[i].ID, Procs: q[i].Procs, EndBy: s.Now + q[i].RequestedSeconds})
	}
	if i == len(q) {
		return plan, nil
	}
	head := q[i]
	shadow, extra := shadowOf(running, free, head.Procs)
	plan.Reservations = []JobReservation{{ID: head.ID, At: shadow}}
	for _, j := range q[i+1:] {
		if j.Procs > free {
			continue
		}
		switch {
		case s.Now+j.RequestedSeconds <= shadow:
		case j.Procs <= extra:
			extra -= j.Procs
		default:
			continue
		}
		plan.Start = append(plan.Start, j.ID)
		free -= j.Procs
	}
	return plan, nil
}

// shadowOf is the earliest time at which need processors are free if the
// running jobs run to their EndBy, and how many more than need are free
// then. need > free and need ≤ P, so some running job's end is that time.
func shadowOf(running []JobRunning, free, need int64) (shadow, extra int64) {
	byEnd := slices.Clone(running)
	slices.SortFunc(byEnd, func(a, b JobRunning) int { return cmp.Compare(a.EndBy, b.EndBy) })
	avail := free
	for k := 0; k < len(byEnd); {
		t := byEnd[k].EndBy
		for ; k < len(byEnd) && byEnd[k].EndBy == t; k++ {
			avail += byEnd[k].Procs
		}
		if avail >= need {
			return t, avail - need
		}
	}
	// Unreachable for a validated state: all processors are free once
	// every running job has ended.
	panic("policy: EASY shadow: the head needs more processors than the machine has")
}

// Conservative is conservative backfilling (seed 002 L516-533, after
// Mu'alem & Feitelson 2001): every waiting job holds a reservation, and a
// job may start early only if it delays no other job's reservation. A new
// job gets the earliest slot that fits around the running jobs and every
// reservation made before it. On each pass the queue is compressed: in
// submission order, each job's reservation is released and taken again at
// the earliest slot that fits, which is never later than the old one (that
// slot is still free); so when a job ends before its requested time, the
// jobs behind it move up, the first that fits the hole first (L528-530).
// Jobs whose reservation is now start.
func Conservative(s *JobState) (JobPlan, error) {
	plan, _, err := conservative(s, false)
	return plan, err
}

// conservative plans the pass; with reChoose, a moldable job that could
// start now with some request takes the request SA predicts to end first
// (ConservativeSAi). It also returns the profile after the plan.
func conservative(s *JobState, reChoose bool) (JobPlan, *profile, error) {
	if err := ValidateJobs(s); err != nil {
		return JobPlan{}, nil, err
	}
	q := sortedQueue(s)
	p, err := newProfile(s.Now, s.Procs, s.Running, q)
	if err != nil {
		return JobPlan{}, nil, err
	}
	at := make([]int64, len(q))
	for k, j := range q {
		if j.Reserved {
			p.add(j.ReservedAt, j.ReservedAt+j.RequestedSeconds, j.Procs)
		}
		if reChoose && len(j.Alternatives) > 0 {
			q[k] = reChooseAtStart(p, s.Now, j)
			j = q[k]
		}
		at[k] = p.earliest(j.Procs, j.RequestedSeconds)
		p.add(at[k], at[k]+j.RequestedSeconds, -j.Procs)
	}
	var plan JobPlan
	for k, j := range q {
		if len(j.Alternatives) > 0 && reChoose {
			plan.Choices = append(plan.Choices, JobChoice{ID: j.ID, Choice: j.Choice})
		}
		if at[k] == s.Now {
			plan.Start = append(plan.Start, j.ID)
		} else {
			plan.Reservations = append(plan.Reservations, JobReservation{ID: j.ID, At: at[k]})
		}
	}
	return plan, p, nil
}

// profile is the number of free processors over time: step k holds from
// steps[k].t to steps[k+1].t (the last one forever).
type profile struct {
	steps []step
}

type step struct{ t, free int64 }

// newProfile builds the profile of the running jobs and of the queued jobs'
// reservations; it fails if they over-commit the machine (reservations that
// no conservative plan could have made).
func newProfile(now, procs int64, running []JobRunning, q []Job) (*profile, error) {
	type delta struct{ t, d int64 }
	ds := make([]delta, 0, 2*(len(running)+len(q)))
	for _, r := range running {
		ds = append(ds, delta{now, -r.Procs}, delta{r.EndBy, r.Procs})
	}
	for _, j := range q {
		if j.Reserved {
			ds = append(ds, delta{j.ReservedAt, -j.Procs}, delta{j.ReservedAt + j.RequestedSeconds, j.Procs})
		}
	}
	slices.SortFunc(ds, func(a, b delta) int { return cmp.Compare(a.t, b.t) })
	p := &profile{steps: []step{{now, procs}}}
	for _, d := range ds {
		last := &p.steps[len(p.steps)-1]
		if d.t == last.t {
			last.free += d.d
		} else {
			p.steps = append(p.steps, step{d.t, last.free + d.d})
		}
	}
	for _, st := range p.steps {
		if st.free < 0 {
			return nil, fmt.Errorf("job state: running jobs and reservations need %d processors of %d at %d", procs-st.free, procs, st.t)
		}
	}
	p.merge()
	return p, nil
}

// earliest is the first time a job of n processors and length d fits. The
// last step has every processor free, so there is one.
func (p *profile) earliest(n, d int64) int64 {
	for i := 0; i < len(p.steps); {
		if p.steps[i].free < n {
			i++
			continue
		}
		end := p.steps[i].t + d
		k := i + 1
		for ; k < len(p.steps) && p.steps[k].t < end; k++ {
			if p.steps[k].free < n {
				break
			}
		}
		if k == len(p.steps) || p.steps[k].t >= end {
			return p.steps[i].t
		}
		// Any start before step k would overlap it.
		i = k + 1
	}
	panic("policy: conservative profile: no slot on an empty machine")
}

// add adds delta free processors over [from, to), from ≥ the first step.
func (p *profile) add(from, to, delta int64) {
	a, b := p.split(from), p.split(to)
	for k := a; k < b; k++ {
		p.steps[k].free += delta
	}
	p.merge()
}

// split makes t a step boundary and returns the index of the step that
// starts at t.
func (p *profile) split(t int64) int {
	k, found := slices.BinarySearchFunc(p.steps, t, func(s step, t int64) int { return cmp.Compare(s.t, t) })
	if found {
		return k
	}
	p.steps = slices.Insert(p.steps, k, step{t, p.steps[k-1].free})
	return k
}

func (p *profile) merge() {
	out := p.steps[:1]
	for _, st := range p.steps[1:] {
		if st.free != out[len(out)-1].free {
			out = append(out, st)
		}
	}
	p.steps = out
}
