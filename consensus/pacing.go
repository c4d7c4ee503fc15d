package consensus

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Many peers, cheap when idle (issue 17). hashicorp/raft replicates to
// every server of the configuration at one timing: a heartbeat every
// HeartbeatTimeout/10 and, from the replication loop, an AppendEntries
// every CommitTimeout even when nothing changed (so that followers learn
// the commit index). With the LAN preset that is about 50 RPCs a second to
// each follower, voter or not, so the leader's idle cost grew with every
// peer that joined. Raft has no per-follower timing, so the transport
// paces what the leader sends to non-voters instead:
//
//   - An AppendEntries that carries news for a non-voter (log entries, or
//     a commit index above the last one it acknowledged) goes at once: a
//     non-voter receives entries and learns commits as soon as a voter
//     does, one round trip behind at most.
//   - One that carries no news (a heartbeat, or the replication loop's
//     idle AppendEntries) waits for the non-voter's next slot: one every
//     NonVoterInterval(non-voters), which grows with the number of
//     non-voters so that the leader sends all of them together a bounded
//     number of such RPCs a second (1/perNonVoter). A waiting RPC leaves
//     at once when news goes to any follower, so a paced loop never holds
//     back new entries.
//   - A waiting RPC also leaves at once when the leader itself has news:
//     it stored new entries in its log (newsLogStore) or applied a newer
//     commit (fsm.afterBatch). Raft's replication loop for a follower is
//     parked inside the waiting RPC, so without this a new entry waited
//     for the follower's slot (up to a heartbeat timeout) whenever every
//     follower's loop was parked at once: after any pause of more than
//     CommitTimeout, and always at the first entry after idleness. The
//     woken RPC goes with the entries it was built with (none; the loop
//     sends the new ones next) but with the leader's latest commit index,
//     capped at the request's previous entry (the part of the follower's
//     log the request checks), and only while this peer still leads in
//     the request's term, so that the followers learn a commit of entries
//     they hold at once instead of at the next CommitTimeout. A commit
//     index read under a later term is never put in an older term's
//     request (a follower of the older term could commit a stale entry).
//   - A non-voter, for its part, waits NonVoterHeartbeatTimeout before it
//     considers the leader gone (Node.adjustTiming reloads Raft's timeouts
//     when this peer's suffrage changes). A non-voter never stands for
//     election, so this costs no fail-over time.
//
// Voters keep the preset's heartbeat timeout: fail-over still takes one
// HeartbeatTimeout and an election. Their idle AppendEntries, which only
// repeat the heartbeats when there is no news, go once per
// voterIdleAppends heartbeat timeouts instead of every CommitTimeout.
// Their heartbeats go once per VoterHeartbeatInterval (a third of the
// heartbeat timeout, at most a third of the leader lease) rather than
// Raft's every tenth to fifth of the heartbeat timeout: at the LAN preset
// 7.5 a second to each voter instead of about 17, which was the largest
// part of an idle leader's and voters' CPU (docs/BENCHMARKS.md; a quarter,
// 10 a second, until session 10). A follower still hears from the leader
// three times per heartbeat timeout, and the leader from a quorum three
// times per lease. A heartbeat that waits leaves at once
// when someone asks the leader to verify its leadership (hurry), so a
// read-index still takes a round trip, not a heartbeat slot.

// Pacing of the leader's no-news RPCs to non-voters.
const (
	// perNonVoter is the share of one non-voter in the interval: the
	// leader sends non-voters at most 1/perNonVoter (20) no-news RPCs a
	// second, however many there are, until maxNonVoterInterval.
	perNonVoter = 50 * time.Millisecond
	// maxNonVoterInterval bounds the interval (a non-voter learns of a new
	// leader within it); past 100 non-voters the leader's cost grows
	// again, by 1/maxNonVoterInterval per non-voter.
	maxNonVoterInterval = 5 * time.Second
	// nonVoterTimeoutFactor is how many intervals a non-voter waits
	// before it considers the leader gone.
	nonVoterTimeoutFactor = 3
	// suffrageTTL is how long the pacer reuses the configuration it read.
	suffrageTTL = 250 * time.Millisecond
	// voterHeartbeatsPerTimeout is how many heartbeats a voter receives
	// per heartbeat timeout (VoterHeartbeatInterval).
	voterHeartbeatsPerTimeout = 3
	// voterIdleAppends is the interval, in heartbeat timeouts, of the
	// idle AppendEntries to a voter (2 s at the LAN preset): they carry
	// nothing the heartbeats do not (news goes at once, and ends a
	// waiting one), and at one per heartbeat timeout they were a fifth
	// of the RPCs an idle voter answered (session 10).
	voterIdleAppends = 5
)

