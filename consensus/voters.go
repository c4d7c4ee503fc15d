package consensus

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/coopgrid/coopgrid/p2p"
)

// Voters are added only while the configuration stays safe, and dead
// voters are demoted so that the others keep a quorum:
//
//   - A joining peer becomes a voter only while fewer than MaxVoters voters
//     exist and every current voter is reachable: connected to the leader
//     and, as far as the leader's autopilot knows, answering its stats
//     requests. Otherwise it joins as a non-voter; promote makes it a voter
//     later, under the same rule.
//   - On the leader, hashicorp/raft-autopilot tracks every server's health
//     (stats fetched over ProtoStats: last contact with the leader, term,
//     last index) and applies its dead-server rule: a voter not heard of
//     for DeadServerTimeout is "failed", and failed voters are dealt with
//     while at most (voters−1)/2 of them at a time and never below three
//     voters (autopilot's MinQuorum). Where Consul removes them, this
//     federation demotes them to non-voters: they stay members (a peer down
//     for maintenance comes back without a new invitation) but no longer
//     count towards the quorum. Five voters with two dead become three, so
//     a third pausing leaves two of three: the federation goes on.

// ProtoStats serves a member's Raft stats to the leader's autopilot.
const ProtoStats = "/coopgrid/consensus/stats/1.0.0"

// minQuorum is the fewest voters autopilot demotes down to.
const minQuorum = 3

type serverStats struct {
	LastContactNs int64  `json:"last_contact_ns"`
	LastTerm      uint64 `json:"last_term"`
	LastIndex     uint64 `json:"last_index"`
}

// localStats reads this node's stats as autopilot wants them.
func (n *Node) localStats() serverStats {
	st := n.raft.Stats()
	var s serverStats
	s.LastTerm, _ = strconv.ParseUint(st["last_log_term"], 10, 64)
	s.LastIndex, _ = strconv.ParseUint(st["last_log_index"], 10, 64)
	switch lc := st["last_contact"]; lc {
	case "0", "":
	case "never":
		s.LastContactNs = -1
	default:
		if d, err := time.ParseDuration(lc); err == nil {
			s.LastContactNs = int64(d)
		}
	}
	if n.IsLeader() {
		s.LastContactNs = 0
	}
	return s
}

// handleStats answers the leader's autopilot; members only.
func (n *Node) handleStats(_ context.Context, remote peer.ID, _ []byte) ([]byte, error) {
	if ok, err := n.isMember(remote); err != nil {
		return nil, err
	} else if !ok {
		return nil, errorf(CodeNotMember, "peer %s is not a member", remote)
	}
	return json.Marshal(n.localStats())
}

// pilot is the application side of raft-autopilot (its
// ApplicationIntegration) and the promoter it runs with.
type pilot struct {
	n  *Node
	ap *autopilot.Autopilot
	// leadership is signalled on every change of this node's leadership
	// (watchLeadership), so that run need not poll it.
	leadership chan struct{}

	mu sync.Mutex
	// lastOK is when each server last answered a stats request; seen when
	// it was first seen in the configuration by this leader.
	lastOK map[raft.ServerID]time.Time
	seen   map[raft.ServerID]time.Time
	// Non-voters are asked a few per round (statsTargets): cursor is
	// where the next round starts, rounds how many rounds a full turn
	// takes, last each one's latest stats, handed to autopilot between
	// two asks.
	cursor int
	rounds int
	last   map[raft.ServerID]*autopilot.ServerStats
	// fed: a round on the grid (refreshStats) has ended since this node
	// became leader, so FetchServerStats hands out last rather than ask;
	// refreshing: a round is under way. leads counts the leaderships: a
	// round begun in an earlier one does not feed a later one.
	fed        bool
	refreshing atomic.Bool
	leads      uint64
}

// maxNonVoterStatsPerRound bounds the non-voters asked for their stats in
// one autopilot round (every MaintenanceInterval); voters are asked every
// round. Non-voters' stats only decide which one is promoted, so the
// leader's cost stays flat as they grow in number (issue 17).
const maxNonVoterStatsPerRound = 10

