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
	// fits: at every instant x in [c, e) the machine's holds plus t fit
	// its capacity and the organisation's holds plus t's draw fit its
	// limit. Usage is constant between hold boundaries, so looking at c
	// and at every boundary inside the window looks at every instant.
	fits := func(t Task, m int, c int64) bool {
		e := end(c, limit(t, m))
		xs := []int64{c}
		for _, h := range holds {
			for _, x := range []int64{h.from, h.to} {
				if x > c && x < e {
					xs = append(xs, x)
				}
			}
		}
		capa := s.Machines[m].Capacity.Capacity()
		for _, x := range xs {
			var used Resources
			pi := draw(t, m)
			for _, h := range holds {
				if h.from <= x && x < h.to {
					if h.m == m {
						used = used.plus(h.req)
					}
					if h.org == t.Org {
						pi += h.draw
					}
				}
			}
			if !Fits(t.Request.Request(), capa.minus(used), capa) || pi > s.Orgs[t.Org].LimitMilliW {
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
	queue := slices.Clone(s.Queued)
	sort.Slice(queue, func(i, j int) bool {
		if queue[i].Seq != queue[j].Seq {
			return queue[i].Seq < queue[j].Seq
		}
		return queue[i].ID < queue[j].ID
	})
	type placed struct {
		t Task
		m int
	}
	var started []placed
	// pick takes the next task: the first in submission order, or under
	// ehosep-easy the organisation with the least DP (allocation summed
	// afresh over the running and started tasks) and its first task in
	// EHOSEP's order, found by a scan.
	pick := func() (Task, bool) {
		if len(queue) == 0 {
			return Task{}, false
		}
		k := 0
		if mode == EHOSEPEasy {
			tot := ComputeTotals(s)
			alloc := make([]int64, len(s.Orgs))
			for _, r := range s.Running {
				alloc[r.Task.Org] += ShareOf(s.Machines[r.Machine].Capacity, r.Task.Request).Of(s.Machines[r.Machine].MFLOPS)
			}
			for _, p := range started {
				alloc[p.t.Org] += ShareOf(s.Machines[p.m].Capacity, p.t.Request).Of(s.Machines[p.m].MFLOPS)
			}
			for i := range queue {
				a, b := queue[i], queue[k]
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
		t := queue[k]
		queue = slices.Delete(queue, k, k+1)
		return t, true
	}
	var out LivePlan
	for {
		t, ok := pick()
		if !ok {
			break
		}
		elig := Eligible(s.Machines, t, s.Orgs)
		ever := false
		for m := range s.Machines {
			ever = ever || elig[m] && draw(t, m) <= s.Orgs[t.Org].LimitMilliW
		}
		if !ever {
			continue
		}
		instants := []int64{0}
		for _, h := range holds {
			if h.to != Unbounded {
				instants = append(instants, h.to)
			}
		}
		slices.Sort(instants)
		bestM, bestAt := -1, Unbounded
		for _, m := range machines {
			if !elig[m] {
				continue
			}
			for _, c := range instants {
				if c == 0 && s.held(m) {
					continue
				}
				if c < bestAt && fits(t, m, c) {
					bestM, bestAt = m, c
					break
				}
			}
		}
		switch {
		case bestAt == 0:
			hold(t, bestM, 0, end(0, limit(t, bestM)))
			started = append(started, placed{t, bestM})
			out.Starts = append(out.Starts, Decision{Kind: Allocate, Task: t.ID, Org: t.Org, Machine: bestM})
			continue
		case (mode == "easy" || mode == EHOSEPEasy) && len(out.Reservations) > 0:
			continue // behind the head: start now or wait
		case mode == "fcfs" || bestAt == Unbounded:
		default:
			hold(t, bestM, bestAt, end(bestAt, limit(t, bestM)))
			out.Reservations = append(out.Reservations, LiveReservation{Task: t.ID, Org: t.Org, Machine: bestM, AtMs: bestAt})
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

// TestLiveBackfillAgreesWithReference: on random federations, the fast
// plan and the reference's agree decision for decision and reservation
// for reservation, in every mode, and shuffling the input slices changes
// nothing.
func TestLiveBackfillAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 6))
	reserved := 0
	for i := range 3000 {
		s := randomLiveState(r)
		for _, mode := range append(LiveModes(), EHOSEPEasy) {
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
			reserved += len(got.Reservations)
			// The order of the input slices does not matter.
			sh := *s
			sh.Queued, sh.Running = slices.Clone(s.Queued), slices.Clone(s.Running)
			r.Shuffle(len(sh.Queued), func(i, j int) { sh.Queued[i], sh.Queued[j] = sh.Queued[j], sh.Queued[i] })
			r.Shuffle(len(sh.Running), func(i, j int) { sh.Running[i], sh.Running[j] = sh.Running[j], sh.Running[i] })
			if again, _ := (LiveBackfill{Mode: mode}).Plan(&sh); !reflect.DeepEqual(again, got) {
				t.Fatalf("state %d %s: shuffled input planned %+v, want %+v", i, mode, again, got)
			}
		}
	}
	if reserved < 500 {
		t.Fatalf("only %d reservations over the random states: the test does not exercise them", reserved)
	}
}
