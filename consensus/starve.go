package consensus

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
)

// Voters on a starved host (issue 17). The `lan` preset's timeouts assume
// that a voter's goroutines run within a few milliseconds of when they are
// due. On a host whose CPUs are oversubscribed (a hundred peers forming on
// two cores, load 100+), every hop of a heartbeat or a vote waits in a run
// queue: a follower starts an election against a live leader, a candidate's
// votes come back after its election timeout, the host spends its CPU on
// elections, and the federation went minutes without a leader
// (docs/BENCHMARKS.md, "100 peers").
//
// So each voter reads, every starveTick, how starved of CPU its host is:
// the kernel's pressure stall information (/proc/pressure/cpu, "some
// avg10": the share of the last 10 s in which some runnable task waited
// for a CPU), or where that is missing the 1-minute load average per CPU.
// At starvePressure (or starveLoad) and for starveCalm after, a follower
// voter waits starveStretch times the preset's heartbeat and election
// timeouts before it starts an election; on a host that keeps up nothing
// changes, so fail-over keeps the preset's timing. A leader keeps the
// preset's timeouts (its heartbeat interval derives from them, and its
// followers, on other hosts, may not be stretched); only when it is a
// follower again does the stretch apply to it. (A process's own timer
// lateness is no such signal: at a load of 140 on two cores a sleeping
// Go process still woke within 35 ms, while Raft's round trips through
// busy peers took more than the 400 ms timeout.)

// The reading's period is on the wall-clock grid of the peer's other
// chores (p2p.UntilGrid, p2p.IdleGrid): an idle process pays more per
// wake-up than per piece of work (the Go runtime's sysmon and the kernel
// wake it for every burst, issue 17), and a tick of its own was about one
// of an idle voter's twelve bursts a second
// (docs/BENCHMARKS.md, "Idle voters' other wake-ups, session 12"). Every
// 2 s rather than every second loses nothing that matters: the figure
// read is itself an average over 10 s, and a starved reading holds the
// stretch for starveCalm (five readings) after it. A non-voter (which
// reads nothing) ticks on the same grid: its tick then costs no wake-up
// of its own, and a promoted voter reads within one step.
const (
	starveTick     = p2p.IdleGrid
	starveCalm     = 10 * time.Second
	starveStretch  = 2    // 4 split every vote for 30 s after a kill at 40 peers (docs/BENCHMARKS.md)
	starvePressure = 95.0 // % of the last 10 s with a task waiting for a CPU
	starveLoad     = 4.0  // runnable tasks per CPU, without pressure stall information
)

// Pressure tells whether the host is starved of CPU right now. New reads
// the host's (HostPressure) unless WithPressure gives another reading
// (tests whose timings must not depend on the load of the machine running
// them).
type Pressure interface {
	Starved() bool
}

// HostPressure reads /proc/pressure/cpu (some avg10 ≥ starvePressure) or,
// where the kernel has no pressure stall information, the 1-minute load
// average per CPU (≥ starveLoad).
type HostPressure struct{}

// Starved implements Pressure.
func (HostPressure) Starved() bool { return hostStarved() }

// Option changes how New builds a Node beyond its Config: the
// dependencies it would otherwise take from the host.
type Option func(*Node)

// WithPressure makes the node read p instead of the host's CPU pressure.
func WithPressure(p Pressure) Option {
	return func(n *Node) { n.pressure = p }
}

// starvation records when this process last found its host starved.
type starvation struct {
	mu        sync.Mutex
	lastStarv time.Time
}

// observe records whether the host was starved at now; it says whether
// the starved state changed.
func (s *starvation) observe(starved bool, now time.Time) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.within(now)
	if starved {
		s.lastStarv = now
	}
	return was != s.within(now)
}

// starved says whether the host was found starved within starveCalm of now.
func (s *starvation) starved(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.within(now)
}

// within is starved with s.mu held.
func (s *starvation) within(now time.Time) bool {
	return !s.lastStarv.IsZero() && now.Sub(s.lastStarv) < starveCalm
}

// stretch returns the follower timeouts to use: the preset's, times
// starveStretch while this process is starved and they are the preset's
// voter timeouts (a non-voter's are long already).
func (s *starvation) stretch(cfg Config, heartbeat, election time.Duration, now time.Time) (time.Duration, time.Duration) {
	if heartbeat != cfg.HeartbeatTimeout || !s.starved(now) {
		return heartbeat, election
	}
	return starveStretch * heartbeat, starveStretch * election
}

// watchStarvation ticks while the node runs and kicks maintain (which
// reloads Raft's timeouts, adjustTiming) when the starved state changes.
func (n *Node) watchStarvation() {
	defer n.wg.Done()
	t := time.NewTimer(starveWait(time.Now()))
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			if n.isVoter() && n.starve.observe(n.pressure.Starved(), now) {
				n.log.Info("consensus: host starved of CPU: election timeouts stretched while it lasts", "starved", n.starve.starved(now))
				n.kick()
			}
			t.Reset(starveWait(time.Now()))
		}
	}
}

// starveWait is how long from now until the next reading: the next point
// of the starveTick grid on the wall clock (p2p.UntilGrid), where the
// maintenance loop, the runner's reconciliation and gossipsub's heartbeat
// wake the process anyway.
func starveWait(now time.Time) time.Duration { return p2p.UntilGrid(now, starveTick) }

// hostStarved reads the host's CPU pressure (or, without it, the load
// average per CPU).
func hostStarved() bool {
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		if p, ok := pressureSome10(string(b)); ok {
			return p >= starvePressure
		}
	}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false
	}
	load, err := strconv.ParseFloat(f[0], 64)
	return err == nil && load/float64(runtime.NumCPU()) >= starveLoad
}

// pressureSome10 parses the "some avg10=" figure of /proc/pressure/cpu.
func pressureSome10(s string) (float64, bool) {
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "avg10="); ok {
				p, err := strconv.ParseFloat(v, 64)
				return p, err == nil
			}
		}
	}
	return 0, false
}

// isVoter says whether this node votes in the configuration it knows.
func (n *Node) isVoter() bool {
	return n.gate.votes(n.gate.configuration(), n.self)
}