// statsTargets are the servers to ask this round: every voter, and up to
// maxNonVoterStatsPerRound non-voters from cursor on, in ID order,
// wrapping. It returns the next cursor and how many rounds a full turn of
// the non-voters takes.
func statsTargets(servers map[raft.ServerID]*autopilot.Server, cursor int) (ask []raft.ServerID, next, rounds int) {
	var nonVoters []raft.ServerID
	for sid, srv := range servers {
		if srv.NodeType == autopilot.NodeVoter {
			ask = append(ask, sid)
		} else {
			nonVoters = append(nonVoters, sid)
		}
	}
	if len(nonVoters) == 0 {
		return ask, 0, 1
	}
	slices.Sort(nonVoters)
	k := min(len(nonVoters), maxNonVoterStatsPerRound)
	for i := range k {
		ask = append(ask, nonVoters[(cursor+i)%len(nonVoters)])
	}
	rounds = (len(nonVoters) + maxNonVoterStatsPerRound - 1) / maxNonVoterStatsPerRound
	return ask, (cursor + k) % len(nonVoters), rounds
}

// startAutopilot registers the stats protocol and runs autopilot while
// this node leads (one line of wiring in New).
func (n *Node) startAutopilot() {
	n.host.Handle(ProtoStats, n.handleStats)
	p := &pilot{n: n, leadership: make(chan struct{}, 1), lastOK: map[raft.ServerID]time.Time{}, seen: map[raft.ServerID]time.Time{}, rounds: 1, last: map[raft.ServerID]*autopilot.ServerStats{}}
	p.ap = autopilot.New(n.raft, p,
		autopilot.WithLogger(newRaftLogger(n.log).Named("autopilot")),
		autopilot.WithPromoter(p),
		autopilot.WithUpdateInterval(n.cfg.MaintenanceInterval),
		autopilot.WithReconcileInterval(n.cfg.MaintenanceInterval))
	n.pilot = p
	n.wg.Add(1)
	go p.run()
}

// leadershipChanged tells run to look at this node's leadership now. It
// never blocks.
func (p *pilot) leadershipChanged() {
	select {
	case p.leadership <- struct{}{}:
	default:
	}
}

// run starts autopilot when this node becomes leader and stops it when
// leadership is lost: at once when told (leadershipChanged), and at the
// latest on the next point of the maintenance grid (p2p.UntilGrid), which
// an idle peer wakes for anyway. It used to poll four times per
// maintenance interval, two wake-ups a second on every idle peer. While
// it leads, each point of the grid also starts a round of stats requests
// (refreshStats), which autopilot's own rounds then read.
func (p *pilot) run() {
	defer p.n.wg.Done()
	every := p.n.cfg.MaintenanceInterval
	t := time.NewTimer(p2p.UntilGrid(time.Now(), every))
	defer t.Stop()
	running := false
	for {
		onGrid := false
		select {
		case <-p.n.ctx.Done():
			if running {
				<-p.ap.Stop()
			}
			return
		case <-t.C:
			t.Reset(p2p.UntilGrid(time.Now(), every))
			onGrid = true
		case <-p.leadership:
		}
		switch lead := p.n.IsLeader(); {
		case lead && !running:
			p.mu.Lock()
			p.lastOK, p.seen = map[raft.ServerID]time.Time{}, map[raft.ServerID]time.Time{}
			p.last, p.cursor, p.rounds, p.fed = map[raft.ServerID]*autopilot.ServerStats{}, 0, 1, false
			p.leads++
			p.mu.Unlock()
			p.ap.Start(p.n.ctx) // its first round fetches the stats itself
			running = true
		case !lead && running:
			<-p.ap.Stop()
			running = false
		case lead && onGrid:
			p.refreshStats()
		}
	}
}

// reachable says whether the leader reaches id: connected, and answering
// stats requests lately when autopilot has asked (within three turns of
// the stats rounds: a non-voter is asked once a turn).
func (p *pilot) reachable(id peer.ID) bool {
	if p.n.host.Network().Connectedness(id) != network.Connected {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sid := raft.ServerID(id.String())
	ok, asked := p.lastOK[sid]
	return !asked || time.Since(ok) <= 3*time.Duration(max(p.rounds, 1))*p.n.cfg.MaintenanceInterval
}

// lastAnswer is when id last answered this leader's stats request.
func (p *pilot) lastAnswer(id raft.ServerID) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.lastOK[id]
	return t, ok
}

// forget starts a server's record afresh: at its admission (a peer
// taken out and admitted again is not judged by its silence before) and
// after its removal.
func (p *pilot) forget(id raft.ServerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.lastOK, id)
	delete(p.last, id)
	p.seen[id] = time.Now()
}

// deadNonVoters are the non-voters this leader has not heard from for
// longer than after: neither an answer to a stats request nor, since it
// took over, a first sight in the configuration.
func (p *pilot) deadNonVoters(cfg raft.Configuration, after time.Duration) []raft.ServerID {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []raft.ServerID
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Nonvoter || string(s.ID) == p.n.self.String() {
			continue
		}
		last, seen := p.seen[s.ID]
		if ok, asked := p.lastOK[s.ID]; asked && ok.After(last) {
			last = ok
		}
		if seen && now.Sub(last) > after {
			out = append(out, s.ID)
		}
	}
	return out
}

