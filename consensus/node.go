package consensus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Protocol IDs of the consensus layer's request/response streams. Raft's
// own traffic uses go-libp2p-raft's protocol (/raft/1.0.0/rpc), served by
// a transport that admits only members (gate.go, transport.go).
const (
	ProtoPropose    = "/coopgrid/consensus/propose/1.0.0"
	ProtoMembership = "/coopgrid/consensus/membership/1.0.0"
	ProtoReadIndex  = "/coopgrid/consensus/readindex/1.0.0"
)

// Files inside Config.DataDir.
const (
	RaftDBFile  = "raft.db"
	SnapshotDir = "snapshots"
)

// Node is one peer's member of the federation's Raft group: the replicated
// ledger, the forwarding of writes and reads to the leader, membership, and
// the notifications (leadership, applied commands) the leader's duties run
// from.
type Node struct {
	cfg  Config
	host *p2p.Host
	self peer.ID
	// selfID is self's Raft server ID (its text form, encoded once).
	selfID raft.ServerID
	log    *slog.Logger

	fsm   *fsm
	hub   *hub
	raft  *raft.Raft
	trans *raft.NetworkTransport
	// paced is trans as Raft uses it: no pipeline, RPCs to non-voters
	// paced (pacing.go).
	paced *pacedTransport
	// heartbeats is paced with Raft's heartbeat handler guarded against
	// running after Shutdown (heartbeatguard.go).
	heartbeats *heartbeatGuard
	// gate admits the senders of Raft RPCs (gate.go).
	gate  *gate
	store *raftboltdb.BoltStore
	logs  raft.LogStore
	snaps *raft.FileSnapshotStore

	notifyCh chan bool
	// forwardSlots is a semaphore bounding concurrent forwarded proposals.
	forwardSlots chan struct{}
	kickCh       chan struct{}
	obsCh        chan raft.Observation
	observer     *raft.Observer

	// term says whether this leadership's barrier has passed (dryrun.go).
	term leadTerm

	// memberMu serialises the configuration changes this node makes as
	// leader, so that the voter count it decides on is current.
	memberMu sync.Mutex
	// dialing holds the peers a background reconnect is in flight for.
	dialMu  sync.Mutex
	dialing map[peer.ID]bool
	// pilot runs raft-autopilot while this node leads (voters.go).
	pilot *pilot
	// joins are the peers this leader admitted that are catching up
	// (joinpace.go).
	joins catchingUp
	// starve records when the host was last starved of CPU, as pressure
	// reads it (starve.go).
	starve   starvation
	pressure Pressure
	// leaderless tells how long no leader has been known (quorum.go).
	leaderless *leaderlessSince
	// outState says whether the leader took this node out (takenout.go).
	outState takenOut
	// pacer takes the snapshots that bound a restart's replay
	// (snapshotpace.go).
	pacer *snapshotPacer
	// loss hastens the election when the leader disconnects
	// (leaderloss.go).
	loss *leaderLoss

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error
}

