package policy

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
)

// refHold is one task's hold on machine m and organisation org over
// [from, to) ms from now.
type refHold struct {
	m, org   int
	from, to int64
	req      Resources
	draw     int64
}

// referenceLiveBackfill is LiveBackfill stated as plainly as possible: one
// flat list of holds, usage summed over all of them at every instant
// looked at, every instant any hold begins or ends looked at, every
// machine tried in energy order.
func referenceLiveBackfill(mode string, s *State) (LivePlan, error) {
	s = withQueued(s)
	if err := Validate(s); err != nil {
		return LivePlan{}, err
	}
	limit := func(t Task, m int) int64 {
		if t.WallLimitMs > 0 {
			return t.WallLimitMs
		}
		if p := s.Machines[m].Policy; p != nil {
			return p.MaxWallMs
		}
		return 0
	}
	end := func(at, l int64) int64 {
		if l == 0 {
			return Unbounded
		}
		return at + l
	}
	draw := func(t Task, m int) int64 {
		return ShareOf(s.Machines[m].Capacity, t.Request).Of(s.Machines[m].BusyMilliW)
	}
	var holds []refHold
	hold := func(t Task, m int, from, to int64) {
		holds = append(holds, refHold{m, t.Org, from, to, t.Request.Request(), draw(t, m)})
	}
	for _, r := range s.Running {
		to := Unbounded
		if l := limit(r.Task, r.Machine); l > 0 {
			ran := int64(r.RunSeconds*1000 + 0.5)
			to = max(1, l-ran)
		}
		hold(r.Task, r.Machine, 0, to)
	}
	// boundaries are c and every hold boundary inside [c, e): usage is
	// constant between them, so looking there looks at every instant.
	boundaries := func(c, e int64) []int64 {
		xs := []int64{c}
		for _, h := range holds {
			for _, x := range []int64{h.from, h.to} {
				if x > c && x < e {
					xs = append(xs, x)
				}
			}
		}
		return xs
	}
	// room: at every instant of [c, c+length) the machine's holds plus t
	// fit its capacity.
	room := func(t Task, m int, c int64) bool {
		capa := s.Machines[m].Capacity.Capacity()
		for _, x := range boundaries(c, end(c, limit(t, m))) {
			var used Resources
			for _, h := range holds {
				if h.m == m && h.from <= x && x < h.to {
					used = used.plus(h.req)
				}
			}
			if !Fits(t.Request.Request(), capa.minus(used), capa) {
				return false
			}
		}
		return true
	}
	// power: with parts[r] on ms[r] from c, each for its length, the
	// organisation's holds plus their draws stay within its limit.
	power := func(parts []Task, ms []int, c int64) bool {
		org := parts[0].Org
		last := c
		for r, m := range ms {
			last = max(last, end(c, limit(parts[r], m)))
		}
		for _, x := range boundaries(c, last) {
			var pi int64
			for _, h := range holds {
				if h.org == org && h.from <= x && x < h.to {
					pi += h.draw
				}
			}
			for r, m := range ms {
				if x < end(c, limit(parts[r], m)) {
					pi += draw(parts[r], m)
				}
			}
			if pi > s.Orgs[org].LimitMilliW {
				return false
			}
		}
		return true
	}
	machines := make([]int, len(s.Machines))
	for i := range machines {
		machines[i] = i
	}
	sort.SliceStable(machines, func(i, j int) bool { return energyBetter(s.Machines[machines[i]], s.Machines[machines[j]]) })
	// The items: every task, and every gang standing as its first part.
	type item struct {
		parts []Task
		id    string
	}
	var queue []item
	for _, t := range s.Queued {
		queue = append(queue, item{[]Task{t}, t.ID})
	}
	for _, g := range s.Gangs {
		queue = append(queue, item{g.Parts, g.ID})
	}
	sort.Slice(queue, func(i, j int) bool {
		if queue[i].parts[0].Seq != queue[j].parts[0].Seq {
			return queue[i].parts[0].Seq < queue[j].parts[0].Seq
		}
		return queue[i].parts[0].ID < queue[j].parts[0].ID
	})
	var started []Running
	// pick takes the next item: the first in submission order, or under
	// ehosep-easy the organisation with the least DP (allocation summed
	// afresh over the running and started tasks) and its first item in
	// EHOSEP's order, found by a scan.
	pick := func() (item, bool) {
		if len(queue) == 0 {
			return item{}, false
		}
		k := 0
		if mode == EHOSEPEasy {
			tot := ComputeTotals(s)
			alloc := make([]int64, len(s.Orgs))
			for _, r := range append(slices.Clone(s.Running), started...) {
				alloc[r.Task.Org] += ShareOf(s.Machines[r.Machine].Capacity, r.Task.Request).Of(s.Machines[r.Machine].MFLOPS)
			}
			for i := range queue {
				a, b := queue[i].parts[0], queue[k].parts[0]
				if a.Org != b.Org {
					if orgBefore(DP(alloc[a.Org], tot.QuotaMFLOPS[a.Org]), DP(alloc[b.Org], tot.QuotaMFLOPS[b.Org]),
						tot.QuotaMFLOPS[a.Org], tot.QuotaMFLOPS[b.Org], tot.PowerQuotaMilliW[a.Org], tot.PowerQuotaMilliW[b.Org],
						s.Orgs[a.Org].Name, s.Orgs[b.Org].Name) {
						k = i
					}
				} else if taskBefore(&a, &b, false) {
					k = i
				}
			}
		}
		it := queue[k]
		queue = slices.Delete(queue, k, k+1)
		return it, true
	}
	// elig: the machines every part may use.
	eligOf := func(it item) []bool {
		e := Eligible(s.Machines, it.parts[0], s.Orgs)
		for _, p := range it.parts[1:] {
			pe := Eligible(s.Machines, p, s.Orgs)
			for m := range e {
				e[m] = e[m] && pe[m]
			}
		}
		return e
	}
	// leastDraws is owner o's k machines of least draw (ties by index)
	// among those of index ≤ upTo that ok accepts, in index order, or nil.
	leastDraws := func(t Task, k, o, upTo int, ok func(m int) bool) []int {
		var ms []int
		for m := 0; m <= upTo; m++ {
			if s.Machines[m].Owner == o && ok(m) {
				ms = append(ms, m)
			}
		}
		if len(ms) < k {
			return nil
		}
		sort.SliceStable(ms, func(i, j int) bool { return draw(t, ms[i]) < draw(t, ms[j]) })
		ms = ms[:k]
		sort.Ints(ms)
		return ms
	}
	ever := func(it item, elig []bool) bool {
		t := it.parts[0]
		for o := range s.Orgs {
			if ms := leastDraws(t, len(it.parts), o, len(s.Machines)-1, func(m int) bool { return elig[m] }); ms != nil {
				var d int64
				for _, m := range ms {
					d += draw(t, m)
				}
				if d <= s.Orgs[t.Org].LimitMilliW {
					return true
				}
			}
		}
		return false
	}
	// earliest is the item's first instant (now or a hold's end) and
	// machines: a task on the least-energy machine it fits on from the
	// earliest instant; a gang at the first instant some owner's k
	// least-draw machines up to some index fit and pass power, the owner
	// with the least such index.
	earliest := func(it item, elig []bool) ([]int, int64) {
		instants := []int64{0}
		for _, h := range holds {
			if h.to != Unbounded {
				instants = append(instants, h.to)
			}
		}
		slices.Sort(instants)
		t := it.parts[0]
		if len(it.parts) == 1 {
			bestM, bestAt := -1, Unbounded
			for _, m := range machines {
				if !elig[m] {
					continue
				}
				for _, c := range instants {
					if c == 0 && s.held(m) {
						continue
					}
					if c < bestAt && room(t, m, c) && power(it.parts, []int{m}, c) {
						bestM, bestAt = m, c
						break
					}
				}
			}
			if bestM < 0 {
				return nil, Unbounded
			}
			return []int{bestM}, bestAt
		}
		for _, c := range instants {
			bestP, var_ := len(s.Machines), []int(nil)
			for o := range s.Orgs {
				for p := range s.Machines {
					ms := leastDraws(t, len(it.parts), o, p, func(m int) bool {
						return elig[m] && !(c == 0 && s.held(m)) && room(t, m, c)
					})
					if ms != nil && power(it.parts, ms, c) {
						if p < bestP {
							bestP, var_ = p, ms
						}
						break
					}
				}
			}
			if var_ != nil {
				return var_, c
			}
		}
		return nil, Unbounded
	}
	place := func(it item, ms []int, at int64) {
		for r, m := range ms {
			hold(it.parts[r], m, at, end(at, limit(it.parts[r], m)))
		}
	}
	var out LivePlan
	reserve := func(it item, ms []int, at int64) {
		place(it, ms, at)
		for r, m := range ms {
			out.Reservations = append(out.Reservations, LiveReservation{Task: it.parts[r].ID, Org: it.parts[r].Org, Machine: m, AtMs: at})
		}
	}
	// ehosep-easy's head: the oldest item that cannot start now beside the
	// running tasks.
	headID, headUnbounded, headSeq, headTask := "", false, uint64(0), ""
	if mode == EHOSEPEasy {
		for _, it := range queue {
			elig := eligOf(it)
			if !ever(it, elig) {
				continue
			}
			ms, at := earliest(it, elig)
			if at == 0 {
				continue
			}
			headID, headSeq, headTask = it.id, it.parts[0].Seq, it.parts[0].ID
			if at == Unbounded {
				headUnbounded = true
			} else {
				reserve(it, ms, at)
			}
			break
		}
	}
	for {
		it, ok := pick()
		if !ok {
			break
		}
		t := it.parts[0]
		if it.id == headID || headUnbounded && (t.Seq > headSeq || t.Seq == headSeq && t.ID > headTask) {
			continue
		}
		elig := eligOf(it)
		if !ever(it, elig) {
			continue
		}
		ms, at := earliest(it, elig)
		switch {
		case at == 0:
			place(it, ms, 0)
			for r, m := range ms {
				started = append(started, Running{Task: it.parts[r], Machine: m})
				out.Starts = append(out.Starts, Decision{Kind: Allocate, Task: it.parts[r].ID, Org: t.Org, Machine: m})
			}
			continue
		case mode == EHOSEPEasy || mode == "easy" && len(out.Reservations) > 0:
			continue // behind the head: start now or wait
		case mode == "fcfs" || at == Unbounded:
		default:
			reserve(it, ms, at)
			continue
		}
		break
	}
	return out, nil
}

