package policy

import (
	"slices"
	"sort"
)

// The reference job policies: plain, slow and obviously correct. Usage of
// the machine is recomputed by summing over every job for every instant
// looked at; no profile, no incremental state. The fast policies in
// backfill.go must agree with them decision for decision.

// refSlot is a job holding processors over [from, to).
type refSlot struct {
	id       string
	procs    int64
	from, to int64
}

// refFree is the number of processors free at instant t.
func refFree(procs int64, slots []refSlot, t int64) int64 {
	free := procs
	for _, s := range slots {
		if s.from <= t && t < s.to {
			free -= s.procs
		}
	}
	return free
}

// refFits says whether n processors are free over all of [from, from+d):
// usage only changes where a slot starts, so checking from and every slot
// start inside the window is checking every instant.
func refFits(procs int64, slots []refSlot, n, from, d int64) bool {
	if refFree(procs, slots, from) < n {
		return false
	}
	for _, s := range slots {
		if s.from > from && s.from < from+d && refFree(procs, slots, s.from) < n {
			return false
		}
	}
	return true
}

// refEarliest is the first start ≥ now where the job fits. Usage only falls
// where a slot ends, so the earliest start is now or some slot's end.
func refEarliest(now, procs int64, slots []refSlot, n, d int64) int64 {
	cands := []int64{now}
	for _, s := range slots {
		if s.to > now {
			cands = append(cands, s.to)
		}
	}
	slices.Sort(cands)
	for _, c := range cands {
		if refFits(procs, slots, n, c, d) {
			return c
		}
	}
	panic("reference: no slot")
}

func refRunningSlots(s *JobState) []refSlot {
	var out []refSlot
	for _, r := range s.Running {
		out = append(out, refSlot{r.ID, r.Procs, s.Now, r.EndBy})
	}
	return out
}

func refQueue(s *JobState) []Job {
	q := slices.Clone(s.Queue)
	sort.Slice(q, func(a, b int) bool {
		if q[a].Seq != q[b].Seq {
			return q[a].Seq < q[b].Seq
		}
		return q[a].ID < q[b].ID
	})
	return q
}

func referenceFCFS(s *JobState) (JobPlan, error) {
	if err := ValidateJobs(s); err != nil {
		return JobPlan{}, err
	}
	slots := refRunningSlots(s)
	var plan JobPlan
	for _, j := range refQueue(s) {
		if refFree(s.Procs, slots, s.Now) < j.Procs {
			break
		}
		plan.Start = append(plan.Start, j.ID)
		slots = append(slots, refSlot{j.ID, j.Procs, s.Now, s.Now + j.RequestedSeconds})
	}
	return plan, nil
}

// referenceEASY states EASY's rule as its definition: after starting jobs
// in order while they fit, a later job starts if it fits now and, with it
// running for its requested time, the head of the queue could still start
// at the time it could before (its reservation).
func referenceEASY(s *JobState) (JobPlan, error) {
	if err := ValidateJobs(s); err != nil {
		return JobPlan{}, err
	}
	slots := refRunningSlots(s)
	q := refQueue(s)
	var plan JobPlan
	i := 0
	for ; i < len(q) && refFree(s.Procs, slots, s.Now) >= q[i].Procs; i++ {
		plan.Start = append(plan.Start, q[i].ID)
		slots = append(slots, refSlot{q[i].ID, q[i].Procs, s.Now, s.Now + q[i].RequestedSeconds})
	}
	if i == len(q) {
		return plan, nil
	}
	head := q[i]
	reserved := refEarliest(s.Now, s.Procs, slots, head.Procs, head.RequestedSeconds)
	plan.Reservations = []JobReservation{{head.ID, reserved}}
	for _, j := range q[i+1:] {
		if refFree(s.Procs, slots, s.Now) < j.Procs {
			continue
		}
		with := append(slices.Clone(slots), refSlot{j.ID, j.Procs, s.Now, s.Now + j.RequestedSeconds})
		if refEarliest(s.Now, s.Procs, with, head.Procs, head.RequestedSeconds) > reserved {
			continue
		}
		plan.Start = append(plan.Start, j.ID)
		slots = with
	}
	return plan, nil
}

