package consensus

import (
	"context"
	"sync/atomic"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
)

// The leader's dry run (issue 15): before it appends a proposal, the leader
// asks its ledger whether Apply would reject the command (ledger.Check); a
// command it would reject is answered with the ledger's verdict and never
// reaches the log. Rejected proposals used to be appended (15 rejected 4 MB
// proposals grew raft.db by 40-50 MB).
//
// The verdict is only as good as the state it is read from. A refusal is
// final, so the leader refuses only from a state that holds every entry a
// proposer could have seen committed:
//
//   - every entry of earlier terms: a new leader may know entries committed
//     by its predecessor without knowing they are committed. It refuses
//     nothing until a barrier of its own term has passed (caughtUp), which
//     it starts the moment it becomes leader; until then it appends as
//     before and Apply judges.
//   - every entry committed when the proposal arrived: Raft hands committed
//     entries to the state machine asynchronously, so the leader waits until
//     its FSM has applied up to the commit index (waitCommitted).
//
// Passing the dry run proves nothing: the entries ahead of the command in
// the log may change the state before it applies, and Apply checks again.

// maxPendingScan bounds the log entries waitCommitted inspects for commands
// not yet applied; a larger gap is waited for as a whole.
const maxPendingScan = 1024

// leadTerm tracks whether this leadership's barrier has passed. gen counts
// leadership changes so that a barrier of an earlier leadership that
// returns late marks nothing.
type leadTerm struct {
	gen      atomic.Uint64
	caughtUp atomic.Uint64 // the gen whose barrier passed
}

// begin starts a new leadership (or the loss of one) and returns its gen.
func (t *leadTerm) begin() uint64 { return t.gen.Add(1) }

// markCaughtUp records that gen's barrier passed. A late call for an older
// gen can only turn the dry run off for the current leadership (safe: the
// log judges then).
func (t *leadTerm) markCaughtUp(gen uint64) { t.caughtUp.Store(gen) }

func (t *leadTerm) isCaughtUp() bool {
	g := t.gen.Load()
	return g != 0 && t.caughtUp.Load() == g
}

// catchUp passes a barrier for leadership gen and, if this node still
// leads that leadership, records that its state holds every earlier entry.
func (n *Node) catchUp(ctx context.Context, gen uint64) {
	if err := waitFuture(ctx, n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		n.log.Debug("consensus: leadership barrier", "err", err)
		return
	}
	if n.term.gen.Load() == gen && n.IsLeader() {
		n.term.markCaughtUp(gen)
	}
}

// dryRun asks the ledger whether it would reject c. refused is true with
// the verdict in res (the ledger's code and message, Index the applied index
// of the state that judged) when it would. It judges only from a caught-up
// state; when it cannot know (leadership too young, the state machine not
// caught up before ctx ends) it passes the command on to the log.
func (n *Node) dryRun(ctx context.Context, c *ledger.Command) (res ledger.Result, refused bool) {
	if !n.term.isCaughtUp() || !n.IsLeader() || !n.waitCommitted(ctx) {
		return ledger.Result{}, false
	}
	n.fsm.view(func(l *ledger.Ledger) {
		if err := l.Check(c); err != nil {
			res = ledger.Result{Index: l.AppliedIndex(), Kind: c.Kind(), Err: err, NotAppended: true}
			refused = true
		}
	})
	return res, refused
}

// waitCommitted waits until the FSM has applied every command entry
// committed now. Entries the FSM never sees (no-ops, barriers) are skipped
// by looking at the log between what it saw and the commit index.
func (n *Node) waitCommitted(ctx context.Context) bool {
	target := n.raft.CommitIndex()
	for {
		seen, wake := n.fsm.seenIndex()
		if seen >= target || !n.commandsBetween(seen, target) {
			return true
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// commandsBetween reports whether the log holds an entry for the FSM
// (a command or a configuration) in (from, to]. An entry no longer in the
// log was compacted into a snapshot the FSM holds.
func (n *Node) commandsBetween(from, to uint64) bool {
	if to-from > maxPendingScan {
		return true
	}
	var e raft.Log
	for i := from + 1; i <= to; i++ {
		if err := n.logs.GetLog(i, &e); err != nil {
			continue
		}
		if e.Type == raft.LogCommand || e.Type == raft.LogConfiguration {
			return true
		}
	}
	return false
}
