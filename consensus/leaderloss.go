package consensus

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A dead leader's voters give it up together (issue 17: fail-over ≤ 1.5 s
// at the LAN preset). Raft notices a dead leader only by its follower
// timer, which fires every HeartbeatTimeout to 2×HeartbeatTimeout: a voter
// stands once a check finds the last contact a heartbeat timeout old, so
// the voters give the leader up at different moments, 0.4 to 1.2 s after
// its last heartbeat. A voter that still knows a leader refuses to
// pre-vote for another, so the first candidate is usually refused and
// waits an election timeout (0.4-0.8 s) before it stands again: fail-over
// took 0.9-1.6 s (docs/BENCHMARKS.md).
//
// When the leader's process ends, its connections close at once (the
// kernel closes its sockets), and every peer sees the leader disconnect.
// A voter whose leader disconnects first holds: it lengthens its Raft
// timeouts (hastenFactor heartbeat timeouts) so that Raft's own timer does
// not make it stand at a moment of its own. Then it waits a leader lease
// after the disconnection (and after its last contact with the leader)
// and, in an order all voters agree on, a step more (standDelay) and, if
// the leader is still
// disconnected and still the one it knows, shortens its heartbeat timeout
// to the lease (the least Raft accepts, LeaderLeaseTimeout ≤
// HeartbeatTimeout) until it knows a leader again, at most hastenFactor
// heartbeat timeouts: Raft's follower loop re-checks at once, finds the
// contact that old and stands. The first voters to stand (quorum-1 of
// them) are refused by those that still know the leader, and only forget
// it: they retry no sooner than two heartbeat timeouts later
// (forgetterElection), so as not to compete with the next voter, which
// stands a step later, finds a quorum that knows no leader and is
// elected. Without the hold, Raft's timer (a random check every one to two
// heartbeat timeouts) made voters stand at moments of their own, two
// candidates passed the pre-vote a few milliseconds apart, split the vote
// and waited random election timeouts, several rounds in a row on a
// loaded host: 4.5 s at 20 peers (docs/BENCHMARKS.md, "Voters and
// fail-over, session 10").
// A leader that is alive is not
// deposed by a dropped connection alone: its heartbeats redial, and a
// voter stands only when none arrived for a lease (instead of a heartbeat
// timeout), and only a quorum of such voters elects another leader; a
// voter whose leader reconnected drops its hold when its turn comes.
// A leader that hangs without closing its connections (a partition, a
// stopped process) is noticed by the timer alone, as before.

// hastenFactor: the shortened timeouts last until a leader is known
// again, at most hastenFactor heartbeat timeouts (1.6 s at the LAN
// preset), long enough for an election and a retry.
const hastenFactor = 4

// leaderLoss watches the connection to the leader (see above).
type leaderLoss struct {
	// lost receives the peers whose last connection closed, and when.
	lost     chan disconnect
	notifiee *network.NotifyBundle

	// mu serialises the reloads of Raft's timeouts (adjustTiming).
	mu sync.Mutex
	// until is when the shortened timeouts end (zero: none); forgetter
	// says that this voter stands only to forget the leader
	// (forgetterElection). held is when the lengthened timeouts of a
	// voter waiting for its turn end (zero: none).
	until     time.Time
	forgetter bool
	held      time.Time
	// times counts the hastenings (tests).
	times int
}

// disconnect is a peer whose last connection closed at at.
type disconnect struct {
	p  peer.ID
	at time.Time
}

func newLeaderLoss() *leaderLoss {
	l := &leaderLoss{lost: make(chan disconnect, 1)}
	l.notifiee = &network.NotifyBundle{DisconnectedF: func(nw network.Network, c network.Conn) {
		p := c.RemotePeer()
		if nw.Connectedness(p) == network.Connected {
			return // another connection to p remains
		}
		select {
		case l.lost <- disconnect{p, time.Now()}:
		default: // one already waits; a leader's loss is seen again at the next
		}
	}}
	return l
}

// leaderLossStep: the voters stand half a lease apart (200 ms at the LAN
// preset), in standOrder: more than a pre-vote and a vote request take on
// a loaded host (up to 190 ms at 20 peers at a load of 20-50), so the
// voter a step behind finds the one before it elected, or at least asking
// for votes in a term it cannot win any more, instead of splitting the
// vote with it.
const leaderLossStep = 2

// forgetterElection is the election timeout, in heartbeat timeouts, of the
// voters that stand first only to forget the lost leader: they retry after
// the one elected stood.
const forgetterElection = 2

// standDelay is how long after a lease from the disconnection voter self
// stands when leader lost disconnected, and whether it is one of the
// first, which stand only to forget the leader: the surviving voters,
// ordered by ID, stand so that exactly one of them is the first to find a
// quorum that knows no leader. A pre-vote passes only with a quorum of the
// configuration's voters, the candidate included, that knows no leader;
// so the first quorum-1 survivors stand at once (they are refused, by
// those that still know the leader, and wait), the next one a step later
// (it finds them and is elected), each further one a step after that (by
// then a leader normally reached it, and it does not stand). 0 for a peer
// not among the voters.
func standDelay(cfg raft.Configuration, self, lost raft.ServerID, step time.Duration) (delay time.Duration, forgetter bool) {
	var voters []raft.ServerID
	total := 0
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		total++
		if s.ID != lost {
			voters = append(voters, s.ID)
		}
	}
	slices.Sort(voters)
	rank := slices.Index(voters, self)
	first := total / 2 // the quorum, total/2+1, less the candidate
	if rank < 0 {
		return 0, false
	}
	if rank < first {
		return 0, true
	}
	return time.Duration(rank-first+1) * step, false
}

// hastenPoll is how often a hastened voter checks whether a leader is
// known again.
const hastenPoll = 20 * time.Millisecond

