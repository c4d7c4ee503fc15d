package leader

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
	"github.com/libp2p/go-libp2p/core/peer"
)

// StateViewer reads the local replica of the ledger.
type StateViewer interface {
	// View runs fn on the ledger under its read lock; fn must not keep it
	// or propose.
	View(fn func(l *ledger.Ledger))
}

// Replica is what the leader's duties need from the replicated log
// (*consensus.Node implements it).
type Replica interface {
	StateViewer
	// IsLeader reports whether this peer leads right now.
	IsLeader() bool
	// Barrier waits until every entry committed before it is applied
	// locally.
	Barrier(ctx context.Context) error
	// AppendAsLeader commits an encoded command on this peer, which must
	// lead, without admission: the leader's own decisions.
	AppendAsLeader(ctx context.Context, data []byte) (ledger.Result, error)
	// Propose commits an encoded command through admission, forwarding it
	// if another peer leads by then.
	Propose(ctx context.Context, data []byte) (ledger.Result, error)
	// WaitApplied waits until the local ledger has applied index idx.
	WaitApplied(ctx context.Context, idx uint64) error
	// IsMember reports whether id is in the Raft configuration.
	IsMember(id peer.ID) bool
}

// Leader holds the leader's duties of one peer. It exists on every peer
// (admission runs on every proposal); the duties run only inside Establish,
// while the peer leads.
type Leader struct {
	cfg    Config
	log    *slog.Logger
	policy policy.Policy
	live   Liveness
	// wake is signalled (never blocking) by Applied when a command may give
	// the policy something new to decide.
	wake chan struct{}
	// expel is signalled by Applied after a membership decision.
	expel chan struct{}
	stats counters
	// ownVersion rate-limits the log of own commands the version rule
	// holds back (ownversion.go).
	ownVersion ownVersionLog
}

// New returns the leader's duties for one peer. live is the heartbeat
// tracker lost-machine detection reads (nil turns detection off).
func New(cfg Config, live Liveness) (*Leader, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("leader: %w", err)
	}
	pol, err := policy.New(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("leader: %w", err)
	}
	return &Leader{
		cfg:    cfg,
		log:    cfg.Logger,
		policy: pol,
		live:   live,
		wake:   make(chan struct{}, 1),
		expel:  make(chan struct{}, 1),
	}, nil
}

// Establish starts every leader duty and returns once ctx is cancelled
// (leadership lost, or shutdown) and every duty has stopped: the one place
// where they start and the one place where they stop. consensus runs it
// from Config.OnLeadership.
func (l *Leader) Establish(ctx context.Context, r Replica) {
	var wg sync.WaitGroup
	run := func(duty func(context.Context, Replica)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			duty(ctx, r)
		}()
	}
	if !l.cfg.DisableScheduler {
		run(l.schedule)
	}
	if l.live != nil && l.cfg.LostTimeout > 0 {
		run(l.detectLost)
	}
	run(l.expelMachines)
	run(l.forgetFinished)
	wg.Wait()
}

// Applied is consensus' apply hook (Config.OnApply): it wakes the
// scheduling pass when an applied command may change what the policy
// decides. It runs on the state machine's goroutine and never blocks.
func (l *Leader) Applied(res *ledger.Result) {
	if res.Kind == ledger.KindMembership && res.Applied() {
		select {
		case l.expel <- struct{}{}:
		default:
		}
	}
	if !ledger.WakesScheduler(res) {
		return
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// encode encodes a command the leader authors, signed by Config.Signer
// when there is one: decisions and machine_lost act for the leader's
// organisation, and every peer checks that its peer signed them.
func (l *Leader) encode(c ledger.Command) ([]byte, error) {
	if l.cfg.Signer == nil {
		return ledger.EncodeCommand(c)
	}
	return ledger.EncodeSigned(c, l.cfg.Signer)
}
