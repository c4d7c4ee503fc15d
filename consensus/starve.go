package consensus

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Voters on a starved host (issue 17). The `lan` preset's timeouts assume
// a voter's goroutines run within a few milliseconds of when they are due.
// On a host whose CPUs are oversubscribed (a hundred peers forming on two
// cores, load 100+), a follower's heartbeat timer fires while the leader's
// heartbeat waits in a run queue: it starts an election against a live
// leader, the host spends its CPU on elections, and the federation went
// minutes without a leader (docs/BENCHMARKS.md, "100 peers").
//
// So each voter measures how late its own timers fire: a tick every
// starveTick, and a tick later than a quarter of the heartbeat timeout
// means this process is starved. While it has been starved within the
// last starveCalm, a follower voter waits starveStretch times the
// preset's heartbeat and election timeouts before it starts an election;
// on a host that keeps up nothing changes, so fail-over keeps the
// preset's timing. A leader keeps the preset's timeouts (its heartbeat
// interval derives from them, and its followers, on other hosts, may not
// be stretched); only when it is a follower again does the stretch apply
// to it.

const (
	starveTick    = 200 * time.Millisecond
	starveIdle    = 2 * time.Second // the tick while this peer is no voter
	starveCalm    = 10 * time.Second
	starveStretch = 4
)

// starvation records when this process last saw one of its timers late.
type starvation struct {
	mu       sync.Mutex
	lastLate time.Time
}

// observe records a tick due at due that ran at now, late when more than
// threshold after due; it says whether the starved state changed.
func (s *starvation) observe(due, now time.Time, threshold time.Duration) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := !s.lastLate.IsZero() && now.Sub(s.lastLate) < starveCalm
	if now.Sub(due) > threshold {
		s.lastLate = now
	}
	is := !s.lastLate.IsZero() && now.Sub(s.lastLate) < starveCalm
	return was != is
}

// starved says whether a late tick was seen within starveCalm of now.
func (s *starvation) starved(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.lastLate.IsZero() && now.Sub(s.lastLate) < starveCalm
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
	threshold := n.cfg.HeartbeatTimeout / 4
	tick := starveTick
	t := time.NewTimer(tick)
	defer t.Stop()
	due := time.Now().Add(tick)
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			if tick == starveTick && n.starve.observe(due, now, threshold) {
				n.kick()
			}
			tick = starveIdle
			if n.isVoter() {
				tick = starveTick
			}
			due = time.Now().Add(tick)
			t.Reset(tick)
		}
	}
}

// isVoter says whether this node votes in the configuration it knows.
func (n *Node) isVoter() bool {
	for _, s := range n.gate.configuration().Servers {
		if string(s.ID) == n.self.String() {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}