// expelDead, on the leader, takes out of the configuration the non-voters
// it has not heard from for Config.RemoveDeadAfter (0: never). A dead
// voter is first demoted under autopilot's rule (never below three
// voters, (voters−1)/2 at a time) and only then counts here, so this never
// changes a quorum: a non-voter is in no majority. The peer's organisation
// stays registered; its machines are declared lost (leader.expelMachines)
// and it comes back like a new peer of its organisation, with an invitation
// naming it (docs/OPERATIONS.md).
func (n *Node) expelDead(ctx context.Context) {
	if n.cfg.RemoveDeadAfter <= 0 {
		return
	}
	cfg, ok := n.configuration()
	if !ok {
		return
	}
	for _, sid := range n.pilot.deadNonVoters(cfg, n.cfg.RemoveDeadAfter) {
		n.memberMu.Lock()
		err := waitFuture(ctx, n.raft.RemoveServer(sid, 0, n.cfg.ApplyTimeout))
		n.memberMu.Unlock()
		if err != nil {
			n.log.Warn("consensus: remove a dead member", "peer", string(sid), "err", err)
			return
		}
		n.pilot.forget(sid)
		n.log.Warn("consensus: dead member removed", "peer", string(sid), "silent_for_more_than", n.cfg.RemoveDeadAfter)
	}
}

// safeToAddVoter says whether a joiner may become a voter in cfg now.
func (n *Node) safeToAddVoter(cfg raft.Configuration) bool {
	voters := 0
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		id, err := peer.Decode(string(s.ID))
		if err != nil {
			return false
		}
		if id != n.self && !n.pilot.reachable(id) {
			return false
		}
	}
	return voters < n.cfg.MaxVoters
}

// AutopilotConfig is autopilot's configuration.
func (p *pilot) AutopilotConfig() *autopilot.Config {
	c := p.n.cfg
	return &autopilot.Config{
		CleanupDeadServers:      true,
		LastContactThreshold:    4 * c.HeartbeatTimeout,
		MaxTrailingLogs:         c.TrailingLogs,
		MinQuorum:               minQuorum,
		ServerStabilizationTime: 2 * c.MaintenanceInterval,
	}
}

// NotifyState receives autopilot's view; promote reads health from
// reachable instead.
func (p *pilot) NotifyState(*autopilot.State) {}

// FetchServerStats hands autopilot the stats of the grid's last round
// (refreshStats); before the first round of this leadership it fetches
// them itself (fetchStats). Autopilot calls it from its own ticker, whose
// phase is the instant this peer became leader: fetched there, the
// requests woke every voter once more every MaintenanceInterval, at an
// instant of their own (docs/BENCHMARKS.md, "Idle voters' other
// wake-ups, session 12"); on the grid they reach the members when their
// own chores wake them. The stats are then at most one interval older
// when autopilot reads them, which its rules (LastContactThreshold, four
// heartbeat timeouts; DeadServerTimeout through KnownServers) allow: a
// server's liveness is lastOK, updated by every round as before.
func (p *pilot) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	p.mu.Lock()
	fed := p.fed
	p.mu.Unlock()
	if !fed {
		return p.fetchStats(ctx, servers)
	}
	return p.cachedStats(servers)
}

// cachedStats are the last stats of servers; those of servers no longer
// known are forgotten.
func (p *pilot) cachedStats(servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[raft.ServerID]*autopilot.ServerStats{}
	for sid, st := range p.last {
		if _, ok := servers[sid]; ok {
			out[sid] = st
		} else {
			delete(p.last, sid)
		}
	}
	return out
}

// refreshStats runs a round of fetchStats in the background, on a point
// of the maintenance grid (run), unless the previous round is still
// waiting for answers.
func (p *pilot) refreshStats() {
	if !p.refreshing.CompareAndSwap(false, true) {
		return
	}
	p.mu.Lock()
	lead := p.leads
	p.mu.Unlock()
	p.n.wg.Add(1)
	go func() {
		defer p.n.wg.Done()
		defer p.refreshing.Store(false)
		// Autopilot's own bound on a round: half its interval.
		ctx, cancel := context.WithTimeout(p.n.ctx, p.n.cfg.MaintenanceInterval/2)
		defer cancel()
		p.fetchStats(ctx, p.KnownServers())
		p.mu.Lock()
		p.fed = p.fed || p.leads == lead
		p.mu.Unlock()
	}()
}