// VoterHeartbeatInterval is the least time between two heartbeats the
// leader sends one voter: a third of the heartbeat timeout (133 ms at the
// LAN preset), at most a third of the leader lease (0: no lease given).
func VoterHeartbeatInterval(heartbeatTimeout, leaderLease time.Duration) time.Duration {
	d := heartbeatTimeout / voterHeartbeatsPerTimeout
	if leaderLease > 0 {
		d = min(d, leaderLease/3)
	}
	return d
}

// NonVoterInterval is the time between two no-news AppendEntries the leader
// sends one non-voter when the configuration has nonVoters of them:
// nonVoters × 50 ms, at least the voters' heartbeat timeout, at most 5 s.
func NonVoterInterval(nonVoters int, heartbeatTimeout time.Duration) time.Duration {
	d := time.Duration(nonVoters) * perNonVoter
	return min(max(d, heartbeatTimeout), max(maxNonVoterInterval, heartbeatTimeout))
}

// NonVoterHeartbeatTimeout is the follower timeout of a non-voter: three of
// its intervals, so that a leader whose count of non-voters is ahead of
// this peer's by a few joins still reaches it in time.
func NonVoterHeartbeatTimeout(nonVoters int, heartbeatTimeout time.Duration) time.Duration {
	return nonVoterTimeoutFactor * NonVoterInterval(nonVoters, heartbeatTimeout)
}

// pacedTransport is the Raft transport (without pipelining) with the
// leader's RPCs to non-voters paced as above.
type pacedTransport struct {
	noPipeline
	heartbeatTimeout time.Duration
	// lease is the leader lease (VoterHeartbeatInterval; 0: none).
	lease time.Duration
	// configuration reads the latest Raft configuration.
	configuration func() raft.Configuration
	// leaderCommit is this peer's commit index, and whether it leads in
	// term (nil: no refresh of a woken request's commit index).
	leaderCommit func(term uint64) (uint64, bool)
	// leaderLog reads the leader's log for gather (gather.go; nil: no
	// gathering), at most maxAppend entries to a request; gatherWait
	// bounds a non-voter's entries' wait for their commit.
	leaderLog func(term, from uint64, max int) []*raft.Log
	maxAppend int
	// gatherWait is a time.Duration (tests lengthen it while RPCs run).
	gatherWait atomic.Int64
	// gathered and ungathered count the requests with entries sent to
	// non-voters with and without their last entry's commit (read by
	// gather_test.go).
	gathered, ungathered atomic.Uint64
	done                 chan struct{}
	closeOnce            sync.Once
	// woken counts the paced waits that news ended before their slot
	// (read by pacing_wiring_test.go).
	woken atomic.Uint64

	mu sync.Mutex
	// suffrage, read at readAt: the non-voters and how many.
	readAt    time.Time
	nonVoter  map[raft.ServerID]bool
	nonVoters int
	// next is each non-voter's next free slot; acked the highest commit
	// index it acknowledged.
	next  map[raft.ServerID]time.Time
	acked map[raft.ServerID]uint64
	// commit is the highest commit index sent to anyone; news is closed
	// (and replaced) when entries or a higher commit index go out.
	commit uint64
	news   chan struct{}
	// waited says that a paced RPC took news to wait on since it was
	// last replaced, so announce has someone to wake.
	waited bool
	// applied is closed (and replaced) by announce when appliedWaited: a
	// gathered request waits on it for its entries' commit (gather.go).
	applied       chan struct{}
	appliedWaited bool
	// beat is each voter's next heartbeat slot. Until hurryUntil, voters'
	// heartbeats go unpaced; hurried is closed (and replaced) by hurry
	// when a heartbeat waits on it (beatWaited).
	beat map[raft.ServerID]time.Time
	// gridBase is a point of the grid the slots fall on (onGrid).
	gridBase time.Time
	// term is the highest term of the AppendEntries sent, first seen at
	// termStart: this peer's leadership in it began then (settleLocked).
	term       uint64
	termStart  time.Time
	hurryUntil time.Time
	hurried    chan struct{}
	beatWaited bool
}