// New opens (or creates) the node's Raft state in cfg.DataDir and starts
// Raft over h. A node with no state waits: call Bootstrap for the first
// peer of a federation or Join for any other. A node with state resumes:
// its snapshot is restored, the log after it is replayed as the commit
// index becomes known, and it reconnects to the members it knows.
//
// The caller owns h: Shutdown does not close it. opts replace
// dependencies New otherwise takes from the host (WithPressure).
func New(cfg Config, h *p2p.Host, opts ...Option) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("consensus: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("consensus: data dir: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		host:     h,
		self:     h.ID(),
		selfID:   raft.ServerID(h.ID().String()),
		log:      cfg.Logger.With("peer", shortID(h.ID())),
		hub:      newHub(),
		notifyCh: make(chan bool, 8),
		// Sized after withDefaults, so MaxForwarding is positive.
		forwardSlots: make(chan struct{}, cfg.MaxForwarding),
		kickCh:       make(chan struct{}, 1),
		obsCh:        make(chan raft.Observation, 64),
		dialing:      map[peer.ID]bool{},
		leaderless:   newLeaderlessSince(time.Now()),
		loss:         newLeaderLoss(),
		pressure:     HostPressure{},
	}
	for _, o := range opts {
		o(n)
	}
	n.fsm = newFSM(cfg.CheckInvariants, n.log)
	n.fsm.afterApply = n.afterApply
	n.fsm.afterRestore = n.afterRestore
	// A committed configuration change may change this peer's suffrage:
	// adjust the Raft timeouts now, not at the next tick (pacing.go).
	n.fsm.afterConfiguration = n.kick

	hlog := newRaftLogger(n.log)
	var err error
	opened := time.Now()
	n.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, RaftDBFile), NoSync: cfg.NoSync})
	if err != nil {
		return nil, fmt.Errorf("consensus: open %s: %w", RaftDBFile, err)
	}
	var (
		logStore    raft.LogStore    = n.store
		stableStore raft.StableStore = n.store
	)
	if cfg.StoreDelay != nil || cfg.storeFail != nil {
		fs := &faultyStore{logs: n.store, stable: n.store, delay: cfg.StoreDelay, fail: cfg.storeFail}
		logStore, stableStore = fs, fs
	}
	n.logs, err = raft.NewLogCache(cfg.LogCacheSize, logStore)
	if err != nil {
		n.store.Close()
		return nil, fmt.Errorf("consensus: log cache: %w", err)
	}
	// NewFileSnapshotStore creates DataDir/snapshots.
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, hlog.Named("snapshots"))
	if err != nil {
		n.store.Close()
		return nil, fmt.Errorf("consensus: snapshot store: %w", err)
	}
	n.gate = newGate(n.self, n.log)
	n.trans, err = newTransport(h.Host, n.gate, cfg.TransportTimeout)
	if err != nil {
		n.store.Close()
		return nil, fmt.Errorf("consensus: libp2p transport: %w", err)
	}

	rc := raft.DefaultConfig()
	rc.LocalID = n.selfID
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.BatchApplyCh = true
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.ShutdownOnRemove = true
	rc.NotifyCh = n.notifyCh
	rc.Logger = hlog
	rc.NoLegacyTelemetry = true
	if err := raft.ValidateConfig(rc); err != nil {
		n.trans.Close()
		n.store.Close()
		return nil, fmt.Errorf("consensus: raft config: %w", err)
	}
	n.paced = newPacedTransport(noPipeline{n.trans}, cfg.HeartbeatTimeout, n.gate.configuration)
	n.paced.lease = cfg.LeaderLeaseTimeout
	// The leader's new entries and commits end the paced waits (pacing.go).
	n.fsm.afterBatch = n.paced.announce
	n.paced.leaderCommit = n.commitAsLeader
	n.paced.leaderLog, n.paced.maxAppend = n.leaderLog, rc.MaxAppendEntries
	n.fsm.catchUp = n.startingReplay(opened)
	started := time.Now()
	n.heartbeats = &heartbeatGuard{pacedTransport: n.paced}
	n.raft, err = raft.NewRaft(rc, n.fsm, newsLogStore{n.logs, n.paced.announce}, stableStore, n.snaps, n.heartbeats)
	if err != nil {
		n.trans.Close()
		n.store.Close()
		return nil, fmt.Errorf("consensus: start raft: %w", err)
	}
	// NewRaft restores the newest snapshot and reads the log after it for
	// configuration entries; the replay of its commands comes later, once
	// the commit index is known (snapshotpace.go).
	n.log.Info("consensus: raft started", "stores_took", started.Sub(opened).Round(time.Millisecond), "restore_took", time.Since(started).Round(time.Millisecond), "snapshot_index", n.fsm.appliedIndex())
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.PeerObservation)
		return ok
	})
	n.raft.RegisterObserver(n.observer)
	n.gate.raft.Store(n.raft)

	n.ctx, n.cancel = context.WithCancel(context.Background())
	h.Handle(ProtoPropose, n.handlePropose)
	h.Handle(ProtoMembership, n.handleMembership)
	h.Handle(ProtoReadIndex, n.handleReadIndex)

	n.startAutopilot() // before watchLeadership, which tells it of changes
	n.wg.Add(3)
	go n.watchLeadership()
	go n.maintain()
	go n.watchLeaderLoss()
	n.wg.Add(1)
	go n.watchStarvation()
	n.startSnapshotPacer()
	// A restarted peer dials the members it knows right away rather than
	// at the first maintenance tick.
	n.kick()
	return n, nil
}

