package consensus

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// TestNonVoterIntervalBoundsTheLeadersRate: the interval grows with the
// non-voters so that the leader sends them together at most 1/perNonVoter
// no-news RPCs a second up to 100 non-voters, never more often than the
// voters' heartbeat timeout, never less than every 5 s; a non-voter waits
// several intervals before it gives the leader up.
func TestNonVoterIntervalBoundsTheLeadersRate(t *testing.T) {
	const lan = 400 * time.Millisecond
	maxRate := float64(time.Second / perNonVoter)
	for _, nv := range []int{0, 1, 5, 8, 45, 95, 100, 150} {
		t.Run(fmt.Sprint(nv), func(t *testing.T) {
			iv := NonVoterInterval(nv, lan)
			if iv < lan || iv > maxNonVoterInterval {
				t.Fatalf("interval %v outside [%v, %v]", iv, lan, maxNonVoterInterval)
			}
			rate := float64(nv) / iv.Seconds()
			if nv <= 100 && rate > maxRate {
				t.Fatalf("%d non-voters every %v: %.1f RPCs a second, above %.0f", nv, iv, rate, maxRate)
			}
			if nv > 100 && iv != maxNonVoterInterval {
				t.Fatalf("%d non-voters: interval %v, want the cap %v", nv, iv, maxNonVoterInterval)
			}
			if to := NonVoterHeartbeatTimeout(nv, lan); to < nonVoterTimeoutFactor*iv {
				t.Fatalf("timeout %v below %d intervals of %v", to, nonVoterTimeoutFactor, iv)
			}
		})
	}
	// WAN timing: the interval never undercuts the heartbeat timeout.
	if iv := NonVoterInterval(200, 10*time.Second); iv != 10*time.Second {
		t.Fatalf("WAN-like timeout 10s: interval %v", iv)
	}
}

func configOf(voters, nonVoters int) raft.Configuration {
	var cfg raft.Configuration
	for i := range voters {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("v%d", i))})
	}
	for i := range nonVoters {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(fmt.Sprintf("n%d", i))})
	}
	return cfg
}

