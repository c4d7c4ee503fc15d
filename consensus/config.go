package consensus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Config configures a Node. Start from DefaultConfig (LAN timeouts) or
// WANConfig and override fields; zero fields take the defaults.
type Config struct {
	// Signer signs the commands this node authors itself (the leader's
	// admission records, a member's removal votes) as this peer, like every
	// command the node proposes (ledger/sign.go). Nil: they go unsigned,
	// which only a federation whose organisations do not sign accepts.
	Signer ledger.Signer

	// DataDir holds raft.db (the bolt log and stable store) and
	// snapshots/. Required.
	DataDir string

	// Raft timing. The defaults are LAN values: a follower notices a dead
	// leader after HeartbeatTimeout to 2×HeartbeatTimeout, or after
	// LeaderLeaseTimeout when the leader's connection closed (its process
	// ended: leaderloss.go), and an election takes a round trip, so
	// failover stays well under 1.5 s. The leader sends each voter a
	// heartbeat every HeartbeatTimeout/4, at most LeaderLeaseTimeout/3
	// (VoterHeartbeatInterval). Raise all three together for WAN
	// federations (see WANConfig).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long the leader waits before sending an empty
	// AppendEntries to advance followers' commit index.
	CommitTimeout time.Duration
	// TransportTimeout bounds one Raft RPC over libp2p (snapshots scale it).
	TransportTimeout time.Duration
	// MaxAppendEntries bounds the entries in one AppendEntries RPC and in one
	// FSM batch.
	MaxAppendEntries int

	// Snapshots: taken every SnapshotInterval when at least
	// SnapshotThreshold entries were committed since the last one;
	// TrailingLogs entries stay in the log after a snapshot so that a
	// slightly lagging follower catches up from the log.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotRetain    int
	// SnapshotAfterEntries and SnapshotAfterBytes bound what a restart
	// after a crash replays: a snapshot is taken as soon as either many
	// command entries, or entries of that many bytes, were applied since
	// the last one (snapshotpace.go; 0: the defaults there). A clean stop
	// snapshots anyway (SnapshotAtStop).
	SnapshotAfterEntries uint64
	SnapshotAfterBytes   uint64
	// LogCacheSize is the number of recent entries kept in memory in front
	// of bolt.
	LogCacheSize int
	// NoSync skips fsync in bolt. Only for throwaway clusters: a crash can
	// lose acknowledged entries.
	NoSync bool

	// MaxVoters: a joining peer becomes a voter while the configuration has
	// fewer voters than this, a non-voter after. A non-voter is promoted when
	// a voter goes. Odd values avoid split votes; 5 tolerates 2 failures.
	MaxVoters int
	// MaxCatchingUp bounds the peers the leader has admitted that are
	// still catching up with the log; a joiner beyond it is answered
	// CodeAdmissionPaced and asks again (joinpace.go). 0 takes the
	// default; negative admits every joiner at once. CatchUpTimeout is how
	// long an admitted peer counts as catching up at most.
	MaxCatchingUp  int
	CatchUpTimeout time.Duration
	// MaintenanceInterval paces the background upkeep: reconnecting to
	// members, promoting non-voters, taking out the peers the ledger
	// removed, and the leader's autopilot rounds (voters.go).
	MaintenanceInterval time.Duration
	// DeadServerTimeout: a voter the leader has not reached for this long
	// is demoted to non-voter, while the voters left still form a quorum
	// of at least three (raft-autopilot's dead-server rule). It stays a
	// member and is promoted again once it answers.
	DeadServerTimeout time.Duration
	// RemoveDeadAfter: a non-voter (a demoted dead voter included) the
	// leader has not heard from for this long is taken out of the
	// configuration; 0 never. It comes back with an invitation naming it.
	RemoveDeadAfter time.Duration

	// OnVoting, when set, is told whether this node votes (a voter or the
	// leader) in the configuration it knows: once at start and at every
	// change, seen by the maintenance loop (within MaintenanceInterval).
	// It must not block. The peer's process takes one P from the first
	// call unless it leads or votes while busy (cmd/peer, docs/CONFIG.md).
	OnVoting func(voting bool)
	// OnLeading, when set, is told whether this node leads, at every
	// change, the moment Raft reports it (before OnLeadership starts or
	// after it was cancelled): a new leader is told before it replicates
	// its first entry. It runs on the goroutine that follows leadership and
	// must not block. The peer's process raises its GOMAXPROCS while it
	// leads (cmd/peer, docs/CONFIG.md).
	OnLeading func(leading bool)

	// ApplyTimeout bounds a proposal or membership change whose context has
	// no deadline.
	ApplyTimeout time.Duration
	// MaxForwarding bounds the proposals this node forwards to the leader
	// at once; more wait their turn here. The leader's libp2p resource
	// manager admits 64 concurrent inbound streams per protocol and peer by
	// default, so a follower must stay below that.
	MaxForwarding int
	// LeaderWaitTimeout bounds how long an operation waits for a leader to
	// be known (after a failover, for instance) when its context has no
	// earlier deadline.
	LeaderWaitTimeout time.Duration

	// CheckInvariants runs ledger.CheckInvariants after every applied entry
	// and records the first violation (see Node.InvariantError). It costs a
	// full state scan per entry: for tests and debugging.
	CheckInvariants bool

	// StoreDelay, when set, is called before every write to the Raft log
	// and stable store and the write waits that long: a slow disk, for
	// fault injection only (nil in production).
	StoreDelay func() time.Duration
	// storeFail, when set, fails every Raft log write while it returns
	// an error (a log store refusing writes, as on a full disk; tests
	// only).
	storeFail func() error
	// Logger defaults to slog.Default(). Raft's own log lines go to it too.
	Logger *slog.Logger

	// Admit, when set, decides whether a command may be appended: it is
	// called for every command proposed through this node (proposer is
	// then this node) and, on the leader, for every command a follower
	// forwards (proposer is the authenticated sender), after the command
	// was decoded and found to act as its proposer, and before anything is
	// appended. A refused command never reaches the log: Propose returns
	// Admit's error (a *p2p.Error keeps its code; any other error becomes
	// CodeForbidden). state is the local ledger under its read lock: Admit
	// must not keep it, call View or propose.
	Admit func(proposer peer.ID, c ledger.Command, state *ledger.Ledger) error
	// OnLeadership, when set, runs in its own goroutine each time this node
	// becomes leader. Its ctx is cancelled the moment leadership is lost
	// (or the node shuts down), and the node waits for it to return before
	// it handles the next change of leadership: the leader's duties never
	// overlap themselves.
	OnLeadership func(ctx context.Context, n *Node)
	// OnApply, when set, is called on the state machine's goroutine after
	// every applied command, in log order. It must not block (signal a
	// channel, do not propose).
	OnApply func(res *ledger.Result)
	// OnRestore, when set, is called on the state machine's goroutine
	// after a snapshot replaced the state (at start, or a follower far
	// behind), with the snapshot's index: what came before it is not
	// applied here one entry at a time. It must not block.
	OnRestore func(index uint64)
}

