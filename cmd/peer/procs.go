package main

import (
	"log/slog"
	"os"
	"runtime"
	"sync"

	"github.com/coopgrid/coopgrid/node"
)

// followerProcs is the GOMAXPROCS of a `peer run` process while its peer
// follows: a non-voter or a voter that does not lead. A follower has
// little to do when idle: it answers the leader's heartbeats and appends,
// sends its own heartbeats and supervises its tasks, whose work runs in
// other processes. What it pays is mostly the Go runtime's and the
// kernel's cost of each wake-up, and with one P a wake-up no longer starts
// a second thread spinning for work that is not there (issue 17:
// docs/BENCHMARKS.md "Idle non-voters, session 10" and "Voters with one
// processor, session 11"). The leader schedules, checks every proposal
// and replicates to every member: the moment this peer becomes leader it
// gets the runtime's default back (runtime.SetDefaultGOMAXPROCS), told by
// Raft itself (node.Options.OnLeading) before it replicates its first
// entry, and goes back to one P when it stops leading.
//
// A process starts with the runtime's default and takes one P at the
// consensus maintenance loop's first pass (node.Options.OnVoting, within
// a maintenance interval of the start) if it does not lead by then:
// processes given one P from their first instant idled at a third more
// CPU afterwards in every measurement, voters and non-voters alike
// (docs/BENCHMARKS.md, session 11).
const followerProcs = 1

// procsByRole sets the process's GOMAXPROCS from the peer's role.
type procsByRole struct {
	log *slog.Logger

	mu      sync.Mutex
	started bool // the maintenance loop has run once (OnVoting)
	leading bool // as OnLeading last said
}

// followLeading sets o so that the process runs with followerProcs while
// its peer follows and with the runtime's default while it leads or has
// not started (above). The returned function puts back the GOMAXPROCS found
// on entry (the daemon has stopped; tests run daemons inside one process).
// When the operator set GOMAXPROCS in the environment, nothing changes and
// that value stays.
func followLeading(o *node.Options, log *slog.Logger) (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	before := runtime.GOMAXPROCS(0)
	r := &procsByRole{log: log}
	o.OnVoting = func(bool) { r.set(func() { r.started = true }) }
	o.OnLeading = func(leading bool) { r.set(func() { r.leading = leading }) }
	return func() { runtime.GOMAXPROCS(before) }
}

// set applies change to the role and the role to GOMAXPROCS.
func (r *procsByRole) set(change func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	change()
	if r.leading || !r.started {
		runtime.SetDefaultGOMAXPROCS()
	} else {
		runtime.GOMAXPROCS(followerProcs)
	}
	r.log.Debug("GOMAXPROCS follows this peer's role", "leading", r.leading, "gomaxprocs", runtime.GOMAXPROCS(0))
}