// TestPacerSlots: what waits and what goes at once. Times are given, not
// measured.
func TestPacerSlots(t *testing.T) {
	const lan = 400 * time.Millisecond
	cfg := configOf(3, 20)
	iv := NonVoterInterval(20, lan)
	heartbeat := func() *raft.AppendEntriesRequest { return &raft.AppendEntriesRequest{Term: 2} }
	idle := func(commit uint64) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 9, PrevLogTerm: 2, LeaderCommitIndex: commit}
	}
	entries := &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 9, Entries: []*raft.Log{{Index: 10}}, LeaderCommitIndex: 9}
	t0 := time.Unix(1_000_000, 0)
	g := VoterHeartbeatInterval(lan, 0)                                          // the grid
	onGrid := func(d time.Duration) time.Duration { return (d + g - 1) / g * g } // after t0

	type step struct {
		name     string
		to       raft.ServerID
		req      *raft.AppendEntriesRequest
		at       time.Duration // after t0
		acked    uint64        // commit index the target acknowledged before
		wait     time.Duration
		wakeable bool // the wait ends early on news
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a voter's heartbeats go once per third of a heartbeat timeout, its idle appends once per voterIdleAppends heartbeat timeouts", []step{
			{"heartbeat", "v1", heartbeat(), 0, 0, 0, false},
			{"heartbeat again", "v1", heartbeat(), time.Millisecond, 0, g - time.Millisecond, true},
			{"first idle append", "v1", idle(9), 2 * time.Millisecond, 9, 0, false},
			{"a third heartbeat takes the next slot", "v1", heartbeat(), 3 * time.Millisecond, 9, 2*g - 3*time.Millisecond, true},
			// Slots fall on the grid: the next after 2 ms + 5 lan.
			{"next idle append", "v1", idle(9), 4 * time.Millisecond, 9, onGrid(2*time.Millisecond+voterIdleAppends*lan) - 4*time.Millisecond, true},
			{"entries", "v1", entries, 5 * time.Millisecond, 9, 0, false},
			{"a new commit", "v1", idle(10), 6 * time.Millisecond, 9, 0, false},
			{"a heartbeat after its slots", "v1", heartbeat(), lan, 9, 0, false},
		}},
		{"another voter has its own heartbeat slots", []step{
			{"v0", "v0", heartbeat(), 0, 0, 0, false},
			{"v2", "v2", heartbeat(), 0, 0, 0, false},
		}},
		{"no-news RPCs to a non-voter take successive slots", []step{
			{"first heartbeat goes at once", "n1", heartbeat(), 0, 0, 0, false},
			{"the idle append waits one interval", "n1", idle(9), time.Millisecond, 9, onGrid(iv) - time.Millisecond, true},
			{"the next heartbeat waits two", "n1", heartbeat(), 2 * time.Millisecond, 9, onGrid(onGrid(iv)+iv) - 2*time.Millisecond, true},
		}},
		{"news to a non-voter goes at once", []step{
			{"heartbeat", "n2", heartbeat(), 0, 0, 0, false},
			{"entries", "n2", entries, time.Millisecond, 9, 0, false},
			{"a commit it has not acknowledged", "n2", idle(10), 2 * time.Millisecond, 9, 0, false},
		}},
		{"another non-voter has its own slots", []step{
			{"n3", "n3", heartbeat(), 0, 0, 0, false},
			{"n4", "n4", heartbeat(), 0, 0, 0, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPacedTransport(noPipeline{}, lan, func() raft.Configuration { return cfg })
			settled(p)
			p.gridBase = t0
			for _, s := range tc.steps {
				p.acked[s.to] = s.acked
				p.commit = 9
				wait, news := p.slot(s.to, s.req, t0.Add(s.at))
				if wait != s.wait || (news != nil) != s.wakeable {
					t.Fatalf("%s: wait %v (wakeable %v), want %v (%v)", s.name, wait, news != nil, s.wait, s.wakeable)
				}
			}
		})
	}
}

// TestVoterHeartbeatInterval: a third of the heartbeat timeout, never
// more than a third of the lease (the leader hears from a quorum three
// times per lease).
func TestVoterHeartbeatInterval(t *testing.T) {
	lan, wan := DefaultConfig(""), WANConfig("")
	for _, tc := range []struct {
		hb, lease, want time.Duration
	}{
		{lan.HeartbeatTimeout, lan.LeaderLeaseTimeout, lan.HeartbeatTimeout / 3}, // 133 ms
		{wan.HeartbeatTimeout, wan.LeaderLeaseTimeout, 500 * time.Millisecond},
		{time.Second, 150 * time.Millisecond, 50 * time.Millisecond},
		{time.Second, 0, time.Second / 3},
	} {
		if got := VoterHeartbeatInterval(tc.hb, tc.lease); got != tc.want {
			t.Errorf("heartbeat timeout %v, lease %v: %v, want %v", tc.hb, tc.lease, got, tc.want)
		}
	}
}