// randomLiveState is a small federation with shared machines, owner caps,
// power limits that bind, running tasks with and without limits, and a
// queue of tasks of several widths.
func randomLiveState(r *rand.Rand) *State {
	s := &State{}
	nOrg := 1 + r.IntN(3)
	for i := range nOrg {
		s.Orgs = append(s.Orgs, Org{Name: fmt.Sprintf("o%d", i), LimitMilliW: int64(50 + r.IntN(400))})
		if r.IntN(3) == 0 {
			s.Orgs[i].LimitMilliW = 1 << 40 // a limit that never binds
		}
	}
	nm := 1 + r.IntN(5)
	for i := range nm {
		m := Machine{ID: fmt.Sprintf("m%d", i), Owner: r.IntN(nOrg), MFLOPS: int64(100 + r.IntN(4)*100),
			BusyMilliW: int64(40 + r.IntN(5)*40)}
		if r.IntN(4) > 0 {
			m.Capacity = Resources{CPUs: int64(1 + r.IntN(8))}
		}
		if r.IntN(5) == 0 {
			m.Policy = &OwnerPolicy{AllowAny: true, MaxWallMs: int64(2000 + r.IntN(8)*1000)}
		}
		s.Machines = append(s.Machines, m)
	}
	limits := []int64{0, 1000, 2000, 3000, 5000, 8000, 13000}
	id := 0
	task := func() Task {
		id++
		t := Task{ID: fmt.Sprintf("t%03d", id), Org: r.IntN(nOrg), SizeMFlop: 1000, Seq: uint64(id),
			Request: Resources{CPUs: int64(1 + r.IntN(6))}, WallLimitMs: limits[r.IntN(len(limits))]}
		if r.IntN(6) == 0 {
			t.WallLimitMs = limits[1+r.IntN(len(limits)-1)]
		}
		return t
	}
	used := make([]int64, nm)
	for range r.IntN(6) {
		t := task()
		m := r.IntN(nm)
		capa := s.Machines[m].Capacity.Capacity().CPUs
		t.Request.CPUs = min(t.Request.CPUs, capa)
		if used[m]+t.Request.CPUs > capa || !(Mismatch(s.Machines[m], t, s.Orgs) == "") {
			continue
		}
		used[m] += t.Request.CPUs
		s.Running = append(s.Running, Running{Task: t, Machine: m, RunSeconds: float64(r.IntN(6000)) / 1000})
	}
	for range r.IntN(10) {
		s.Queued = append(s.Queued, task())
	}
	r.Shuffle(len(s.Queued), func(i, j int) { s.Queued[i], s.Queued[j] = s.Queued[j], s.Queued[i] })
	return s
}