func newPacedTransport(nt noPipeline, heartbeatTimeout time.Duration, configuration func() raft.Configuration) *pacedTransport {
	t := &pacedTransport{
		noPipeline: nt, heartbeatTimeout: heartbeatTimeout, configuration: configuration, done: make(chan struct{}),
		next: map[raft.ServerID]time.Time{}, acked: map[raft.ServerID]uint64{}, news: make(chan struct{}),
		beat: map[raft.ServerID]time.Time{}, hurried: make(chan struct{}), gridBase: time.Now(),
		applied: make(chan struct{}),
	}
	t.gatherWait.Store(int64(gatherWaitDefault))
	return t
}

// AppendEntries sends an AppendEntries, after its slot when it carries a
// non-voter no news.
func (t *pacedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	wait, news := t.slot(id, args, time.Now())
	if wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-news:
			t.woken.Add(1)
		case <-t.done:
			timer.Stop()
			return raft.ErrTransportShutdown
		}
		timer.Stop()
	}
	// A non-voter's request takes the newer entries and waits for their
	// commit (gather.go).
	nonVoter := t.isNonVoter(id)
	if gathered := nonVoter && t.gather(id, args); wait > 0 || gathered {
		t.refreshCommit(args)
	}
	if nonVoter && len(args.Entries) > 0 {
		if args.LeaderCommitIndex >= lastInRequest(args) {
			t.gathered.Add(1)
		} else {
			t.ungathered.Add(1)
		}
	}
	err := t.noPipeline.AppendEntries(id, target, args, resp)
	if err == nil && args.LeaderCommitIndex > 0 {
		t.mu.Lock()
		t.acked[id] = max(t.acked[id], args.LeaderCommitIndex)
		t.mu.Unlock()
	}
	return err
}

// refreshCommit raises a waited (or gathered) request's commit index to
// the leader's current one while this peer leads in the request's term,
// but never past the request's last entry (its previous entry when it
// carries none). The cap matters: the follower commits up to
// min(LeaderCommitIndex, its own last index), and only its log up to the
// request's last entry is checked against (or made equal to) the leader's
// by this request; past it, a follower may still hold entries of an older
// term the leader never had (the leader's log grew while the request
// waited). A heartbeat names no previous entry and is never changed. The commit index is read before
// the leadership: once the check passes it was read while this peer led
// in that term (a term has one leader, and a peer that stepped down never
// leads that term again) or while it was a candidate of it, when it was a
// committed index too.
func (t *pacedTransport) refreshCommit(args *raft.AppendEntriesRequest) {
	if t.leaderCommit == nil || isHeartbeat(args) {
		return
	}
	c, ok := t.leaderCommit(args.Term)
	if c = min(c, lastInRequest(args)); ok && c > args.LeaderCommitIndex {
		args.LeaderCommitIndex = c
	}
}

// slot records the news args carries and says how long it must wait (0:
// go now), and the channel that ends the wait early.
func (t *pacedTransport) slot(id raft.ServerID, args *raft.AppendEntriesRequest, now time.Time) (time.Duration, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(args.Entries) > 0 || args.LeaderCommitIndex > t.commit {
		t.commit = max(t.commit, args.LeaderCommitIndex)
		t.wakeLocked()
	}
	t.readSuffrage(now)
	if wait := t.settleLocked(id, args.Term, now); wait > 0 {
		return wait, nil
	}
	interval := NonVoterInterval(t.nonVoters, t.heartbeatTimeout)
	if !t.nonVoter[id] {
		// A voter's heartbeats go once per VoterHeartbeatInterval
		// (fail-over and the leader's lease depend on them); its idle
		// appends, which only repeat them, once per voterIdleAppends
		// heartbeat timeouts.
		if isHeartbeat(args) {
			return t.beatSlotLocked(id, now)
		}
		interval = voterIdleAppends * t.heartbeatTimeout
	}
	if len(args.Entries) > 0 || args.LeaderCommitIndex > t.acked[id] {
		t.next[id] = t.onGrid(now.Add(interval))
		return 0, nil
	}
	at := t.next[id]
	if !at.After(now) {
		t.next[id] = t.onGrid(now.Add(interval))
		return 0, nil
	}
	t.next[id] = t.onGrid(at.Add(interval))
	t.waited = true
	return at.Sub(now), t.news
}

