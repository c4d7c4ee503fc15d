package leader

import (
	"context"
	"errors"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// forgetFinished is the leader's retention duty (issue 17): every
// RetentionInterval it asks the ledger which terminal tasks the
// federation's retention rule lets go (ledger.Forgettable, earliest ended
// first) and appends forget_tasks naming them, at most
// ledger.MaxForgetPerCommand an entry, until none are left. A federation
// without a retention rule gets nothing. The command acts for the leader's
// organisation and goes through the ledger's dry run first, so that one
// the ledger would refuse never reaches the log.
func (l *Leader) forgetFinished(ctx context.Context, r Replica) {
	if l.cfg.Org == "" {
		return
	}
	t := time.NewTicker(l.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil && r.IsLeader() && l.forgetOnce(ctx, r) {
		}
	}
}

// forgetOnce appends one forget_tasks; it says whether a full one was
// applied (more may be waiting). The dry run judges the signed command,
// as every peer will.
func (l *Leader) forgetOnce(ctx context.Context, r Replica) bool {
	nowMs := l.cfg.Now().UnixMilli()
	var ids []string
	r.View(func(lg *ledger.Ledger) { ids = lg.Forgettable(nowMs, ledger.MaxForgetPerCommand) })
	if len(ids) == 0 {
		return false
	}
	c := ledger.Command{Org: l.cfg.Org, Peer: l.cfg.Self.String(), AtMs: nowMs,
		ForgetTasks: &ledger.ForgetTasks{Tasks: ids}}
	data, err := l.encode(c)
	if err != nil {
		l.log.Error("leader: encode forget_tasks", "err", err)
		return false
	}
	signed, err := ledger.DecodeCommand(data)
	if err != nil {
		l.log.Error("leader: decode its own forget_tasks", "err", err)
		return false
	}
	var refused *ledger.Error
	r.View(func(lg *ledger.Ledger) { refused = lg.Check(&signed) })
	if refused != nil {
		l.log.Warn("leader: forget_tasks refused by the dry run", "tasks", len(ids), "err", refused)
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RetentionInterval)
	defer cancel()
	res, err := l.appendOwn(ctx, r, data)
	switch {
	case err != nil:
		if ctx.Err() == nil && !errors.Is(err, errVersionHeld) {
			l.log.Warn("leader: commit forget_tasks", "tasks", len(ids), "err", err)
		}
		return false
	case res.Err != nil:
		l.log.Warn("leader: forget_tasks rejected", "index", res.Index, "err", res.Err)
		return false
	}
	l.log.Debug("leader: forgot finished tasks", "index", res.Index, "tasks", len(res.Forgotten))
	return len(ids) == ledger.MaxForgetPerCommand
}