// referenceConservative places the queue in submission order: each job is
// taken out of the schedule (its old reservation, if any) and put back at
// the earliest start that fits around the running jobs and every other
// job's current slot.
func referenceConservative(s *JobState) (JobPlan, error) {
	if err := ValidateJobs(s); err != nil {
		return JobPlan{}, err
	}
	q := refQueue(s)
	slots := refRunningSlots(s)
	for _, j := range q {
		if j.Reserved {
			slots = append(slots, refSlot{j.ID, j.Procs, j.ReservedAt, j.ReservedAt + j.RequestedSeconds})
		}
	}
	// Reject reservations that over-commit the machine at any instant.
	for _, sl := range slots {
		if refFree(s.Procs, slots, sl.from) < 0 {
			return JobPlan{}, errOverCommitted
		}
	}
	at := map[string]int64{}
	for _, j := range q {
		slots = slices.DeleteFunc(slots, func(sl refSlot) bool { return sl.id == j.ID })
		t := refEarliest(s.Now, s.Procs, slots, j.Procs, j.RequestedSeconds)
		at[j.ID] = t
		slots = append(slots, refSlot{j.ID, j.Procs, t, t + j.RequestedSeconds})
	}
	var plan JobPlan
	for _, j := range q {
		if at[j.ID] == s.Now {
			plan.Start = append(plan.Start, j.ID)
		} else {
			plan.Reservations = append(plan.Reservations, JobReservation{j.ID, at[j.ID]})
		}
	}
	return plan, nil
}

type refError string

func (e refError) Error() string { return string(e) }

const errOverCommitted = refError("reference: reservations over-commit the machine")

// referenceBest is the alternative with the earliest predicted end given
// slots, the first listed on a tie.
func referenceBest(now, procs int64, slots []refSlot, alts []JobRequest) int {
	best, bestEnd := 0, int64(0)
	for i, a := range alts {
		end := refEarliest(now, procs, slots, a.Procs, a.RequestedSeconds) + a.RequestedSeconds
		if i == 0 || end < bestEnd {
			best, bestEnd = i, end
		}
	}
	return best
}

// referenceConservativeSAi is referenceConservative where a moldable job
// that could start now with one of its requests takes SA's best request.
func referenceConservativeSAi(s *JobState) (JobPlan, error) {
	if err := ValidateJobs(s); err != nil {
		return JobPlan{}, err
	}
	q := refQueue(s)
	slots := refRunningSlots(s)
	for _, j := range q {
		if j.Reserved {
			slots = append(slots, refSlot{j.ID, j.Procs, j.ReservedAt, j.ReservedAt + j.RequestedSeconds})
		}
	}
	at := map[string]int64{}
	for k, j := range q {
		slots = slices.DeleteFunc(slots, func(sl refSlot) bool { return sl.id == j.ID })
		if len(j.Alternatives) > 0 {
			for _, a := range j.Alternatives {
				if refEarliest(s.Now, s.Procs, slots, a.Procs, a.RequestedSeconds) == s.Now {
					j.Choice = referenceBest(s.Now, s.Procs, slots, j.Alternatives)
					j.Procs, j.RequestedSeconds = j.Alternatives[j.Choice].Procs, j.Alternatives[j.Choice].RequestedSeconds
					q[k] = j
					break
				}
			}
		}
		t := refEarliest(s.Now, s.Procs, slots, j.Procs, j.RequestedSeconds)
		at[j.ID] = t
		slots = append(slots, refSlot{j.ID, j.Procs, t, t + j.RequestedSeconds})
	}
	var plan JobPlan
	for _, j := range q {
		if len(j.Alternatives) > 0 {
			plan.Choices = append(plan.Choices, JobChoice{j.ID, j.Choice})
		}
		if at[j.ID] == s.Now {
			plan.Start = append(plan.Start, j.ID)
		} else {
			plan.Reservations = append(plan.Reservations, JobReservation{j.ID, at[j.ID]})
		}
	}
	return plan, nil
}

// referenceSAChoose plans the pass, then predicts each request's end
// around the running, started and reserved jobs.
func referenceSAChoose(s *JobState, alts []JobRequest) (int, error) {
	plan, err := referenceConservative(s)
	if err != nil {
		return 0, err
	}
	slots := refRunningSlots(s)
	byID := map[string]Job{}
	for _, j := range s.Queue {
		byID[j.ID] = j
	}
	for _, id := range plan.Start {
		slots = append(slots, refSlot{id, byID[id].Procs, s.Now, s.Now + byID[id].RequestedSeconds})
	}
	for _, r := range plan.Reservations {
		slots = append(slots, refSlot{r.ID, byID[r.ID].Procs, r.At, r.At + byID[r.ID].RequestedSeconds})
	}
	return referenceBest(s.Now, s.Procs, slots, alts), nil
}
