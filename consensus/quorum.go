package consensus

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A write waits for a leader at most Config.LeaderWaitTimeout. When this
// node has known no leader for that long (many election timeouts: a
// majority that reaches itself elects a leader within a few), it takes the
// federation's quorum to be lost, as far as it can tell, and answers
// CodeNoQuorum at once instead of waiting again: the caller learns why
// within the bound instead of after every retry's wait.

// leaderlessSince tracks when this node last knew a leader, besides raft's
// LastContact (which a follower updates on every AppendEntries but a leader
// stepping down leaves at its last time as follower).
type leaderlessSince struct {
	started time.Time
	ledLast atomic.Int64 // unix ns when this node last stopped leading; 0 never
}

func newLeaderlessSince(now time.Time) *leaderlessSince { return &leaderlessSince{started: now} }

// leadEnded records that this node stopped leading at t.
func (s *leaderlessSince) leadEnded(t time.Time) { s.ledLast.Store(t.UnixNano()) }

// since is the last time this node knew a leader (itself or another), or
// its start.
func (s *leaderlessSince) since(lastContact time.Time) time.Time {
	t := s.started
	if lastContact.After(t) {
		t = lastContact
	}
	if ns := s.ledLast.Load(); ns != 0 {
		if led := time.Unix(0, ns); led.After(t) {
			t = led
		}
	}
	return t
}

// noLeaderFor is how long this node has known no leader (0 while it knows
// one).
func (n *Node) noLeaderFor() time.Duration {
	if _, ok := n.Leader(); ok {
		return 0
	}
	return time.Since(n.leaderless.since(n.raft.LastContact()))
}

// quorumLost says this node has known no leader for LeaderWaitTimeout.
func (n *Node) quorumLost() bool { return n.noLeaderFor() >= n.cfg.LeaderWaitTimeout }

// noQuorumError is CodeNoQuorum, with what this node sees of the voters.
func (n *Node) noQuorumError() error {
	if n.outState.out.Load() {
		return errorf(CodeNoQuorum, "no leader for %s: this peer is no longer a member of the federation (the leader took it out: silent for longer than remove_dead_after, or removed by a vote); to come back, delete its raft directory and start it with --bootstrap and an invitation naming it",
			n.noLeaderFor().Round(time.Millisecond))
	}
	up, voters := n.reachableVoters()
	if voters == 0 {
		return errorf(CodeNoQuorum, "no leader for %s", n.noLeaderFor().Round(time.Millisecond))
	}
	return errorf(CodeNoQuorum, "no leader for %s: this peer reaches %d of the %d voters and a leader needs %d",
		n.noLeaderFor().Round(time.Millisecond), up, voters, voters/2+1)
}

// reachableVoters counts the voters of the configuration this node knows
// that it is connected to, itself included.
func (n *Node) reachableVoters() (up, voters int) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, 0
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		id, err := peer.Decode(string(s.ID))
		switch {
		case err != nil:
		case id == n.self || n.host.Network().Connectedness(id) == network.Connected:
			up++
		}
	}
	return up, voters
}