func shortID(id peer.ID) string {
	s := id.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

// ID is this node's peer ID, which is also its Raft server ID.
func (n *Node) ID() peer.ID { return n.self }

// Host returns the libp2p host the node runs on.
func (n *Node) Host() *p2p.Host { return n.host }

// Raft exposes the underlying raft.Raft for metrics and diagnostics. Do not
// change the configuration through it: use Join, Leave and RemovePeer.
func (n *Node) Raft() *raft.Raft { return n.raft }

// HasState reports whether the data directory holds Raft state (this peer
// bootstrapped or joined before).
func (n *Node) HasState() (bool, error) {
	return raft.HasExistingState(n.logs, n.store, n.snaps)
}

// Bootstrap makes this node the single voter of a new cluster. It does
// nothing if the node already has state, so it is safe on every start of
// the first peer.
func (n *Node) Bootstrap() error {
	has, err := n.HasState()
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if has {
		return nil
	}
	f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter,
		ID:       raft.ServerID(n.self.String()),
		Address:  raft.ServerAddress(n.self.String()),
	}}})
	if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// Shutdown stops Raft, the node's background work and its handlers, and
// closes the stores. It does not close the host. Safe to call twice.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() {
		n.host.RemoveStreamHandler(ProtoPropose)
		n.host.RemoveStreamHandler(ProtoMembership)
		n.host.RemoveStreamHandler(ProtoReadIndex)
		n.cancel()
		// The transport closes first: hashicorp/raft runs a heartbeat on
		// the connection's goroutine, outside what Shutdown waits for, and
		// one that raises the term after the stores are closed panics
		// ("failed to save current term: database not open",
		// hashicorp/raft#717). Closed first, no new RPC arrives; a
		// heartbeat already in flight is waited for, and any later one
		// refused, before the stores close (heartbeatguard.go). Raft
		// sends nothing it needs to shut down.
		n.paced.stop()
		terr := n.trans.Close()
		err := n.raft.Shutdown().Error()
		n.heartbeats.close()
		n.raft.DeregisterObserver(n.observer)
		// Unblock watchLeadership, which reads notifyCh until cancelled.
		n.wg.Wait()
		n.hub.closeAll()
		if terr != nil && err == nil {
			err = terr
		}
		if cerr := n.store.Close(); cerr != nil && err == nil {
			err = cerr
		}
		n.shutdownErr = err
	})
	return n.shutdownErr
}

// IsLeader reports whether this node is the leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader as this node knows it.
func (n *Node) Leader() (peer.ID, bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	p, err := peer.Decode(string(id))
	if err != nil {
		return "", false
	}
	return p, true
}

// WaitLeader waits until a leader is known, up to the context's deadline or
// Config.LeaderWaitTimeout. Once no leader has been known for
// LeaderWaitTimeout, it fails with CodeNoQuorum (quorum.go), at once.
func (n *Node) WaitLeader(ctx context.Context) (peer.ID, error) {
	ctx, cancel := n.withTimeout(ctx, n.cfg.LeaderWaitTimeout)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, ok := n.Leader(); ok {
			return id, nil
		}
		if n.quorumLost() {
			return "", n.noQuorumError()
		}
		select {
		case <-ctx.Done():
			return "", errorf(CodeNoLeader, "no leader known: %v", ctx.Err())
		case <-n.ctx.Done():
			return "", errorf(CodeShutdown, "node shut down")
		case <-t.C:
		}
	}
}

// withTimeout bounds ctx by d unless it already has a deadline.
func (n *Node) withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// Member is one server of the Raft configuration.
type Member struct {
	ID     peer.ID
	Voter  bool
	Leader bool
	// Addrs are the addresses this node knows for the member.
	Addrs []ma.Multiaddr
}

