package main

import (
	"log/slog"
	"os"
	"runtime"

	"github.com/coopgrid/coopgrid/node"
)

// nonVoterProcs is the GOMAXPROCS of a `peer run` process while its peer
// does not vote (a non-voter follower: most members of a large
// federation). Such a peer has little to do: it follows the log, sends its
// heartbeats and supervises its tasks, whose work runs in other
// processes. What it pays when idle is mostly the Go runtime's and the
// kernel's cost of each wake-up, and with one P a wake-up no longer starts
// a second thread spinning for work that is not there (issue 17: about a
// third fewer context switches and a sixth less CPU at 20 peers,
// docs/BENCHMARKS.md "Idle non-voters, session 10"). Once the peer votes
// (promoted, or a voter from the start), the runtime's default comes back
// (runtime.SetDefaultGOMAXPROCS): a voter answers the leader's heartbeats
// on time and may lead.
const nonVoterProcs = 1

// followVoting sets o to lower the process's GOMAXPROCS while the peer
// does not vote, unless the operator set GOMAXPROCS in the environment,
// which then stays as set.
func followVoting(o *node.Options, log *slog.Logger) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	o.OnVoting = func(voting bool) {
		if voting {
			runtime.SetDefaultGOMAXPROCS()
		} else {
			runtime.GOMAXPROCS(nonVoterProcs)
		}
		log.Debug("GOMAXPROCS follows this peer's vote", "voting", voting, "gomaxprocs", runtime.GOMAXPROCS(0))
	}
}