// planAgreesWithReference plans the random state number i in mode with
// LiveBackfill and with the reference, fails the test unless the plans
// are equal, and returns LiveBackfill's.
func planAgreesWithReference(t *testing.T, i int, mode string, s *State) LivePlan {
	t.Helper()
	got, err := LiveBackfill{Mode: mode}.Plan(s)
	if err != nil {
		t.Fatalf("state %d %s: %v", i, mode, err)
	}
	want, err := referenceLiveBackfill(mode, s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("state %d %s:\n got %+v\nwant %+v\nstate %+v", i, mode, got, want, s)
	}
	return got
}

// planIgnoresOrder fails the test unless a copy of s whose slices shuffle
// reorders (what: which) plans got again.
func planIgnoresOrder(t *testing.T, i int, mode string, s *State, got LivePlan, what string, shuffle func(sh *State)) {
	t.Helper()
	sh := *s
	shuffle(&sh)
	if again, _ := (LiveBackfill{Mode: mode}).Plan(&sh); !reflect.DeepEqual(again, got) {
		t.Fatalf("state %d %s: shuffled %s planned %+v, want %+v", i, mode, what, again, got)
	}
}

// TestLiveBackfillAgreesWithReference: on random federations, the fast
// plan and the reference's agree decision for decision and reservation
// for reservation, in every mode, and shuffling the input slices changes
// nothing.
func TestLiveBackfillAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 6))
	reserved := 0
	for i := range 3000 {
		s := randomLiveState(r)
		for _, mode := range JobModes() {
			got := planAgreesWithReference(t, i, mode, s)
			reserved += len(got.Reservations)
			// The order of the input slices does not matter.
			planIgnoresOrder(t, i, mode, s, got, "queued and running", func(sh *State) {
				sh.Queued, sh.Running = slices.Clone(s.Queued), slices.Clone(s.Running)
				r.Shuffle(len(sh.Queued), func(i, j int) { sh.Queued[i], sh.Queued[j] = sh.Queued[j], sh.Queued[i] })
				r.Shuffle(len(sh.Running), func(i, j int) { sh.Running[i], sh.Running[j] = sh.Running[j], sh.Running[i] })
			})
		}
	}
	if reserved < 500 {
		t.Fatalf("only %d reservations over the random states: the test does not exercise them", reserved)
	}
}

