package p2p

import "time"

// IdleGrid is the step of the wall-clock grid on which a peer's periodic
// upkeep ends its waits (UntilGrid): the consensus maintenance, the
// runner's reconciliation and gossipsub's heartbeat, all every 2 s by
// default, run at the same instant instead of at three unrelated ones.
// An idle peer pays more per wake-up than per piece of work (the Go
// runtime's and the kernel's cost of waking a process, issue 17), so one
// wake-up for three chores is what an idle non-voter saves
// (docs/BENCHMARKS.md, "Idle non-voters, session 10").
const IdleGrid = 2 * time.Second

// UntilGrid is how long from now until the next multiple of every on the
// wall clock, at least every/2 (a wait never collapses to nothing when a
// timer fires a little early or the caller is a little late). Every
// process of the host shares the clock, so waits of equal period end
// together within one process and across the peers of one host. every ≤ 0
// returns 0.
func UntilGrid(now time.Time, every time.Duration) time.Duration {
	if every <= 0 {
		return 0
	}
	ns := now.UnixNano()
	at := ns - ns%int64(every) + int64(every)
	d := time.Duration(at - ns)
	if d < every/2 {
		d += every
	}
	return d
}
