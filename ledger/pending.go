package ledger

import "github.com/coopgrid/coopgrid/policy"

// PendingReason is why a queued task waits (policy.PendingReason).
type PendingReason = policy.PendingReason

// Pending says why each queued task waits: policy.Pending on this state's
// policy view, as the federation's job policy reads them
// (policy.PendingUnder). It is computed from the replicated state by whoever asks,
// so every peer gives the same reason for the same applied index and the
// log carries nothing for it (docs/POLICY.md, "Pending reasons").
//
// A gang's waiting part (gang.go) has the reason next_pass when the next
// pass places its gang whole, else gang (saying when its gang is the head,
// holding machines or a reservation).
func (l *Ledger) Pending() map[string]PendingReason {
	for _, t := range l.bySeq {
		if t.State == TaskQueued {
			s, vm := l.PolicyView(0, 0) // reasons use no run times
			out := policy.PendingUnder(l.JobPolicy().Policy, policy.Pending(s))
			if out == nil {
				out = map[string]PendingReason{}
			}
			l.gangPending(out, s, vm)
			return out
		}
	}
	return nil
}