// watchLeaderLoss runs until the node stops: it hastens the election when
// the leader disconnects, and restores the timeouts as soon as this peer
// knows a leader again (a new leader is busy in its first moments: a
// voter that kept the short timeouts would give it up sooner than the
// preset says), or after hastenFactor heartbeat timeouts.
func (n *Node) watchLeaderLoss() {
	defer n.wg.Done()
	n.host.Network().Notify(n.loss.notifiee)
	defer n.host.Network().StopNotify(n.loss.notifiee)
	var (
		lost    peer.ID
		restore <-chan time.Time
		poll    *time.Ticker
		polls   <-chan time.Time
	)
	end := func() {
		poll.Stop()
		restore, poll, polls = nil, nil, nil
		n.loss.mu.Lock()
		n.loss.until, n.loss.held = time.Time{}, time.Time{}
		n.loss.mu.Unlock()
		n.adjustTiming()
	}
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-restore:
			end()
		case <-polls:
			if n.knowsLeaderBesides(lost) {
				end()
			}
		case d := <-n.loss.lost:
			p := d.p
			if poll != nil || !n.followsAsVoter(p) {
				continue
			}
			n.hold(time.Now())
			gone, forgetter := n.leaderGone(p, d.at)
			if !gone {
				n.unhold()
				continue
			}
			lost = p
			n.hasten(time.Now(), forgetter)
			restore = time.After(hastenFactor * n.cfg.HeartbeatTimeout)
			poll = time.NewTicker(hastenPoll)
			polls = poll.C
		}
	}
}

// knowsLeaderBesides says whether this peer knows a leader other than
// lost (itself included).
func (n *Node) knowsLeaderBesides(lost peer.ID) bool {
	_, id := n.raft.LeaderWithID()
	return id != "" && id != raft.ServerID(lost.String())
}

// leaderGone says whether p, which disconnected at at, is the leader of
// this voter and stays disconnected until a lease after at, and after
// this voter's last contact with it, and this voter's turn came (it waits
// until then); and whether this voter stands only to forget it
// (standDelay). The turns count from the disconnection, which every voter
// sees within milliseconds of the others (the kernel resets the dead
// process's connections at once), not from each one's last contact: those
// differ by up to a heartbeat interval and more on a loaded host, and a
// forgetter that stood 220 ms after another, after the voter whose turn
// came next, split the vote with it (session 10, 20 peers).
func (n *Node) leaderGone(p peer.ID, at time.Time) (gone, forgetter bool) {
	// In an order every voter computes alike (standOrder): voters that
	// stand at the same instant all pass the pre-vote and split the vote,
	// and the election waits for a timeout (seen at 20 peers: 0.7 s).
	delay, forgetter := standDelay(n.gate.configuration(), n.selfID, raft.ServerID(p.String()), n.cfg.LeaderLeaseTimeout/leaderLossStep)
	from := at
	if last := n.raft.LastContact(); last.After(from) {
		from = last
	}
	if wait := time.Until(from.Add(n.cfg.LeaderLeaseTimeout + delay)); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-n.ctx.Done():
			return false, false
		case <-t.C:
		}
	}
	return n.host.Network().Connectedness(p) != network.Connected && n.followsAsVoter(p), forgetter
}

// followsAsVoter says whether this peer is a voting follower of leader p.
func (n *Node) followsAsVoter(p peer.ID) bool {
	if n.raft.State() != raft.Follower {
		return false
	}
	if _, id := n.raft.LeaderWithID(); id != raft.ServerID(p.String()) {
		return false
	}
	return n.isVoter() // starve.go
}

// hold lengthens this voter's timeouts from now on, until hasten or
// unhold: its leader disconnected, and it waits for its turn to stand.
func (n *Node) hold(now time.Time) {
	n.loss.mu.Lock()
	n.loss.held = now.Add(hastenFactor * n.cfg.HeartbeatTimeout)
	n.loss.mu.Unlock()
	n.adjustTiming()
}

// unhold ends hold: the leader came back (or is no longer this voter's).
func (n *Node) unhold() {
	n.loss.mu.Lock()
	n.loss.held = time.Time{}
	n.loss.mu.Unlock()
	n.adjustTiming()
}

// hasten shortens this voter's timeouts from now on (see above).
func (n *Node) hasten(now time.Time, forgetter bool) {
	n.loss.mu.Lock()
	n.loss.until = now.Add(hastenFactor * n.cfg.HeartbeatTimeout)
	n.loss.held = time.Time{}
	n.loss.forgetter = forgetter
	n.loss.times++
	n.loss.mu.Unlock()
	n.log.Info("consensus: the leader disconnected; standing for election after a lease without contact",
		"lease", n.cfg.LeaderLeaseTimeout, "forgetter", forgetter)
	n.adjustTiming()
}

// lossTimeouts are the follower timeouts of a voter whose leader
// disconnected (ok false: none apply): held while it waits for its turn,
// hastened once its turn came, with a longer election timeout for a
// forgetter. n.loss.mu is held.
func (n *Node) lossTimeouts(now time.Time) (hb, el time.Duration, ok bool) {
	switch {
	case now.Before(n.loss.until) && n.loss.forgetter:
		return n.cfg.LeaderLeaseTimeout, max(n.cfg.LeaderLeaseTimeout, forgetterElection*n.cfg.HeartbeatTimeout), true
	case now.Before(n.loss.until):
		return n.cfg.LeaderLeaseTimeout, n.cfg.LeaderLeaseTimeout, true
	case now.Before(n.loss.held):
		d := hastenFactor * n.cfg.HeartbeatTimeout
		return d, max(d, n.cfg.ElectionTimeout), true
	}
	return 0, 0, false
}