// Members returns the Raft configuration as this node knows it (on a
// follower it may lag the leader's by a heartbeat).
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftError(err, "configuration", CodeMembership)
	}
	leader, _ := n.Leader()
	var out []Member
	for _, s := range f.Configuration().Servers {
		id, err := peer.Decode(string(s.ID))
		if err != nil {
			continue
		}
		m := Member{ID: id, Voter: s.Suffrage == raft.Voter, Leader: id == leader}
		if id == n.self {
			m.Addrs = n.host.Addrs()
		} else {
			m.Addrs = n.host.Peerstore().Addrs(id)
		}
		out = append(out, m)
	}
	return out, nil
}

// MemberCount is the number of members in the configuration this node
// knows (0 when it knows none): Members without decoding every ID.
func (n *Node) MemberCount() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	return len(f.Configuration().Servers)
}

// View runs fn on the local ledger under the read lock: a possibly stale
// read (a follower may be behind the leader). fn must not keep l or anything
// reachable from it that is not a copy (the ledger's accessors return
// copies), and must not propose: the state machine waits for the lock.
func (n *Node) View(fn func(l *ledger.Ledger)) { n.fsm.view(fn) }

// Hash returns the ledger's state hash and the applied index it belongs to.
func (n *Node) Hash() (hash string, index uint64) {
	n.fsm.view(func(l *ledger.Ledger) { hash, index = l.Hash(), l.AppliedIndex() })
	return hash, index
}

// WaitApplied blocks until the local ledger has applied index idx, or ctx
// ends. It sleeps on the FSM's notification (no polling): every applied
// batch of entries and every restore wakes it.
func (n *Node) WaitApplied(ctx context.Context, idx uint64) error {
	return n.fsm.waitApplied(ctx, idx)
}

// AppliedIndex is the last log index the local ledger applied.
func (n *Node) AppliedIndex() uint64 { return n.fsm.appliedIndex() }

// InvariantError returns the first ledger invariant violation seen after an
// applied entry, when Config.CheckInvariants is on; nil otherwise.
func (n *Node) InvariantError() error { return n.fsm.invariantError() }

// Halted says why this node stopped applying the log (an entry of a newer
// command version than its ledger applies; fsm.halt), nil while it applies.
func (n *Node) Halted() error { return n.fsm.haltedError() }

// Snapshot takes a Raft snapshot now (and compacts the log behind it).
func (n *Node) Snapshot() error {
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// Subscribe delivers the committed changes to the machines of organisation
// org (all machines when org is ""): allocations to start and preemptions,
// cancellations and losses to stop. Subscribe first, then read the current
// allocations with View (ledger.Allocations) and apply events whose Index is
// above the view's applied index.
//
// A subscription made after Shutdown is returned already closed.
func (n *Node) Subscribe(org string) *Subscription {
	s := n.hub.subscribe(org)
	if n.ctx.Err() != nil {
		s.Close()
	}
	return s
}

// afterApply runs on the FSM goroutine after each applied command.
func (n *Node) afterApply(res *ledger.Result) {
	n.hub.publish(res)
	if n.cfg.OnApply != nil {
		n.cfg.OnApply(res)
	}
	n.noteApplied()
}

// afterRestore runs on the FSM goroutine after a snapshot replaced the
// state.
func (n *Node) afterRestore(index uint64) {
	n.hub.restored(index)
	if n.cfg.OnRestore != nil {
		n.cfg.OnRestore(index)
	}
}

// watchLeadership runs Config.OnLeadership when this node becomes leader
// and cancels it the moment leadership is lost.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	stop := func() {}
	defer func() { stop() }()
	for {
		select {
		case <-n.ctx.Done():
			return
		case leader := <-n.notifyCh:
			if leader && n.cfg.OnLeading != nil {
				n.cfg.OnLeading(true) // first: the new leader's replication starts now
			}
			n.pilot.leadershipChanged()
			stop()
			if !leader && n.cfg.OnLeading != nil {
				n.cfg.OnLeading(false) // after the leader's duties have returned
			}
			stop = func() {}
			gen := n.term.begin()
			n.joins.reset()
			if !leader {
				n.leaderless.leadEnded(time.Now())
				n.log.Info("consensus: lost leadership")
				continue
			}
			if err := n.fsm.haltedError(); err != nil {
				// A replica that stopped applying cannot check proposals
				// or schedule: hand leadership to an up-to-date voter.
				n.log.Error("consensus: became leader with the log's application stopped; transferring leadership", "err", err)
				n.raft.LeadershipTransfer()
				continue
			}
			n.log.Info("consensus: became leader")
			n.kick()
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.catchUp(n.ctx, gen)
			}()
			if n.cfg.OnLeadership != nil {
				stop = n.startLeadership()
			}
		}
	}
}

