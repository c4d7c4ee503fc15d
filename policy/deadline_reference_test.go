package policy

import (
	"math/big"
	"sort"
)

// referenceMapDeadline transcribes figures 4.1 and 4.2 of seed 004
// (L975-1050) line by line: lrmList is the machine list sorted most stable
// first (MTBF descending, then ID; L1147), freeLRMs its free machines in
// that order, and each search scans lrmList from the start. The predictor
// is computed with big integers and exact rationals so that it shares no
// arithmetic with MapDeadline. Slow and obviously correct: MapDeadline must
// agree with it decision for decision.
func referenceMapDeadline(in DeadlineInput) (Mapping, error) {
	if err := validateDeadline(in); err != nil {
		return Mapping{}, err
	}
	task := in.Task
	var lrmList []int
	for j := range in.Machines {
		if in.May == nil || in.May[j] {
			lrmList = append(lrmList, j)
		}
	}
	sort.Slice(lrmList, func(a, b int) bool {
		x, y := in.Machines[lrmList[a]], in.Machines[lrmList[b]]
		if x.MTBFMs != y.MTBFMs {
			return x.MTBFMs > y.MTBFMs
		}
		return x.ID < y.ID
	})
	var freeLRMs []int
	for _, j := range lrmList {
		if in.Machines[j].Running == 0 {
			freeLRMs = append(freeLRMs, j)
		}
	}
	// finish is now + ceil(ceil(work·1000/mflops)·110/100), the run time
	// rounded up to the millisecond, then the margin rounded up.
	finish := func(work, mflops int64) int64 {
		run := new(big.Rat).SetFrac(big.NewInt(0).Mul(big.NewInt(work), big.NewInt(1000)), big.NewInt(mflops))
		runMs := ratCeil(run)
		withMargin := ratCeil(new(big.Rat).SetFrac(big.NewInt(0).Mul(big.NewInt(runMs), big.NewInt(110)), big.NewInt(100)))
		return in.NowMs + withMargin
	}
	canAchieveDeadline := func(j int) (bool, int64) {
		f := finish(task.SizeMFlop, in.Machines[j].MFLOPS)
		return f <= task.DeadlineMs, f
	}
	searchNiceLRM := func() (Mapping, bool) {
		for _, j := range lrmList {
			if in.Machines[j].Running == Nice && !in.Machines[j].Protected {
				if ok, f := canAchieveDeadline(j); ok {
					return Mapping{Outcome: MapPreemptNice, Machine: j, Victim: in.Machines[j].RunningID, FinishMs: f}, true
				}
			}
		}
		return Mapping{}, false
	}
	reserveSoftLRM := func() (Mapping, bool) {
		for _, j := range lrmList {
			m := in.Machines[j]
			if m.Running == SoftDeadline && !m.Reserved {
				if f := finish(m.RemainingMFlop+task.SizeMFlop, m.MFLOPS); f <= task.DeadlineMs {
					return Mapping{Outcome: MapReserveSoft, Machine: j, FinishMs: f}, true
				}
			}
		}
		return Mapping{}, false
	}
	refused := Mapping{Outcome: MapRefused, Machine: -1}
	switch task.Class {
	case SoftDeadline: // figure 4.1
		if len(freeLRMs) == 0 {
			if m, ok := searchNiceLRM(); ok {
				return m, nil
			}
			if m, ok := reserveSoftLRM(); ok {
				return m, nil
			}
			return refused, nil
		}
		for i := 0; i < len(freeLRMs); i++ {
			lrm := freeLRMs[i]
			if ok, f := canAchieveDeadline(lrm); ok {
				return Mapping{Outcome: MapRun, Machine: lrm, FinishMs: f}, nil
			}
			if i == len(freeLRMs)-1 {
				if m, ok := searchNiceLRM(); ok {
					return m, nil
				}
				if m, ok := reserveSoftLRM(); ok {
					return m, nil
				}
				return refused, nil
			}
		}
	case Nice: // figure 4.2
		if len(freeLRMs) > 0 {
			return Mapping{Outcome: MapRun, Machine: freeLRMs[len(freeLRMs)-1]}, nil
		}
		for _, j := range lrmList { // reserveNiceLRM: the first
			if in.Machines[j].Running == Nice && !in.Machines[j].Reserved {
				return Mapping{Outcome: MapReserveNice, Machine: j}, nil
			}
		}
		if len(lrmList) == 0 {
			return refused, nil
		}
		byID := append([]int(nil), lrmList...)
		sort.Slice(byID, func(a, b int) bool { return in.Machines[byID[a]].ID < in.Machines[byID[b]].ID })
		return Mapping{Outcome: MapQueueRandom, Machine: byID[in.Draw%uint64(len(byID))]}, nil
	}
	return refused, nil
}

func ratCeil(r *big.Rat) int64 {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// referenceMTBF recomputes MTBF by walking the history one millisecond
// tick at a time (only for small times): every millisecond after the
// first up event while the machine is up counts as up time; a failure is
// a tick where it goes from up to down.
func referenceMTBF(events []AvailabilityEvent, nowMs int64) Stability {
	var st Stability
	if len(events) == 0 {
		return st
	}
	state, started, k := false, false, 0
	for t := events[0].AtMs; t < nowMs; t++ {
		for k < len(events) && events[k].AtMs == t {
			if events[k].Up {
				started = true
			} else if started && state {
				st.Failures++
			}
			if started {
				state = events[k].Up
			}
			k++
		}
		if state {
			st.UpMs++
		} else if started {
			st.DownMs++
		}
	}
	for ; k < len(events); k++ { // events at now: count the failure, no time
		if events[k].Up {
			started = true
		} else if started && state {
			st.Failures++
		}
		if started {
			state = events[k].Up
		}
	}
	st.MTBFMs = st.UpMs / max(1, int64(st.Failures))
	return st
}
