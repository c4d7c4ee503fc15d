package policy

import (
	"fmt"
	"slices"
)

// SA_s on a live federation (issue 21 item 5; docs/POLICY.md, "SA live").
// SAChoose predicts on one machine of P processors; a federation has many
// machines, gangs, owner policies and power limits. SAChooseLive predicts
// each alternative request's start and end with LiveBackfill's reservation
// profile (livebackfill.go): the running tasks hold their room until their
// limits run out, the waiting tasks ahead are reserved in order, every one
// at its earliest instant beside the holds before it (conservative
// backfilling: with no further arrivals and every task running its limit,
// nothing moves), and each alternative takes the earliest instant it fits
// beside all of them. The alternative with the earliest predicted end (the
// smallest turnaround: every alternative is submitted now) is chosen, the
// first listed on a tie.
//
// Approximations, stated in docs/POLICY.md:
//   - The prediction is conservative backfilling in the federation's order
//     whatever the job policy: under fcfs and easy the passes let fewer or
//     more tasks pass a waiting one than conservative does.
//   - Order: submission order (Seq) under fcfs, easy and conservative, the
//     task last; under ehosep (or ""), EHOSEP's organisation order
//     (EHOSEPEasy's), waiting gangs (State.Gangs) and tasks alike, the task
//     where that order puts it. EHOSEP preempts, and holds machines only
//     for the head gang, so there the prediction is a guess.
//   - A gang (Nodes ≥ 2) is planned as one reservation of Nodes machines of
//     one organisation from one instant (livePass.earliestGang, as the
//     backfilling modes reserve it), with the gang's power checked
//     together.
//   - A task ahead that waits forever (for room held by tasks without a
//     limit) stops the plan, as it stops conservative's pass: nothing after
//     it has a finite prediction.

// SARequest is one alternative request of a moldable task: Nodes machines
// (1: one; k ≥ 2: a gang of k parts), CPUs per machine (0: one) and the
// requested time WallLimitMs (the seed's tr, > 0).
type SARequest struct {
	Nodes       int
	CPUs        int64
	WallLimitMs int64
}

// SAInput is what SA_s predicts on.
type SAInput struct {
	// State is the federation's view (ledger.PolicyView's): its Queued
	// tasks and waiting Gangs are ahead. Not modified.
	State *State
	// JobPolicy is the federation's job policy ("", "ehosep", "fcfs",
	// "easy" or "conservative"): it decides the order.
	JobPolicy string
	// Task is the moldable task: its organisation, size, memory, GPUs,
	// requirements and executable; its CPUs and wall-clock limit are each
	// alternative's. Its ID must not be one of the view's.
	Task         Task
	Alternatives []SARequest
}

// SAPrediction is an alternative's predicted start and end, in ms from
// the view's now (Unbounded for both when it would never start).
type SAPrediction struct {
	StartMs, EndMs int64
}

// MaxSAAlternatives bounds the alternatives of one task.
const MaxSAAlternatives = 16

// ValidateSARequests checks alternatives against the bounds of a task's
// request: 1 to MaxSAAlternatives of them, Nodes 1..MaxGangSize, CPUs
// 0..MaxCPUs, WallLimitMs > 0.
func ValidateSARequests(alts []SARequest) error {
	if len(alts) == 0 || len(alts) > MaxSAAlternatives {
		return fmt.Errorf("SA: %d alternatives: want 1 to %d", len(alts), MaxSAAlternatives)
	}
	for i, a := range alts {
		if a.Nodes < 1 || a.Nodes > MaxGangSize || a.CPUs < 0 || a.CPUs > MaxCPUs || a.WallLimitMs <= 0 {
			return fmt.Errorf("SA: alternative %d: %d nodes of %d cpus for %d ms: want 1..%d nodes, 0..%d cpus, > 0 ms",
				i, a.Nodes, a.CPUs, a.WallLimitMs, MaxGangSize, MaxCPUs)
		}
	}
	return nil
}