// TestPacerHurriesHeartbeats: news does not end a voter's heartbeat wait
// (the replication loop carries it), hurry does, and for a heartbeat
// timeout every voter's heartbeat goes at once; then the slots resume.
func TestPacerHurriesHeartbeats(t *testing.T) {
	const lan = 400 * time.Millisecond
	cfg := configOf(3, 4)
	p := newPacedTransport(noPipeline{}, lan, func() raft.Configuration { return cfg })
	settled(p)
	now := time.Unix(1_000_000, 0)
	p.gridBase = now
	heartbeat := &raft.AppendEntriesRequest{Term: 2}
	p.slot("v1", heartbeat, now)
	wait, hurried := p.slot("v1", heartbeat, now)
	if wait != VoterHeartbeatInterval(lan, 0) || hurried == nil {
		t.Fatalf("second heartbeat: wait %v (wakeable %v), want %v", wait, hurried != nil, VoterHeartbeatInterval(lan, 0))
	}
	p.slot("v0", &raft.AppendEntriesRequest{Entries: []*raft.Log{{Index: 1}}}, now)
	p.announce()
	select {
	case <-hurried:
		t.Fatal("news ended a heartbeat's wait")
	default:
	}
	p.hurry(now)
	select {
	case <-hurried:
	default:
		t.Fatal("hurry did not end the heartbeat's wait")
	}
	for _, at := range []time.Duration{0, time.Millisecond, lan - time.Millisecond} {
		if wait, _ := p.slot("v1", heartbeat, now.Add(at)); wait != 0 {
			t.Fatalf("%v after hurry: heartbeat waits %v", at, wait)
		}
	}
	// The last went at lan - 1 ms: the next slot is the first grid point
	// half an interval after it (the second after it).
	g := VoterHeartbeatInterval(lan, 0)
	next := (lan - time.Millisecond + g/2 + g - 1) / g * g
	if wait, _ := p.slot("v1", heartbeat, now.Add(lan)); wait != next-lan || wait <= 0 {
		t.Fatalf("a heartbeat timeout after hurry: wait %v, want %v: the slot after the last heartbeat", wait, next-lan)
	}
}

// TestPacerWaitsEndOnTheGrid: every wait ends on the grid, and the
// heartbeats to different voters, asked at different moments, end at the
// same instant (one wake-up of the leader for all of them).
func TestPacerWaitsEndOnTheGrid(t *testing.T) {
	const lan = 400 * time.Millisecond
	cfg := configOf(4, 6)
	p := newPacedTransport(noPipeline{}, lan, func() raft.Configuration { return cfg })
	settled(p)
	t0 := time.Unix(1_000_000, 0)
	p.gridBase = t0.Add(-7 * time.Millisecond)
	grid := VoterHeartbeatInterval(lan, 0)
	heartbeat := &raft.AppendEntriesRequest{Term: 2}
	ends := map[time.Time][]raft.ServerID{}
	for i, s := range cfg.Servers {
		at := t0.Add(time.Duration(i*13) * time.Millisecond)
		p.slot(s.ID, heartbeat, at) // the first goes at once
		at = at.Add(time.Duration(41+i*3) * time.Millisecond)
		wait, _ := p.slot(s.ID, heartbeat, at)
		if wait <= 0 {
			t.Fatalf("%s: second heartbeat did not wait", s.ID)
		}
		end := at.Add(wait)
		if off := end.Sub(p.gridBase) % grid; off != 0 {
			t.Fatalf("%s: wait ends %v after a grid point", s.ID, off)
		}
		if s.Suffrage == raft.Voter {
			ends[end] = append(ends[end], s.ID)
		}
	}
	if len(ends) != 1 {
		t.Fatalf("the waits of 4 voters, asked within %v, end at %d instants: %v", grid/2, len(ends), ends)
	}
}

// TestPacerWakesOnNews: a paced RPC's wait ends when entries or a higher
// commit index go to any follower.
func TestPacerWakesOnNews(t *testing.T) {
	cfg := configOf(3, 4)
	p := newPacedTransport(noPipeline{}, 400*time.Millisecond, func() raft.Configuration { return cfg })
	settled(p)
	now := time.Unix(1_000_000, 0)
	p.slot("n0", &raft.AppendEntriesRequest{}, now)
	wait, news := p.slot("n0", &raft.AppendEntriesRequest{}, now)
	if wait <= 0 || news == nil {
		t.Fatalf("second heartbeat: wait %v", wait)
	}
	select {
	case <-news:
		t.Fatal("woken before any news")
	default:
	}
	// An idle append to a voter with the same commit index is no news.
	p.slot("v0", &raft.AppendEntriesRequest{LeaderCommitIndex: p.commit}, now)
	select {
	case <-news:
		t.Fatal("woken by no news")
	default:
	}
	p.slot("v0", &raft.AppendEntriesRequest{Entries: []*raft.Log{{Index: 1}}}, now)
	select {
	case <-news:
	default:
		t.Fatal("entries to a voter did not wake the paced RPC")
	}
}