// settleLocked is how long an RPC to id in term must wait because this
// peer's leadership in term has just begun: a new leader sends its
// non-voters nothing, news or not, for its first heartbeat timeout. At
// 100 peers on two cores, a new leader's first RPCs to 95 non-voters (its
// no-op entry, then a heartbeat each) woke the whole host at once, and its
// first heartbeats to the voters came too late: the voters, whose last
// contact was still the dead leader's, stood again, and the federation went
// 7 s without a leader (docs/BENCHMARKS.md, "Voters and fail-over, session
// 10"). The voters' first heartbeats, the no-op's commit and the first
// reads' barrier need only the voters; a non-voter waits for the leader
// three of its intervals (at least three heartbeat timeouts) and never
// stands for election, so its first contact a heartbeat timeout later
// costs nothing.
func (t *pacedTransport) settleLocked(id raft.ServerID, term uint64, now time.Time) time.Duration {
	if term > t.term {
		t.term, t.termStart = term, now
	}
	if term < t.term || !t.nonVoter[id] {
		return 0
	}
	return max(0, t.termStart.Add(t.heartbeatTimeout).Sub(now))
}

// onGrid is the first point of the pacer's grid at or after at. Every
// paced wait ends on the grid (VoterHeartbeatInterval apart, from the
// transport's start), so the waits for different followers end at the
// same instants and the idle leader wakes once for the RPCs of a grid
// point, not once for each: on an idle host a wake-up (the scheduler,
// the kernel's switch) costs more than the small RPC it sends.
func (t *pacedTransport) onGrid(at time.Time) time.Time {
	g := VoterHeartbeatInterval(t.heartbeatTimeout, t.lease)
	if g <= 0 {
		return at
	}
	d := at.Sub(t.gridBase)
	k := d / g
	if d > k*g {
		k++
	}
	return t.gridBase.Add(k * g)
}

// beatSlotLocked is slot for a heartbeat to voter id.
func (t *pacedTransport) beatSlotLocked(id raft.ServerID, now time.Time) (time.Duration, <-chan struct{}) {
	every := VoterHeartbeatInterval(t.heartbeatTimeout, t.lease)
	at := t.beat[id]
	if now.Before(t.hurryUntil) || !at.After(now) {
		// Raft asks again a tenth to a fifth of the heartbeat timeout
		// after the answer: the next grid point half an interval on is
		// the one after the next ask.
		t.beat[id] = t.onGrid(now.Add(every / 2))
		return 0, nil
	}
	t.beat[id] = t.onGrid(at.Add(every / 2))
	t.beatWaited = true
	return at.Sub(now), t.hurried
}

// hurry sends the voters' heartbeats unpaced for a heartbeat timeout, the
// waiting ones at once: Raft verifies its leadership (VerifyLeader) by a
// round of heartbeats, which must not wait for their slots.
func (t *pacedTransport) hurry(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hurryUntil = now.Add(t.heartbeatTimeout)
	if t.beatWaited {
		close(t.hurried)
		t.hurried = make(chan struct{})
		t.beatWaited = false
	}
}

// announce ends the paced waits: the leader has news (entries stored, a
// commit applied) that the parked replication loops must send.
func (t *pacedTransport) announce() {
	t.mu.Lock()
	t.wakeLocked()
	if t.appliedWaited {
		close(t.applied)
		t.applied = make(chan struct{})
		t.appliedWaited = false
	}
	t.mu.Unlock()
}

// wakeLocked closes and replaces news when a paced RPC waits on it.
func (t *pacedTransport) wakeLocked() {
	if !t.waited {
		return
	}
	close(t.news)
	t.news = make(chan struct{})
	t.waited = false
}

