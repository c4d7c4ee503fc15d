package main

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/coopgrid/coopgrid/node"
)

// followerProcs is the GOMAXPROCS of a `peer run` process while its peer
// follows and is idle: a non-voter, or a voter that does not lead and
// whose process is not busy (busyShare). An idle follower has little to
// do: it answers the leader's heartbeats and appends, sends its own
// heartbeats and supervises its tasks, whose work runs in other
// processes. What it pays is mostly the Go runtime's and the kernel's cost
// of each wake-up, and with one P a wake-up no longer starts a second
// thread spinning for work that is not there (issue 17: docs/BENCHMARKS.md
// "Idle non-voters, session 10" and "Voters with one processor, session
// 11").
//
// The leader schedules, checks every proposal and replicates to every
// member: the moment this peer becomes leader it gets the runtime's
// default back (runtime.SetDefaultGOMAXPROCS), told by Raft itself
// (node.Options.OnLeading) before it replicates its first entry. A busy
// voter (a federation forming, a stream of tasks) keeps the default too:
// the leader's lease counts on its answers, which one P would queue
// behind its other work. A process starts with the default and takes one
// P at the consensus maintenance loop's first pass (node.Options.OnVoting,
// within a maintenance interval of the start), as non-voters did since
// session 10.
const followerProcs = 1

// busyShare is the share of a core above which a voter's process counts as
// busy and keeps the runtime's default; an idle voter uses well under 1 %.
// A busy process counts as idle again only below idleShare: a voter whose
// load hovers about busyShare would otherwise change its GOMAXPROCS (a
// stop of the world each time) at every reading.
const (
	busyShare = 0.05
	idleShare = busyShare / 2
)

// nextBusy says whether the process counts as busy after it used cpu over
// d, having counted as busy (wasBusy) until then.
func nextBusy(wasBusy bool, cpu, d time.Duration) bool {
	share := busyShare
	if wasBusy {
		share = idleShare
	}
	return float64(cpu) > share*float64(d)
}

// procsByRole sets the process's GOMAXPROCS from the peer's role.
type procsByRole struct {
	log *slog.Logger

	mu      sync.Mutex
	started bool // the maintenance loop has run once (OnVoting)
	voting  bool // as OnVoting last said
	leading bool // as OnLeading last said
	busy    bool // the process is busy (nextBusy) since the last look
	procs   int  // what GOMAXPROCS was last set to (0: not yet)
}

// followRole sets o so that the process's GOMAXPROCS follows the peer's
// role (above) and starts the goroutine that watches the process's CPU.
// stop ends it and puts back the GOMAXPROCS found on entry (the daemon has
// stopped; tests run daemons inside one process). When the operator set
// GOMAXPROCS in the environment, nothing changes and that value stays.
func followRole(o *node.Options, log *slog.Logger) (stop func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	before := runtime.GOMAXPROCS(0)
	r := &procsByRole{log: log}
	o.OnVoting = func(voting bool) { r.set(func() { r.started, r.voting = true, voting }) }
	o.OnLeading = func(leading bool) { r.set(func() { r.leading = leading }) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watchBusy(ctx)
	}()
	return func() {
		cancel()
		<-done
		runtime.GOMAXPROCS(before)
	}
}

// watchBusy reads the process's CPU time on the wall-clock grid where the
// peer's other idle chores wake too (node.UntilIdleGrid), so the reading
// shares their wake-up, and tells set whether the process is busy.
func (r *procsByRole) watchBusy(ctx context.Context) {
	last, at := processCPU(), time.Now()
	t := time.NewTimer(node.UntilIdleGrid(at))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cpu := processCPU()
			used, over := cpu-last, now.Sub(at)
			last, at = cpu, now
			r.set(func() { r.busy = nextBusy(r.busy, used, over) })
			t.Reset(node.UntilIdleGrid(time.Now()))
		}
	}
}

// processCPU is the CPU time this process used so far (0 if unknown: the
// process then never counts as busy).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// want is the GOMAXPROCS for the role: 0 for the runtime's default.
func (r *procsByRole) want() int {
	if r.leading || !r.started || (r.voting && r.busy) {
		return 0
	}
	return followerProcs
}

// set applies change to the role and, when that changes what the process
// should run with, the role to GOMAXPROCS.
func (r *procsByRole) set(change func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	change()
	want := r.want()
	if want == 0 {
		want = -1 // the default, whatever its value
	}
	if want == r.procs {
		return
	}
	r.procs = want
	if want < 0 {
		runtime.SetDefaultGOMAXPROCS()
	} else {
		runtime.GOMAXPROCS(want)
	}
	r.log.Debug("GOMAXPROCS follows this peer's role", "leading", r.leading, "voting", r.voting, "busy", r.busy, "gomaxprocs", runtime.GOMAXPROCS(0))
}
