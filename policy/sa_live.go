package policy

import (
	"cmp"
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
//     task last; under ehosep (or ""), the gangs ahead first (the ledger
//     places gangs before the pass) and then EHOSEP's organisation order
//     (EHOSEPEasy's), the task where that order puts it. EHOSEP preempts
//     and never reserves, so there the prediction is a guess.
//   - A gang (Nodes ≥ 2) is planned as one reservation of Nodes machines of
//     one organisation from one instant: the first Nodes machines of an
//     owner, in energy order, that each fit a part, with the gang's power
//     checked together. The ledger places a waiting gang only when its
//     machines are free at once and holds no reservation for it, so a gang
//     may start later than predicted.
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

// SAGang is a gang waiting ahead: Size parts, each Part (the ledger leaves
// waiting gangs out of State.Queued).
type SAGang struct {
	Part Task
	Size int
}

// SAInput is what SA_s predicts on.
type SAInput struct {
	// State is the federation's view (ledger.PolicyView's): its Queued
	// tasks and Gangs are the tasks ahead. Not modified.
	State *State
	// JobPolicy is the federation's job policy ("", "ehosep", "fcfs",
	// "easy" or "conservative"): it decides the order.
	JobPolicy string
	Gangs     []SAGang
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
	for i, g := range in.Gangs {
		if g.Size < 2 || g.Size > MaxGangSize || g.Part.Org < 0 || g.Part.Org >= len(s.Orgs) {
			return 0, nil, fmt.Errorf("SA: gang %d (%q): %d parts of organisation %d", i, g.Part.ID, g.Size, g.Part.Org)
		}
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

// saItem is one entry of the order: a task, or a gang's part and size.
type saItem struct {
	t    Task
	size int // 0: one machine
	cand bool
}

// planAhead reserves every task ahead of in.Task, in the order, and
// returns the pass; false when one of them waits forever.
func planAhead(s *State, in SAInput) (*livePass, bool) {
	cand := in.Task
	cand.Request.CPUs, cand.WallLimitMs = in.Alternatives[0].CPUs, in.Alternatives[0].WallLimitMs
	var maxSeq uint64
	for _, t := range s.Queued {
		maxSeq = max(maxSeq, t.Seq)
	}
	for _, g := range in.Gangs {
		maxSeq = max(maxSeq, g.Part.Seq)
	}
	cand.Seq = maxSeq + 1
	var items []saItem
	for _, g := range in.Gangs {
		items = append(items, saItem{t: g.Part, size: g.Size})
	}
	b := newLivePass(s)
	if in.JobPolicy == "" || in.JobPolicy == "ehosep" {
		slices.SortStableFunc(items, func(x, y saItem) int { return cmp.Or(cmp.Compare(x.t.Seq, y.t.Seq), cmp.Compare(x.t.ID, y.t.ID)) })
		for _, it := range items {
			if !b.reserve(it) {
				return nil, false
			}
		}
		withCand := *s
		withCand.Queued = append(slices.Clone(s.Queued), cand)
		q := newLiveOrder(&withCand, EHOSEPEasy)
		for {
			t, more := q.next()
			if !more || t.ID == cand.ID {
				return b, true
			}
			if !b.reserveStarted(t, q) {
				return nil, false
			}
		}
	}
	for _, t := range s.Queued {
		items = append(items, saItem{t: t})
	}
	slices.SortStableFunc(items, func(x, y saItem) int { return cmp.Or(cmp.Compare(x.t.Seq, y.t.Seq), cmp.Compare(x.t.ID, y.t.ID)) })
	for _, it := range items {
		if !b.reserve(it) {
			return nil, false
		}
	}
	return b, true
}

// reserve places it at its earliest instant; false when it waits
// forever (a task no machine could ever run is passed over).
func (b *livePass) reserve(it saItem) bool {
	if it.size >= 2 {
		if !b.gangFeasible(it.t, it.size) {
			return true
		}
		ms, at := b.earliestGang(it.t, it.size)
		if at == Unbounded {
			return false
		}
		for _, m := range ms {
			b.add(it.t, m, at)
		}
		return true
	}
	return b.reserveStarted(it.t, nil)
}

// reserveStarted reserves one task, telling q (if any) when it starts now.
func (b *livePass) reserveStarted(t Task, q *liveOrder) bool {
	elig, ok := b.feasible(t)
	if !ok {
		return true
	}
	m, at := b.earliest(t, elig, Unbounded)
	if at == Unbounded {
		return false
	}
	b.add(t, m, at)
	if at == 0 && q != nil {
		q.started(t, m)
	}
	return true
}

// predict is alternative a's start and end for t beside everything
// reserved in b (b is not changed).
func (b *livePass) predict(t Task, a SARequest) SAPrediction {
	t.Request.CPUs, t.WallLimitMs = a.CPUs, a.WallLimitMs
	never := SAPrediction{Unbounded, Unbounded}
	at := Unbounded
	if a.Nodes >= 2 {
		if !b.gangFeasible(t, a.Nodes) {
			return never
		}
		_, at = b.earliestGang(t, a.Nodes)
	} else {
		elig, ok := b.feasible(t)
		if !ok {
			return never
		}
		_, at = b.earliest(t, elig, Unbounded)
	}
	if at == Unbounded {
		return never
	}
	return SAPrediction{at, endOf(at, t.WallLimitMs)}
}

// gangFeasible says some organisation has size eligible machines that
// could each hold a part, with the gang's power within t's organisation's
// limit on them (ever, everything else aside).
func (b *livePass) gangFeasible(t Task, size int) bool {
	elig := Eligible(b.s.Machines, t, b.s.Orgs)
	req := t.Request.Request()
	count, draw := map[int]int{}, map[int]int64{}
	for _, m := range b.energy {
		mc := b.s.Machines[m]
		if !elig[m] || !fitsIn(req, mc.Capacity.Capacity(), mc.Capacity.Capacity()) || count[mc.Owner] == size {
			continue
		}
		count[mc.Owner]++
		draw[mc.Owner] += b.draw(t, m)
		if count[mc.Owner] == size && draw[mc.Owner] <= b.s.Orgs[t.Org].LimitMilliW {
			return true
		}
	}
	return false
}

// earliestGang is the first instant size machines of one organisation
// each fit a part of t for its whole length, with the gang's power within
// the limit, and those machines: at each candidate instant (now and every
// end of a span of an eligible machine or of t's organisation), the first
// owner in energy order whose size-th fitting machine comes first.
func (b *livePass) earliestGang(t Task, size int) ([]int, int64) {
	elig := Eligible(b.s.Machines, t, b.s.Orgs)
	cands := []int64{0}
	tls := []*timeline{&b.ofOrg[t.Org]}
	for m, ok := range elig {
		if ok {
			tls = append(tls, &b.onMach[m])
		}
	}
	for _, tl := range tls {
		for _, sp := range tl.ends {
			cands = append(cands, sp.to)
		}
		for _, sp := range tl.later {
			cands = append(cands, sp.to)
		}
	}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	for _, c := range cands {
		if c == Unbounded {
			break
		}
		fitting := map[int][]int{}
		failed := map[int]bool{}
		for _, m := range b.energy {
			own := b.s.Machines[m].Owner
			if !elig[m] || failed[own] || (c == 0 && b.s.held(m)) || !b.fitsFrom(t, m, c) {
				continue
			}
			fitting[own] = append(fitting[own], m)
			if len(fitting[own]) < size {
				continue
			}
			if b.gangPowerFits(t, fitting[own], c) {
				return fitting[own], c
			}
			failed[own] = true
		}
	}
	return nil, Unbounded
}

// gangPowerFits says t's organisation stays within its limit with a part
// of t on each of ms over [c, c+length): at c and wherever a reservation
// of the organisation starts inside the window.
func (b *livePass) gangPowerFits(t Task, ms []int, c int64) bool {
	var draw int64
	for _, m := range ms {
		draw += b.draw(t, m)
	}
	org, lim := &b.ofOrg[t.Org], b.s.Orgs[t.Org].LimitMilliW
	if org.peak+draw <= lim {
		return true
	}
	end := endOf(c, t.WallLimitMs)
	xs := []int64{c}
	for _, sp := range org.later {
		if sp.from > c && sp.from < end {
			xs = append(xs, sp.from)
		}
	}
	for _, x := range xs {
		if _, pi := org.at(x); pi+draw > lim {
			return false
		}
	}
	return true
}