// TestLiveBackfillGangsAgreeWithReference: with waiting gangs, the fast plan and the reference's agree in every mode, start
// for start and reservation for reservation; every plan applies (no
// machine over-committed, PI ≤ Lim), each gang starts or is reserved
// whole, on distinct machines of one owner, and shuffling the gangs
// changes nothing.
func TestLiveBackfillGangsAgreeWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 8))
	started, reserved := 0, 0
	for i := range 2000 {
		s := randomGangState(r)
		// Held machines are the iSPD engine's and GangFirst's (for its
		// base), never LiveBackfill's input on a live federation.
		s.Held = nil
		for _, mode := range JobModes() {
			got := planAgreesWithReference(t, i, mode, s)
			if _, err := ApplyDecisions(gangsQueued(s), got.Starts); err != nil {
				t.Fatalf("state %d %s: %v", i, mode, err)
			}
			checkGangsWhole(t, s, got.Starts)
			var asDecisions []Decision
			for _, rv := range got.Reservations {
				asDecisions = append(asDecisions, Decision{Task: rv.Task, Machine: rv.Machine})
			}
			checkGangsWhole(t, s, asDecisions)
			for _, g := range s.Gangs {
				for _, d := range got.Starts {
					if d.Task == g.Parts[0].ID {
						started++
					}
				}
				for _, rv := range got.Reservations {
					if rv.Task == g.Parts[0].ID {
						reserved++
					}
				}
			}
			planIgnoresOrder(t, i, mode, s, got, "gangs", func(sh *State) {
				sh.Gangs = slices.Clone(s.Gangs)
				r.Shuffle(len(sh.Gangs), func(i, j int) { sh.Gangs[i], sh.Gangs[j] = sh.Gangs[j], sh.Gangs[i] })
			})
		}
	}
	if started < 300 || reserved < 300 {
		t.Fatalf("%d gangs started, %d reserved: the generator exercises too little", started, reserved)
	}
}
