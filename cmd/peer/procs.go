package main

import (
	"log/slog"
	"os"
	"runtime"

	"github.com/coopgrid/coopgrid/node"
)

// followerProcs is the GOMAXPROCS of a `peer run` process while its peer
// does not lead: a non-voter, a voter following, and a joiner from the
// moment the process starts (it joins as a non-voter). A follower has
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
const followerProcs = 1

// followLeading lowers the process's GOMAXPROCS to followerProcs now and
// sets o to raise it to the runtime's default while the peer leads. The
// returned function puts back the GOMAXPROCS found on entry (the daemon
// has stopped; tests run daemons inside one process). When the operator
// set GOMAXPROCS in the environment, nothing changes and that value stays.
func followLeading(o *node.Options, log *slog.Logger) (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	before := runtime.GOMAXPROCS(followerProcs)
	o.OnLeading = func(leading bool) {
		if leading {
			runtime.SetDefaultGOMAXPROCS()
		} else {
			runtime.GOMAXPROCS(followerProcs)
		}
		log.Debug("GOMAXPROCS follows this peer's leadership", "leading", leading, "gomaxprocs", runtime.GOMAXPROCS(0))
	}
	return func() { runtime.GOMAXPROCS(before) }
}
