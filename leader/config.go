package leader

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/policy"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Signer signs an encoded command as this peer (a libp2p crypto.PrivKey
// is one; ledger.EncodeSigned uses it).
type Signer interface {
	Sign(data []byte) ([]byte, error)
}

// Config configures a Leader. Start from DefaultConfig; zero fields take
// its defaults, except ScheduleDebounce and CheckpointBlockSeconds, where 0
// means none.
type Config struct {
	// Self is this peer (the Raft server ID). Its decisions act as it, and
	// admission lets only it declare another organisation's machine lost.
	// Required.
	Self peer.ID
	// Org is the organisation this peer acts for: lost-machine
	// declarations act for it.
	Org string
	// Signer signs the commands the leader authors (decisions,
	// machine_lost) as Self: node passes the host's identity key
	// (p2p.Host.PrivateKey). Once Org signs, every peer refuses its
	// unsigned commands (ledger/sign.go). nil leaves them unsigned, for
	// tests and tools of a federation that does not sign.
	Signer Signer

	// Policy is the scheduling policy the leader runs (policy.Names()) on
	// a federation whose leader decides. On one whose peers compute the
	// passes (ledger.Scheduling in its rules), the federation's settings
	// apply and Policy and CheckpointBlockSeconds are not used.
	Policy string
	// ScheduleInterval is the leader's tick: a pass runs at least this often
	// while tasks wait, besides the passes woken by state changes.
	ScheduleInterval time.Duration
	// ScheduleDebounce delays a woken pass a little so that a burst of
	// changes (a job of many tasks, several completions) makes one pass and
	// one log entry.
	ScheduleDebounce time.Duration
	// CheckpointBlockSeconds is policy.State.CheckpointBlockSeconds (the
	// dissertation uses 5 minutes; 0 means no checkpointing).
	CheckpointBlockSeconds float64
	// DisableScheduler turns the scheduling pass off (for tools and tests
	// that propose decisions themselves).
	DisableScheduler bool
	// BarrierRetry paces the new leader's attempts to pass its first
	// barrier (node sets it to Raft's heartbeat timeout).
	BarrierRetry time.Duration

	// LostTimeout is how long a machine that is up may stay silent before
	// the leader declares it lost. 0 turns lost-machine detection off.
	LostTimeout time.Duration
	// Serving says whether this peer is ready and not stopping; lost-machine
	// detection acts only while it holds and restarts its clock when it
	// holds again. nil means always.
	Serving func() bool

	// RetentionInterval paces the retention duty (retain.go): how often
	// the leader looks for finished tasks the federation's retention rule
	// lets go (default 10s).
	RetentionInterval time.Duration

	// Now is the clock that stamps the leader's commands (default time.Now).
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Observer, when set, receives the timing of the scheduling passes.
	Observer PassObserver

	// Members lists the Raft configuration (consensus.Node.Members) and
	// Agents what each member announced (p2p.Host): admission refuses a
	// command of a version some member does not apply (admit.go). nil
	// Members checks nobody (tests and tools); nil Agents takes every
	// member for version 1.
	Members func() ([]consensus.Member, error)
	Agents  Agents
}

// DefaultConfig returns the defaults (those of config.yaml's consensus
// section).
func DefaultConfig() Config {
	return Config{
		Policy:                 "ehosep",
		ScheduleInterval:       5 * time.Second,
		ScheduleDebounce:       10 * time.Millisecond,
		CheckpointBlockSeconds: 300,
		BarrierRetry:           400 * time.Millisecond,
		RetentionInterval:      10 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if c.ScheduleInterval <= 0 {
		c.ScheduleInterval = d.ScheduleInterval
	}
	if c.ScheduleDebounce < 0 {
		c.ScheduleDebounce = 0
	}
	if c.CheckpointBlockSeconds < 0 {
		c.CheckpointBlockSeconds = 0
	}
	if c.BarrierRetry <= 0 {
		c.BarrierRetry = d.BarrierRetry
	}
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = d.RetentionInterval
	}
	if c.LostTimeout < 0 {
		c.LostTimeout = 0
	}
	if c.Serving == nil {
		c.Serving = func() bool { return true }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.Self == "" {
		return errors.New("Self is required")
	}
	if _, err := policy.New(c.Policy); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	return nil
}