// fetchStats asks every voter and some non-voters (statsTargets) for
// their stats, in parallel; the non-voters not asked this round keep
// their last stats.
func (p *pilot) fetchStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	var mu sync.Mutex
	out := p.cachedStats(servers)
	p.mu.Lock()
	ask, next, rounds := statsTargets(servers, p.cursor)
	p.cursor, p.rounds = next, rounds
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, sid := range ask {
		id, err := peer.Decode(string(sid))
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st serverStats
			if id == p.n.self {
				st = p.n.localStats()
			} else {
				b, err := p.n.host.Request(ctx, id, ProtoStats, nil)
				if err != nil || json.Unmarshal(b, &st) != nil {
					return
				}
			}
			stats := &autopilot.ServerStats{LastContact: time.Duration(st.LastContactNs), LastTerm: st.LastTerm, LastIndex: st.LastIndex}
			mu.Lock()
			out[sid] = stats
			mu.Unlock()
			p.mu.Lock()
			p.lastOK[sid] = time.Now()
			p.last[sid] = stats
			p.mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// KnownServers is every server of the configuration: alive while it
// answered within DeadServerTimeout (or was first seen by this leader less
// than that ago), failed after.
func (p *pilot) KnownServers() map[raft.ServerID]*autopilot.Server {
	f := p.n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	leader, _ := p.n.Leader()
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[raft.ServerID]*autopilot.Server{}
	for _, s := range f.Configuration().Servers {
		if _, ok := p.seen[s.ID]; !ok {
			p.seen[s.ID] = now
		}
		last := p.seen[s.ID]
		if ok, asked := p.lastOK[s.ID]; asked && ok.After(last) {
			last = ok
		}
		status := autopilot.NodeAlive
		if string(s.ID) != p.n.self.String() && now.Sub(last) > p.n.cfg.DeadServerTimeout {
			status = autopilot.NodeFailed
		}
		// Only voters are potential voters: autopilot's removal bound,
		// (voters−1)/2 at a time, counts them.
		typ := autopilot.NodeType("nonvoter")
		if s.Suffrage == raft.Voter {
			typ = autopilot.NodeVoter
		}
		out[s.ID] = &autopilot.Server{ID: s.ID, Name: string(s.ID), Address: s.Address, NodeStatus: status,
			RaftVersion: raft.ProtocolVersionMax, IsLeader: string(s.ID) == leader.String(), NodeType: typ}
	}
	return out
}

// RemoveFailedServer demotes a failed voter (autopilot calls it within its
// dead-server rule); a failed non-voter stays as it is.
func (p *pilot) RemoveFailedServer(srv *autopilot.Server) {
	f := p.n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if s.ID != srv.ID || s.Suffrage != raft.Voter {
			continue
		}
		if err := p.n.raft.DemoteVoter(s.ID, 0, p.n.cfg.ApplyTimeout).Error(); err != nil {
			p.n.log.Warn("consensus: demote a dead voter", "peer", string(s.ID), "err", err)
			return
		}
		p.n.log.Warn("consensus: dead voter demoted to non-voter", "peer", string(s.ID), "silent_for_more_than", p.n.cfg.DeadServerTimeout)
	}
}

// The promoter: voters stay voters, non-voters are not potential voters
// for autopilot (promote decides promotions, under MaxVoters), and
// autopilot itself promotes and demotes nothing but failed voters.

func (p *pilot) GetServerExt(*autopilot.Config, *autopilot.ServerState) any { return nil }
func (p *pilot) GetStateExt(*autopilot.Config, *autopilot.State) any        { return nil }

func (p *pilot) GetNodeTypes(_ *autopilot.Config, s *autopilot.State) map[raft.ServerID]autopilot.NodeType {
	out := map[raft.ServerID]autopilot.NodeType{}
	for id, srv := range s.Servers {
		if srv.HasVotingRights() {
			out[id] = autopilot.NodeVoter
		} else {
			out[id] = "nonvoter"
		}
	}
	return out
}

func (p *pilot) CalculatePromotionsAndDemotions(*autopilot.Config, *autopilot.State) autopilot.RaftChanges {
	return autopilot.RaftChanges{}
}

func (p *pilot) FilterFailedServerRemovals(_ *autopilot.Config, _ *autopilot.State, f *autopilot.FailedServers) *autopilot.FailedServers {
	return f
}

func (p *pilot) IsPotentialVoter(t autopilot.NodeType) bool { return t == autopilot.NodeVoter }
