package policy

import "fmt"

// AvailabilityEvent is one entry of a machine's replicated history: at
// AtMs (the ledger's clock: the committing entry's time) the machine came
// up (joined, restarted, returned from its owner) or went down (lost,
// reclaimed).
type AvailabilityEvent struct {
	AtMs int64
	Up   bool
}

// Stability is what a machine's history says about it.
type Stability struct {
	// UpMs and DownMs are the time spent up and down since it first came up.
	UpMs, DownMs int64
	// Failures counts the times it went from up to down.
	Failures int
	// MTBFMs is UpMs / Failures, rounded down; with no failure it is UpMs,
	// a lower bound that still ranks a machine seen up for a week above
	// one seen up for an hour.
	MTBFMs int64
}

// MTBF derives a machine's stability from its history (seed 004 §4.1.3,
// L959-963: the GRM keeps each machine's failure history and computes its
// MTBF for the mapping). events must be in time order and none after now.
// Events before the first up are ignored (the history starts when the
// machine joins); a repeated state (a second "down" while down) is ignored,
// so that a failure reported twice counts once. Being a pure function of
// the replicated history and the entry's time, it gives the same value on
// every peer.
func MTBF(events []AvailabilityEvent, nowMs int64) (Stability, error) {
	var st Stability
	up, started := false, false
	var since int64
	for i, e := range events {
		if e.AtMs < 0 || e.AtMs > nowMs {
			return Stability{}, fmt.Errorf("mtbf: event %d at %d ms outside [0, now=%d]", i, e.AtMs, nowMs)
		}
		if i > 0 && e.AtMs < events[i-1].AtMs {
			return Stability{}, fmt.Errorf("mtbf: event %d at %d ms before event %d at %d ms", i, e.AtMs, i-1, events[i-1].AtMs)
		}
		if !started {
			if e.Up {
				started, up, since = true, true, e.AtMs
			}
			continue
		}
		if e.Up == up {
			continue
		}
		st.add(up, e.AtMs-since)
		if up {
			st.Failures++
		}
		up, since = e.Up, e.AtMs
	}
	if started {
		st.add(up, nowMs-since)
	}
	st.MTBFMs = st.UpMs / max(1, int64(st.Failures))
	return st, nil
}

func (st *Stability) add(up bool, ms int64) {
	if up {
		st.UpMs += ms
	} else {
		st.DownMs += ms
	}
}