// TestPacerWakesOnOwnNews: a paced RPC's wait also ends when the leader
// stores entries in its log or applies a batch (its commit index moved),
// even though no RPC carried them yet: every follower's replication loop
// may be parked in such a wait at once, and nothing else would wake them
// before the slot.
func TestPacerWakesOnOwnNews(t *testing.T) {
	cfg := configOf(3, 0)
	now := time.Unix(1_000_000, 0)
	idle := &raft.AppendEntriesRequest{PrevLogEntry: 9, LeaderCommitIndex: 9}
	park := func(p *pacedTransport) <-chan struct{} {
		t.Helper()
		p.acked["v1"], p.commit = 9, 9
		p.slot("v1", idle, now)
		wait, news := p.slot("v1", idle, now.Add(time.Millisecond))
		if wait <= 0 || news == nil {
			t.Fatalf("second idle append: wait %v, want a paced wait", wait)
		}
		select {
		case <-news:
			t.Fatal("woken before any news")
		default:
		}
		return news
	}
	for _, tc := range []struct {
		name string
		news func(p *pacedTransport) error
	}{
		{"entries stored", func(p *pacedTransport) error {
			return newsLogStore{raft.NewInmemStore(), p.announce}.StoreLogs([]*raft.Log{{Index: 10, Term: 2}})
		}},
		{"one entry stored", func(p *pacedTransport) error {
			return newsLogStore{raft.NewInmemStore(), p.announce}.StoreLog(&raft.Log{Index: 10, Term: 2})
		}},
		{"a batch applied", func(p *pacedTransport) error {
			f := newFSM(false, slog.New(slog.DiscardHandler))
			f.afterBatch = p.announce
			f.ApplyBatch([]*raft.Log{{Index: 10, Type: raft.LogNoop}})
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPacedTransport(noPipeline{}, 400*time.Millisecond, func() raft.Configuration { return cfg })
			settled(p)
			news := park(p)
			if err := tc.news(p); err != nil {
				t.Fatal(err)
			}
			select {
			case <-news:
			default:
				t.Fatal("the paced RPC still waits")
			}
			// The next wait takes a fresh channel, not the closed one.
			if _, again := p.slot("v1", idle, now.Add(2*time.Millisecond)); again == nil || again == news {
				t.Fatal("the next paced RPC does not wait on a new channel")
			}
		})
	}
}

// TestPacerRefreshesCommit: a woken (or gathered) request carries the
// leader's latest commit index, but only while this peer leads in the
// request's term and never past the request's last entry, its previous
// entry when it has none (beyond it the follower's log is not checked: it
// may hold an older term's entries); a heartbeat and a request of another
// term go as raft built them.
func TestPacerRefreshesCommit(t *testing.T) {
	const leaderTerm, leaderCommit = 3, 40
	p := newPacedTransport(noPipeline{}, 400*time.Millisecond, func() raft.Configuration { return configOf(3, 0) })
	settled(p)
	p.leaderCommit = func(term uint64) (uint64, bool) { return leaderCommit, term == leaderTerm }
	for _, tc := range []struct {
		name string
		req  raft.AppendEntriesRequest
		want uint64
	}{
		{"idle append of the leader's term", raft.AppendEntriesRequest{Term: leaderTerm, PrevLogEntry: 40, PrevLogTerm: leaderTerm, LeaderCommitIndex: 30}, leaderCommit},
		{"the leader's log grew past the request", raft.AppendEntriesRequest{Term: leaderTerm, PrevLogEntry: 35, PrevLogTerm: leaderTerm, LeaderCommitIndex: 30}, 35},
		{"heartbeat", raft.AppendEntriesRequest{Term: leaderTerm}, 0},
		{"idle append of an older term", raft.AppendEntriesRequest{Term: leaderTerm - 1, PrevLogEntry: 40, LeaderCommitIndex: 30}, 30},
		{"with entries past the commit", raft.AppendEntriesRequest{Term: leaderTerm, PrevLogEntry: 40, LeaderCommitIndex: 30, Entries: []*raft.Log{{Index: 41}}}, leaderCommit},
		{"with entries below the commit", raft.AppendEntriesRequest{Term: leaderTerm, PrevLogEntry: 33, LeaderCommitIndex: 30, Entries: []*raft.Log{{Index: 34}, {Index: 35}}}, 35},
		{"with entries of an older term", raft.AppendEntriesRequest{Term: leaderTerm - 1, PrevLogEntry: 40, LeaderCommitIndex: 30, Entries: []*raft.Log{{Index: 41}}}, 30},
		{"already newer", raft.AppendEntriesRequest{Term: leaderTerm, PrevLogEntry: 50, LeaderCommitIndex: 45}, 45},
	} {
		req := tc.req
		p.refreshCommit(&req)
		if req.LeaderCommitIndex != tc.want {
			t.Errorf("%s: commit index %d, want %d", tc.name, req.LeaderCommitIndex, tc.want)
		}
	}
}