// startLeadership runs Config.OnLeadership in the background and returns
// the function that cancels it and waits until it has returned.
func (n *Node) startLeadership() (stop func()) {
	ctx, cancel := context.WithCancel(n.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.cfg.OnLeadership(ctx, n)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (n *Node) kick() {
	select {
	case n.kickCh <- struct{}{}:
	default:
	}
}

// maintain keeps the node connected to the members it knows and, on the
// leader, promotes non-voters while voters are missing.
func (n *Node) maintain() {
	defer n.wg.Done()
	// On the wall-clock grid of the interval (p2p.UntilGrid): the other
	// periodic chores of an idle peer end their waits there too, so they
	// share its wake-ups.
	t := time.NewTimer(p2p.UntilGrid(time.Now(), n.cfg.MaintenanceInterval))
	defer t.Stop()
	voting, votingTold := false, false // what OnVoting was last told
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			t.Reset(p2p.UntilGrid(time.Now(), n.cfg.MaintenanceInterval))
		case <-n.kickCh:
		case o := <-n.obsCh:
			if po, ok := o.Data.(raft.PeerObservation); ok && po.Removed && po.Peer.ID == n.selfID {
				n.log.Info("consensus: removed from the cluster")
			}
		}
		n.adjustTiming()
		if n.cfg.OnVoting != nil {
			if v := n.isVoter(); !votingTold || v != voting {
				voting, votingTold = v, true
				n.cfg.OnVoting(v)
			}
		}
		n.reconnect()
		n.vouchRound(n.ctx)
		if n.IsLeader() {
			if err := n.promote(n.ctx); err != nil {
				n.log.Warn("consensus: promote non-voter", "err", err)
			}
		} else {
			n.checkTakenOut(n.ctx)
		}
	}
}

// reconnect dials, in the background, the members this node keeps
// connections to (meshPeers) and is not connected to. Raft dials by peer
// ID too, but a member that restarted on a new port is only found through
// its known addresses or its own dial.
func (n *Node) reconnect() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	keep := meshPeers(f.Configuration(), n.selfID, meshRing)
	for _, s := range f.Configuration().Servers {
		id, err := peer.Decode(string(s.ID))
		if err != nil || id == n.self || !keep[s.ID] {
			continue
		}
		if n.host.Network().Connectedness(id) == network.Connected {
			continue
		}
		if len(n.host.Peerstore().Addrs(id)) == 0 {
			continue
		}
		n.dialMu.Lock()
		busy := n.dialing[id]
		n.dialing[id] = true
		n.dialMu.Unlock()
		if busy {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer func() {
				n.dialMu.Lock()
				delete(n.dialing, id)
				n.dialMu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.TransportTimeout)
			defer cancel()
			_ = n.host.Host.Connect(ctx, peer.AddrInfo{ID: id})
		}()
	}
}

// commitAsLeader is this peer's commit index and whether it leads in term
// (pacing.go). The index is read first, the leadership after.
func (n *Node) commitAsLeader(term uint64) (uint64, bool) {
	r := n.gate.raft.Load()
	if r == nil {
		return 0, false
	}
	c := r.CommitIndex()
	if r.State() != raft.Leader || r.CurrentTerm() != term {
		return 0, false
	}
	return c, true
}
