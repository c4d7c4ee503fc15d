package policy

import "fmt"

// SA, the application scheduler of seed 002's chapter 5 (L1072-1107, after
// Cirne's "Supercomputer AppLeS"): a moldable job lists alternative
// requests (n, tr), and SA picks the one whose predicted turnaround is
// smallest. The prediction simulates the machine forward from its current
// state with no further arrivals and every job running for its requested
// time (L1078, L1083). Under conservative backfilling (the scheduler both
// SA variants were evaluated on, L1125) that simulation is exact and
// short: with no early ends nothing moves, so the waiting jobs keep the
// slots of the current plan and the new request takes the earliest slot
// that fits around them. SA_s chooses once, at submission (SAChoose, run
// by the submitter); SA_i is embedded in the scheduler and chooses again
// whenever the job could start (ConservativeSAi).

func validateAlternatives(procs int64, j Job) error {
	if len(j.Alternatives) == 0 {
		if j.Choice != 0 {
			return fmt.Errorf("job state: job %q: choice %d without alternatives", j.ID, j.Choice)
		}
		return nil
	}
	if j.Choice < 0 || j.Choice >= len(j.Alternatives) {
		return fmt.Errorf("job state: job %q: choice %d of %d alternatives", j.ID, j.Choice, len(j.Alternatives))
	}
	for i, a := range j.Alternatives {
		if a.Procs < 1 || a.Procs > procs || a.RequestedSeconds < 1 {
			return fmt.Errorf("job state: job %q: alternative %d: %d processors for %d s: want 1..%d processors, ≥ 1 s", j.ID, i, a.Procs, a.RequestedSeconds, procs)
		}
	}
	if c := j.Alternatives[j.Choice]; c.Procs != j.Procs || c.RequestedSeconds != j.RequestedSeconds {
		return fmt.Errorf("job state: job %q: runs %d processors for %d s, its choice %d is %d for %d s", j.ID, j.Procs, j.RequestedSeconds, j.Choice, c.Procs, c.RequestedSeconds)
	}
	return nil
}

// bestRequest is the alternative with the earliest predicted end in p from
// now, the first listed on a tie.
func bestRequest(p *profile, alts []JobRequest) int {
	best, bestEnd := 0, int64(0)
	for i, a := range alts {
		end := p.earliest(a.Procs, a.RequestedSeconds) + a.RequestedSeconds
		if i == 0 || end < bestEnd {
			best, bestEnd = i, end
		}
	}
	return best
}

// SAChoose is SA_s: the index of the request among alts with the smallest
// predicted turnaround if the job were submitted now to a machine run by
// conservative backfilling in state s (s's queue with its reservations;
// the job is not in it).
func SAChoose(s *JobState, alts []JobRequest) (int, error) {
	if len(alts) == 0 {
		return 0, fmt.Errorf("SA: no requests to choose from")
	}
	probe := Job{ID: "\x00sa", Procs: alts[0].Procs, RequestedSeconds: alts[0].RequestedSeconds, Alternatives: alts}
	if err := validateAlternatives(s.Procs, probe); err != nil {
		return 0, err
	}
	_, p, err := conservative(s, false)
	if err != nil {
		return 0, err
	}
	return bestRequest(p, alts), nil
}

// ConservativeSAi is conservative backfilling with SA_i embedded: when the
// queue is compressed and a moldable job could start now with one of its
// requests (a backfilling opportunity, or its turn), SA chooses its request
// again from the current state (L1093-1105); otherwise it keeps its
// request, and its reservation, as conservative does. JobPlan.Choices
// reports every moldable job's request.
func ConservativeSAi(s *JobState) (JobPlan, error) {
	plan, _, err := conservative(s, true)
	return plan, err
}

// reChooseAtStart returns j with SA_i's request: p holds everything but j.
func reChooseAtStart(p *profile, now int64, j Job) Job {
	canStart := false
	for _, a := range j.Alternatives {
		if p.earliest(a.Procs, a.RequestedSeconds) == now {
			canStart = true
			break
		}
	}
	if !canStart {
		return j
	}
	j.Choice = bestRequest(p, j.Alternatives)
	j.Procs, j.RequestedSeconds = j.Alternatives[j.Choice].Procs, j.Alternatives[j.Choice].RequestedSeconds
	j.Reserved = false
	return j
}