// isHeartbeat says whether args is raft's heartbeat: it names no previous
// entry and no commit index (replication always names both once the log
// has an entry).
func isHeartbeat(args *raft.AppendEntriesRequest) bool {
	return len(args.Entries) == 0 && args.PrevLogEntry == 0 && args.LeaderCommitIndex == 0
}

// readSuffrage refreshes the non-voters from the configuration when the
// copy is older than suffrageTTL.
func (t *pacedTransport) readSuffrage(now time.Time) {
	if t.nonVoter != nil && now.Sub(t.readAt) < suffrageTTL {
		return
	}
	cfg := t.configuration()
	t.nonVoter = make(map[raft.ServerID]bool, len(cfg.Servers))
	t.nonVoters = 0
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter {
			t.nonVoter[s.ID] = true
			t.nonVoters++
		}
	}
	member := make(map[raft.ServerID]bool, len(cfg.Servers))
	for _, s := range cfg.Servers {
		member[s.ID] = true
	}
	for id := range t.next {
		if !member[id] {
			delete(t.next, id)
			delete(t.acked, id)
		}
	}
	for id := range t.beat {
		if !member[id] {
			delete(t.beat, id)
		}
	}
	t.readAt = now
}

// stop ends the waits; the NetworkTransport is closed by its owner.
func (t *pacedTransport) stop() { t.closeOnce.Do(func() { close(t.done) }) }

// followerTimeouts are the heartbeat and election timeouts this peer's
// Raft should use with the configuration cfg: the configured (LAN or WAN)
// ones for a voter or a peer not in it, NonVoterHeartbeatTimeout for a
// non-voter.
func (c Config) followerTimeouts(cfg raft.Configuration, self raft.ServerID) (heartbeat, election time.Duration) {
	nonVoters, selfNonVoter := 0, false
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter {
			nonVoters++
			selfNonVoter = selfNonVoter || s.ID == self
		}
	}
	if !selfNonVoter {
		return c.HeartbeatTimeout, c.ElectionTimeout
	}
	hb := NonVoterHeartbeatTimeout(nonVoters, c.HeartbeatTimeout)
	return hb, max(hb, c.ElectionTimeout)
}

// adjustTiming reloads Raft's follower timeouts when this peer's suffrage
// (or the number of non-voters) calls for others, or a voter's lost
// leader shortens them (leaderloss.go).
func (n *Node) adjustTiming() {
	n.loss.mu.Lock()
	defer n.loss.mu.Unlock()
	hb, el := n.cfg.followerTimeouts(n.gate.configuration(), n.selfID)
	now := time.Now()
	lhb, lel, lost := n.lossTimeouts(now)
	switch {
	case hb == n.cfg.HeartbeatTimeout && lost && !n.IsLeader():
		// A voter (a non-voter's timeout is longer) whose leader is gone
		// (leaderloss.go): a closed connection is evidence, so it holds
		// and hastens in its turn even on a starved host.
		hb, el = lhb, lel
	case !n.IsLeader():
		hb, el = n.starve.stretch(n.cfg, hb, el, now) // starve.go
	}
	cur := n.raft.ReloadableConfig()
	if cur.HeartbeatTimeout == hb && cur.ElectionTimeout == el {
		return
	}
	cur.HeartbeatTimeout, cur.ElectionTimeout = hb, el
	if err := n.raft.ReloadConfig(cur); err != nil {
		n.log.Warn("consensus: reload raft timeouts", "heartbeat_timeout", hb, "err", err)
		return
	}
	n.log.Debug("consensus: raft timeouts reloaded", "heartbeat_timeout", hb, "election_timeout", el)
}

// newsLogStore is the Raft log store that announces every write: on the
// leader a write is new entries for the followers (dispatchLogs stores
// them, then triggers replication), and a paced RPC must not hold them
// back. On a follower nothing waits and announce costs a lock.
type newsLogStore struct {
	raft.LogStore
	announce func()
}

func (s newsLogStore) StoreLog(l *raft.Log) error {
	err := s.LogStore.StoreLog(l)
	s.announce()
	return err
}

func (s newsLogStore) StoreLogs(logs []*raft.Log) error {
	err := s.LogStore.StoreLogs(logs)
	s.announce()
	return err
}
