package consensus

import (
	"context"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// runScheduler is the leader's scheduling loop. It runs from the moment
// this node becomes leader until ctx is cancelled (leadership lost or
// shutdown). Each pass takes a view of the ledger, runs the policy and
// commits all decisions of the pass as one log entry.
func (n *Node) runScheduler(ctx context.Context) {
	// Entries committed by earlier leaders may not be applied here yet; a
	// barrier makes the first view complete.
	for {
		err := waitFuture(ctx, n.raft.Barrier(n.cfg.ApplyTimeout))
		if err == nil {
			break
		}
		if ctx.Err() != nil || !n.IsLeader() {
			return
		}
		n.log.Warn("consensus: scheduler barrier", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.cfg.HeartbeatTimeout):
		}
	}
	tick := time.NewTicker(n.cfg.ScheduleInterval)
	defer tick.Stop()
	for {
		n.schedulePass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-n.wakeCh:
			if n.cfg.ScheduleDebounce > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(n.cfg.ScheduleDebounce):
				}
			}
			// Changes that arrived during the debounce are in this pass.
			select {
			case <-n.wakeCh:
			default:
			}
		}
	}
}

// schedulePass runs one pass. It proposes nothing when the leader's peer
// has no organisation (decisions act for an organisation), when nothing is
// queued, or when the policy decides nothing.
func (n *Node) schedulePass(ctx context.Context) {
	if ctx.Err() != nil || !n.IsLeader() {
		return
	}
	data, count, ok := n.plan()
	if !ok || count == 0 {
		return
	}
	// Leadership may have gone while the policy ran; raft would refuse the
	// entry anyway, this just skips the attempt.
	if ctx.Err() != nil {
		return
	}
	res, err := n.applyLocal(ctx, data)
	if err != nil {
		if ctx.Err() == nil {
			n.sched.errors.Add(1)
			n.log.Warn("consensus: commit decisions", "decisions", count, "err", err)
		}
		return
	}
	accepted := res.AcceptedDecisions()
	n.sched.proposed.Add(uint64(count))
	n.sched.accepted.Add(uint64(accepted))
	n.sched.rejected.Add(uint64(count - accepted))
	if res.Err != nil {
		n.log.Warn("consensus: decisions rejected", "index", res.Index, "err", res.Err)
	} else if accepted < count {
		n.log.Info("consensus: stale decisions rejected", "index", res.Index, "accepted", accepted, "decisions", count)
	}
}

// plan runs the policy on the current view and returns the encoded
// decisions command and the number of decisions (ok false when there is
// nothing to propose).
func (n *Node) plan() (data []byte, count int, ok bool) {
	nowMs := n.cfg.Now().UnixMilli()
	var (
		st  *policy.State
		vm  *ledger.ViewMap
		org string
	)
	n.fsm.view(func(l *ledger.Ledger) {
		org, ok = l.OrgOfPeer(n.self.String())
		if !ok {
			return
		}
		st, vm = l.PolicyView(nowMs, n.cfg.CheckpointBlockSeconds)
	})
	if !ok {
		n.log.Debug("consensus: leader's peer has no organisation; not scheduling")
		return nil, 0, false
	}
	if len(st.Queued) == 0 {
		return nil, 0, false
	}
	// The view is a copy: the policy runs without holding the lock.
	n.sched.passes.Add(1)
	ds, err := n.policy.Schedule(st)
	if err != nil {
		n.sched.errors.Add(1)
		n.log.Error("consensus: policy failed", "policy", n.policy.Name(), "err", err)
		return nil, 0, false
	}
	if len(ds) == 0 {
		return nil, 0, false
	}
	if len(ds) > ledger.MaxDecisionsPerCommand {
		ds = ds[:ledger.MaxDecisionsPerCommand]
	}
	cmd, err := vm.DecisionsCommand(org, n.self.String(), nowMs, ds)
	if err != nil {
		n.sched.errors.Add(1)
		n.log.Error("consensus: decisions do not fit the view", "err", err)
		return nil, 0, false
	}
	data, err = ledger.EncodeCommand(cmd)
	if err != nil {
		n.sched.errors.Add(1)
		n.log.Error("consensus: encode decisions", "err", err)
		return nil, 0, false
	}
	return data, len(ds), true
}