// SAChooseLive is SA_s on a live federation: the index of the chosen
// alternative and every alternative's prediction, in the order given.
func SAChooseLive(in SAInput) (int, []SAPrediction, error) {
	if err := ValidateSARequests(in.Alternatives); err != nil {
		return 0, nil, err
	}
	s := withQueued(in.State)
	if err := Validate(s); err != nil {
		return 0, nil, err
	}
	if in.Task.Org < 0 || in.Task.Org >= len(s.Orgs) {
		return 0, nil, fmt.Errorf("SA: task's organisation %d of %d", in.Task.Org, len(s.Orgs))
	}
	preds := make([]SAPrediction, len(in.Alternatives))
	for i := range preds {
		preds[i] = SAPrediction{Unbounded, Unbounded}
	}
	b, ok := planAhead(s, in)
	if !ok {
		return 0, preds, nil
	}
	best := 0
	for i, a := range in.Alternatives {
		preds[i] = b.predict(in.Task, a)
		if preds[i].EndMs < preds[best].EndMs {
			best = i
		}
	}
	return best, preds, nil
}

// planAhead reserves every item ahead of in.Task in the policy's order,
// each at its earliest instant beside those before it (conservative
// backfilling), and returns the pass; false when one of them waits
// forever.
func planAhead(s *State, in SAInput) (*livePass, bool) {
	cand := in.Task
	cand.Request.CPUs, cand.WallLimitMs = in.Alternatives[0].CPUs, in.Alternatives[0].WallLimitMs
	cand.Seq = MaxSeq(s) + 1
	withCand := *s
	withCand.Queued = append(slices.Clone(s.Queued), cand)
	mode := "conservative"
	if in.JobPolicy == "" || in.JobPolicy == "ehosep" {
		mode = EHOSEPEasy
	}
	b := newLivePass(s)
	q := newLiveOrder(&withCand, mode)
	for {
		it, more := q.next()
		if !more || it.gang == nil && it.t.ID == cand.ID {
			return b, true
		}
		elig, ok := b.feasible(it)
		if !ok {
			continue // never runs: passed over
		}
		ms, at := b.earliestItem(it, elig, Unbounded)
		if at == Unbounded {
			return nil, false
		}
		b.addItem(it, ms, at)
		if at == 0 {
			q.started(it, ms)
		}
	}
}

// MaxSeq is the highest submission sequence among s's waiting tasks and
// gangs' parts (0 when none): a task submitted now comes after it.
func MaxSeq(s *State) uint64 {
	var m uint64
	for _, t := range s.Queued {
		m = max(m, t.Seq)
	}
	for _, g := range s.Gangs {
		for _, p := range g.Parts {
			m = max(m, p.Seq)
		}
	}
	return m
}

// SAGangOf is t as a gang of nodes parts, one per machine, each part's ID
// t's with its rank: how a chosen gang alternative waits in a view.
func SAGangOf(t Task, nodes int) GangJob {
	g := GangJob{ID: t.ID, Parts: make([]Task, nodes)}
	for r := range g.Parts {
		g.Parts[r] = t
		g.Parts[r].ID = fmt.Sprintf("%s#%d", t.ID, r)
	}
	return g
}

// predict is alternative a's start and end for t beside everything
// reserved in b (b is not changed).
func (b *livePass) predict(t Task, a SARequest) SAPrediction {
	t.Request.CPUs, t.WallLimitMs = a.CPUs, a.WallLimitMs
	it := liveItem{t: t}
	if a.Nodes >= 2 {
		g := SAGangOf(t, a.Nodes)
		it = liveItem{t: g.Parts[0], gang: &g}
	}
	elig, ok := b.feasible(it)
	if !ok {
		return SAPrediction{Unbounded, Unbounded}
	}
	_, at := b.earliestItem(it, elig, Unbounded)
	if at == Unbounded {
		return SAPrediction{Unbounded, Unbounded}
	}
	return SAPrediction{at, endOf(at, t.WallLimitMs)}
}
