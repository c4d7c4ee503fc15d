package leader

import (
	"context"
	"errors"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// forgetCommitTimeout bounds the wait for one forget_tasks to commit and
// apply here, when the retention interval is shorter.
const forgetCommitTimeout = 10 * time.Second

// forgetFinished is the leader's retention duty (issue 17): every
// RetentionInterval it asks the ledger which terminal tasks the
// federation's retention rule lets go (ledger.Forgettable, earliest ended
// first) and appends forget_tasks naming them, at most
// ledger.MaxForgetPerCommand an entry, until none are left. A federation
// without a retention rule gets nothing. The command acts for the leader's
// organisation and goes through the ledger's dry run first, so that one
// the ledger would refuse never reaches the log.
//
// It waits for a barrier of its own term before its first forget, as the
// scheduler does: a leader that restarted (or was just elected) replays
// the entries committed before it, and a forget_tasks computed from a
// state half-way through that replay named tasks a later replayed entry
// had already forgotten, refused by every peer as unknown_task (a wasted
// entry after every restart). It waits for one again after a forget whose
// outcome it did not see (the commit timed out): that entry may still
// apply, and the next forget must be computed from a state that holds it.
func (l *Leader) forgetFinished(ctx context.Context, r Replica) {
	if l.cfg.Org == "" {
		return
	}
	t := time.NewTicker(l.cfg.RetentionInterval)
	defer t.Stop()
	settled := false
	for {
		if !settled {
			if !l.firstBarrier(ctx, r) {
				return
			}
			settled = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil && r.IsLeader() {
			more, unsure := l.forgetOnce(ctx, r)
			settled = settled && !unsure
			if !more || unsure {
				break
			}
		}
	}
}

// forgetOnce appends one forget_tasks; it says whether a full one was
// applied (more may be waiting), and whether one was appended whose
// outcome is unknown (unsure). The dry run judges the signed command, as
// every peer will.
func (l *Leader) forgetOnce(ctx context.Context, r Replica) (more, unsure bool) {
	nowMs := l.cfg.Now().UnixMilli()
	var ids []string
	r.View(func(lg *ledger.Ledger) { ids = lg.Forgettable(nowMs, ledger.MaxForgetPerCommand) })
	if len(ids) == 0 {
		return false, false
	}
	c := ledger.Command{Org: l.cfg.Org, Peer: l.cfg.Self.String(), AtMs: nowMs,
		ForgetTasks: &ledger.ForgetTasks{Tasks: ids}}
	data, err := l.encode(c)
	if err != nil {
		l.log.Error("leader: encode forget_tasks", "err", err)
		return false, false
	}
	signed, err := ledger.DecodeCommand(data)
	if err != nil {
		l.log.Error("leader: decode its own forget_tasks", "err", err)
		return false, false
	}
	var refused *ledger.Error
	r.View(func(lg *ledger.Ledger) { refused = lg.Check(&signed) })
	if refused != nil {
		l.log.Warn("leader: forget_tasks refused by the dry run", "tasks", len(ids), "err", refused)
		return false, false
	}
	actx, cancel := context.WithTimeout(ctx, max(l.cfg.RetentionInterval, forgetCommitTimeout))
	defer cancel()
	res, err := l.appendOwn(actx, r, data)
	switch {
	case errors.Is(err, errVersionHeld):
		return false, false
	case err != nil:
		if ctx.Err() == nil {
			l.log.Warn("leader: commit forget_tasks", "tasks", len(ids), "err", err)
		}
		// Appended or not, it may still apply: the next forget waits for
		// a barrier.
		return false, true
	case res.Err != nil:
		l.log.Warn("leader: forget_tasks rejected", "index", res.Index, "err", res.Err)
		return false, false
	}
	l.log.Debug("leader: forgot finished tasks", "index", res.Index, "tasks", len(res.Forgotten))
	return len(ids) == ledger.MaxForgetPerCommand, false
}
