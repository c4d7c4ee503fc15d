package consensus

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Only members replicate (issue 15). The federation secret lets a host open
// libp2p connections; it does not make the host a member. hashicorp/raft
// takes any AppendEntries it is sent, so a secret holder that never joined
// could write the log of every peer. The gate below decides, for every Raft
// RPC (AppendEntries, RequestVote, RequestPreVote, InstallSnapshot,
// TimeoutNow), whether its sender may send it, and the transport
// (transport.go) asks it with the sender's libp2p peer ID, which the
// connection's security handshake authenticated, before Raft sees the RPC.
//
// The rule, from what this peer knows:
//
//   - When the latest Raft configuration this peer holds (the last one in
//     its log or snapshot, committed or not, as Raft itself uses it) names
//     this peer, a sender is admitted exactly when that configuration names
//     it too. A removed peer is refused from the moment the entry that
//     removes it reaches this peer's log.
//   - Before that (a peer that is joining: empty log, or a log from before
//     it was removed), a sender is admitted when the member this peer asked
//     to join named it as leader or member (Join's "members" exchange, done
//     before the join request so that the leader's first AppendEntries,
//     which Raft sends while the join is being committed, is accepted). A
//     peer that never asked to join admits no one.
//   - A member whose log lags may not know a member that joined since (and
//     may now lead). When it refuses a sender, it asks the members it knows
//     for the current membership (Node.vouch, at most every few seconds);
//     a sender that an authenticated member names is admitted until this
//     peer's own configuration names it (or for vouchTTL), after which the
//     first rule governs again.
type gate struct {
	self peer.ID
	log  *slog.Logger
	// raft is set once Raft runs; until then only told and vouched count.
	raft atomic.Pointer[raft.Raft]
	// refusals counts the refused streams and RPCs.
	refusals atomic.Uint64

	mu sync.Mutex
	// told holds the leader and members named at the last join.
	told map[peer.ID]bool
	// vouched holds senders a member named since, with when they expire.
	vouched map[peer.ID]time.Time
	// refused holds the senders refused since the last vouch round, and
	// lastLog when each was last logged (rate limit).
	refused map[peer.ID]bool
	lastLog map[peer.ID]time.Time
	// suppressed counts refusals not logged since.
	suppressed map[peer.ID]int

	// members answers membership by binary peer ID (memberset.go).
	members memberSet
}

const (
	// refusalLogEvery is the rate at which refusals of one sender are
	// logged.
	refusalLogEvery = 10 * time.Second
	// vouchTTL bounds how long a member's word admits a sender this peer's
	// own configuration does not name.
	vouchTTL = time.Minute
	// maxGateEntries bounds the per-sender bookkeeping a flood of peer IDs
	// could grow.
	maxGateEntries = 1024
)

func newGate(self peer.ID, log *slog.Logger) *gate {
	return &gate{
		self: self, log: log,
		told: map[peer.ID]bool{}, vouched: map[peer.ID]time.Time{},
		refused: map[peer.ID]bool{}, lastLog: map[peer.ID]time.Time{}, suppressed: map[peer.ID]int{},
	}
}

// configuration is the latest configuration Raft holds (an empty one before
// Raft runs or before bootstrap or join).
func (g *gate) configuration() raft.Configuration {
	r := g.raft.Load()
	if r == nil {
		return raft.Configuration{}
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return raft.Configuration{}
	}
	return f.Configuration()
}

func inConfiguration(cfg raft.Configuration, id peer.ID) bool {
	sid := raft.ServerID(id.String())
	for _, s := range cfg.Servers {
		if s.ID == sid {
			return true
		}
	}
	return false
}

// inConfiguration says whether cfg, the latest configuration Raft holds,
// names id.
func (g *gate) inConfiguration(cfg raft.Configuration, id peer.ID) bool {
	_, ok := g.members.suffrage(cfg, id)
	return ok
}

// votes says whether cfg, the latest configuration Raft holds, names id
// as a voter.
func (g *gate) votes(cfg raft.Configuration, id peer.ID) bool {
	s, ok := g.members.suffrage(cfg, id)
	return ok && s == raft.Voter
}

// allows says whether from may send this peer Raft RPCs now.
func (g *gate) allows(from peer.ID) bool {
	if from == g.self {
		return false
	}
	cfg := g.configuration()
	member := g.inConfiguration(cfg, g.self)
	g.mu.Lock()
	defer g.mu.Unlock()
	if member && len(g.told) > 0 {
		// Joined: what the join was told no longer counts.
		clear(g.told)
	}
	if member && g.inConfiguration(cfg, from) {
		// The configuration governs from now on: a later removal is
		// not to be overridden by an old vouch.
		delete(g.vouched, from)
		return true
	}
	if !member {
		return g.told[from]
	}
	exp, ok := g.vouched[from]
	if ok && time.Now().Before(exp) {
		return true
	}
	delete(g.vouched, from)
	return false
}

// tell records the leader and members the member asked to join named.
func (g *gate) tell(ids []peer.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.told = make(map[peer.ID]bool, len(ids))
	for _, id := range ids {
		if id != "" && id != g.self {
			g.told[id] = true
		}
	}
}

// vouch admits ids, which an authenticated member named as members, for
// vouchTTL or until this peer's configuration names them.
func (g *gate) vouch(ids []peer.ID) {
	cfg := g.configuration()
	g.mu.Lock()
	defer g.mu.Unlock()
	exp := time.Now().Add(vouchTTL)
	for _, id := range ids {
		if id == g.self || g.inConfiguration(cfg, id) || len(g.vouched) >= maxGateEntries {
			continue
		}
		if g.refused[id] {
			g.log.Info("consensus: a member vouches for a peer this log does not know yet", "sender", id)
		}
		g.vouched[id] = exp
	}
}

// refuse records and logs (rate-limited per sender) a refused RPC.
func (g *gate) refuse(from peer.ID, what string) {
	g.refusals.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.refused) < maxGateEntries {
		g.refused[from] = true
	}
	now := time.Now()
	if last, ok := g.lastLog[from]; ok && now.Sub(last) < refusalLogEvery {
		g.suppressed[from]++
		return
	}
	if len(g.lastLog) >= maxGateEntries {
		clear(g.lastLog)
		clear(g.suppressed)
	}
	g.lastLog[from] = now
	g.log.Warn("consensus: raft rpc refused: the sender is not a member", "sender", from, "rpc", what, "refused_since_last_log", g.suppressed[from])
	delete(g.suppressed, from)
}

// takeRefused returns and forgets the senders refused since the last call
// that no member has vouched for.
func (g *gate) takeRefused() []peer.ID {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []peer.ID
	for id := range g.refused {
		if _, ok := g.vouched[id]; !ok {
			out = append(out, id)
		}
	}
	clear(g.refused)
	return out
}