// DefaultConfig returns LAN defaults for a data directory.
func DefaultConfig(dataDir string) Config {
	return Config{
		DataDir:          dataDir,
		HeartbeatTimeout: 400 * time.Millisecond,
		ElectionTimeout:  400 * time.Millisecond,
		// The lease as long as Raft allows (the heartbeat timeout): a
		// leader on a busy host that heard from its voters 300-400 ms
		// ago stepped down, and the federation elected again
		// (docs/BENCHMARKS.md, "100 peers"). Fail-over does not depend
		// on it: the followers' heartbeat timeout does.
		LeaderLeaseTimeout:  400 * time.Millisecond,
		CommitTimeout:       20 * time.Millisecond,
		TransportTimeout:    2 * time.Second,
		MaxAppendEntries:    256,
		SnapshotInterval:    2 * time.Minute,
		SnapshotThreshold:   8192,
		TrailingLogs:        10240,
		SnapshotRetain:      2,
		LogCacheSize:        1024,
		MaxVoters:           5,
		MaxCatchingUp:       3,
		CatchUpTimeout:      time.Minute,
		MaintenanceInterval: 2 * time.Second,
		DeadServerTimeout:   30 * time.Second,
		ApplyTimeout:        10 * time.Second,
		LeaderWaitTimeout:   5 * time.Second,
		MaxForwarding:       32,
	}
}

// WANConfig returns defaults for peers spread over a wide-area network:
// timeouts several times the worst round trip, at the price of a slower
// failover (a few seconds).
func WANConfig(dataDir string) Config {
	c := DefaultConfig(dataDir)
	c.HeartbeatTimeout = 2 * time.Second
	c.ElectionTimeout = 2 * time.Second
	c.LeaderLeaseTimeout = 1500 * time.Millisecond
	c.CommitTimeout = 50 * time.Millisecond
	c.TransportTimeout = 10 * time.Second
	c.LeaderWaitTimeout = 20 * time.Second
	c.ApplyTimeout = 30 * time.Second
	c.DeadServerTimeout = 2 * time.Minute
	return c
}

func (c Config) withDefaults() Config {
	d := DefaultConfig(c.DataDir)
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setDur(&c.ElectionTimeout, d.ElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setDur(&c.CommitTimeout, d.CommitTimeout)
	setDur(&c.TransportTimeout, d.TransportTimeout)
	setDur(&c.SnapshotInterval, d.SnapshotInterval)
	setDur(&c.MaintenanceInterval, d.MaintenanceInterval)
	setDur(&c.DeadServerTimeout, d.DeadServerTimeout)
	setDur(&c.ApplyTimeout, d.ApplyTimeout)
	setDur(&c.LeaderWaitTimeout, d.LeaderWaitTimeout)
	setDur(&c.CatchUpTimeout, d.CatchUpTimeout)
	if c.MaxCatchingUp == 0 {
		c.MaxCatchingUp = d.MaxCatchingUp
	}
	if c.MaxAppendEntries <= 0 {
		c.MaxAppendEntries = d.MaxAppendEntries
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.SnapshotAfterEntries == 0 {
		c.SnapshotAfterEntries = defaultSnapshotAfterEntries
	}
	if c.SnapshotAfterBytes == 0 {
		c.SnapshotAfterBytes = defaultSnapshotAfterBytes
	}
	if c.SnapshotRetain <= 0 {
		c.SnapshotRetain = d.SnapshotRetain
	}
	if c.LogCacheSize <= 0 {
		c.LogCacheSize = d.LogCacheSize
	}
	if c.MaxForwarding <= 0 {
		c.MaxForwarding = d.MaxForwarding
	}
	if c.MaxVoters <= 0 {
		c.MaxVoters = d.MaxVoters
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.DataDir == "" {
		return errors.New("DataDir is required")
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return fmt.Errorf("LeaderLeaseTimeout %s exceeds HeartbeatTimeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return fmt.Errorf("ElectionTimeout %s is below HeartbeatTimeout %s", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.MaxAppendEntries > 1024 {
		return fmt.Errorf("MaxAppendEntries %d exceeds raft's limit of 1024", c.MaxAppendEntries)
	}
	return nil
}