// TestFollowerTimeouts: a non-voter waits NonVoterHeartbeatTimeout; a
// voter, and a peer not in the configuration (joining), keep the preset's.
func TestFollowerTimeouts(t *testing.T) {
	c := DefaultConfig("x")
	cfg := configOf(5, 45)
	for _, tc := range []struct {
		self   raft.ServerID
		hb, el time.Duration
	}{
		{"v0", c.HeartbeatTimeout, c.ElectionTimeout},
		{"nobody", c.HeartbeatTimeout, c.ElectionTimeout},
		{"n7", NonVoterHeartbeatTimeout(45, c.HeartbeatTimeout), NonVoterHeartbeatTimeout(45, c.HeartbeatTimeout)},
	} {
		hb, el := c.followerTimeouts(cfg, tc.self)
		if hb != tc.hb || el != tc.el {
			t.Errorf("%s: heartbeat %v election %v, want %v %v", tc.self, hb, el, tc.hb, tc.el)
		}
	}
}

// TestNonVotersFollowPaced: a real federation of five with three voters.
// The two non-voters reload their follower timeout to the non-voters'
// one, the voters keep the preset's, and a write proposed through a
// non-voter is applied there and everywhere (pacing holds no news back).
func TestNonVotersFollowPaced(t *testing.T) {
	c := newCluster(t, 5, 1, func(cfg *Config) { cfg.MaxVoters = 3 })
	leader := c.waitLeader()
	want := NonVoterHeartbeatTimeout(2, DefaultConfig("").HeartbeatTimeout)
	var nonVoter *tpeer
	eventually(t, 20*time.Second, func() error {
		members, err := leader.node.Members()
		if err != nil {
			return err
		}
		voter := map[string]bool{}
		for _, m := range members {
			voter[m.ID.String()] = m.Voter
		}
		for _, p := range c.peers {
			hb := p.node.Raft().ReloadableConfig().HeartbeatTimeout
			isVoter := voter[p.node.ID().String()]
			switch {
			case isVoter && hb != DefaultConfig("").HeartbeatTimeout:
				return fmt.Errorf("voter %s: heartbeat timeout %v", p.name, hb)
			case !isVoter && hb != want:
				return fmt.Errorf("non-voter %s: heartbeat timeout %v, want %v", p.name, hb, want)
			case !isVoter:
				nonVoter = p
			}
		}
		return nil
	})
	ids := submit(t, nonVoter, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	idx := leader.node.Raft().LastIndex()
	if err := nonVoter.node.WaitApplied(ctx, idx); err != nil {
		t.Fatalf("non-voter %s did not apply %d: %v", nonVoter.name, idx, err)
	}
	if len(ids) != 2 {
		t.Fatalf("%d task ids", len(ids))
	}
	c.converge()
}

// TestStatsTargetsBounded: every autopilot round asks every voter and at
// most maxNonVoterStatsPerRound non-voters, and a turn of rounds asks
// every non-voter.
func TestStatsTargetsBounded(t *testing.T) {
	for _, nv := range []int{0, 3, 10, 11, 95} {
		t.Run(fmt.Sprint(nv), func(t *testing.T) {
			servers := map[raft.ServerID]*autopilot.Server{}
			for _, s := range configOf(5, nv).Servers {
				typ := autopilot.NodeType("nonvoter")
				if s.Suffrage == raft.Voter {
					typ = autopilot.NodeVoter
				}
				servers[s.ID] = &autopilot.Server{ID: s.ID, NodeType: typ}
			}
			asked := map[raft.ServerID]int{}
			cursor, rounds := 0, 0
			for round := 0; round == 0 || round < rounds; round++ {
				var ask []raft.ServerID
				ask, cursor, rounds = statsTargets(servers, cursor)
				voters, nonVoters := 0, 0
				for _, sid := range ask {
					asked[sid]++
					if servers[sid].NodeType == autopilot.NodeVoter {
						voters++
					} else {
						nonVoters++
					}
				}
				if voters != 5 || nonVoters > maxNonVoterStatsPerRound {
					t.Fatalf("round %d: %d voters, %d non-voters asked", round, voters, nonVoters)
				}
			}
			if want := (nv + maxNonVoterStatsPerRound - 1) / maxNonVoterStatsPerRound; nv > 0 && rounds != want {
				t.Fatalf("a turn takes %d rounds, want %d", rounds, want)
			}
			for sid := range servers {
				if asked[sid] == 0 {
					t.Fatalf("%s never asked in a turn", sid)
				}
			}
		})
	}
}

// settled makes p a pacer whose leadership began long ago, past
// settleLocked's wait for non-voters.
func settled(p *pacedTransport) {
	p.term, p.termStart = 2, time.Unix(0, 0)
}

// TestNewLeaderServesVotersFirst: in the first heartbeat timeout of a
// leadership, RPCs to non-voters wait, news or not, until it ends; RPCs to
// voters do not; an older term's RPC is not held; the next term starts a
// new wait.
func TestNewLeaderServesVotersFirst(t *testing.T) {
	const lan = 400 * time.Millisecond
	cfg := configOf(3, 2)
	p := newPacedTransport(noPipeline{}, lan, func() raft.Configuration { return cfg })
	t0 := time.Unix(1_000_000, 0)
	p.gridBase = t0
	entries := func(term uint64) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{Term: term, PrevLogEntry: 9, Entries: []*raft.Log{{Index: 10}}, LeaderCommitIndex: 9}
	}
	for _, s := range []struct {
		name string
		to   raft.ServerID
		req  *raft.AppendEntriesRequest
		at   time.Duration
		wait time.Duration
	}{
		{"the no-op to a voter goes at once", "v1", entries(5), 0, 0},
		{"the no-op to a non-voter waits", "n0", entries(5), time.Millisecond, lan - time.Millisecond},
		{"a heartbeat to a non-voter waits", "n1", &raft.AppendEntriesRequest{Term: 5}, 100 * time.Millisecond, lan - 100*time.Millisecond},
		{"an older term's RPC is not held", "n1", entries(4), 200 * time.Millisecond, 0},
		{"after the first heartbeat timeout, news goes at once", "n0", entries(5), lan, 0},
		{"a new term: a new wait", "n0", entries(6), lan + time.Millisecond, lan},
		{"and none for voters", "v2", entries(6), lan + 2*time.Millisecond, 0},
	} {
		wait, _ := p.slot(s.to, s.req, t0.Add(s.at))
		if wait != s.wait {
			t.Errorf("%s: wait %v, want %v", s.name, wait, s.wait)
		}
	}
}
