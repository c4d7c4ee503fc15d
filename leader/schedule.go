package leader

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// SchedulerStats counts the scheduling passes this peer ran as leader.
type SchedulerStats struct {
	// Passes that ran the policy; Proposed decisions committed in entries;
	// Accepted and Rejected by Apply (stale decisions are rejected);
	// Errors counts passes whose entry failed to commit.
	Passes, Proposed, Accepted, Rejected, Errors uint64
}

type counters struct {
	passes, proposed, accepted, rejected, errors atomic.Uint64
}

// SchedulerStats returns the counters of the scheduling passes this peer
// ran in all its terms as leader.
func (l *Leader) SchedulerStats() SchedulerStats {
	return SchedulerStats{
		Passes:   l.stats.passes.Load(),
		Proposed: l.stats.proposed.Load(),
		Accepted: l.stats.accepted.Load(),
		Rejected: l.stats.rejected.Load(),
		Errors:   l.stats.errors.Load(),
	}
}

// PassObserver receives the timing of each scheduling pass that ran the
// policy, for metrics: policy is the view, the policy and the encoding;
// commit the decisions' entry from append to applied (0 when the pass
// decided nothing).
type PassObserver interface {
	ObservePass(policy, commit time.Duration)
}

func (l *Leader) observePass(policy, commit time.Duration) {
	if l.cfg.Observer != nil {
		l.cfg.Observer.ObservePass(policy, commit)
	}
}

// schedule is the leader's scheduling loop. It runs from the moment this
// peer becomes leader until ctx is cancelled (leadership lost or
// shutdown). Each pass takes a view of the ledger, runs the policy and
// commits all decisions of the pass as one log entry.
func (l *Leader) schedule(ctx context.Context, r Replica) {
	if !l.firstBarrier(ctx, r) {
		return
	}
	tick := time.NewTicker(l.cfg.ScheduleInterval)
	defer tick.Stop()
	for {
		l.schedulePass(ctx, r)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-l.wake:
			if l.cfg.ScheduleDebounce > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(l.cfg.ScheduleDebounce):
				}
			}
			// Changes that arrived during the debounce are in this pass.
			select {
			case <-l.wake:
			default:
			}
		}
	}
}

// firstBarrier waits until the entries committed by earlier leaders are
// applied here, so that the first view is complete. It reports false when
// leadership ended first.
func (l *Leader) firstBarrier(ctx context.Context, r Replica) bool {
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := r.Barrier(ctx)
		if err != nil && (ctx.Err() != nil || !r.IsLeader()) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(backoff.NewConstantBackOff(l.cfg.BarrierRetry)),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, _ time.Duration) { l.log.Warn("leader: scheduler barrier", "err", err) }),
	)
	return err == nil
}

// schedulePass runs one pass. It proposes nothing when the leader's peer
// has no organisation (decisions act for an organisation), when nothing is
// queued, or when the policy decides nothing.
func (l *Leader) schedulePass(ctx context.Context, r Replica) {
	if ctx.Err() != nil || !r.IsLeader() {
		return
	}
	start, passes := time.Now(), l.stats.passes.Load()
	data, count, ok := l.plan(r)
	planned := time.Since(start)
	if !ok || count == 0 {
		if l.stats.passes.Load() != passes {
			l.observePass(planned, 0)
		}
		return
	}
	// Leadership may have gone while the policy ran; raft would refuse the
	// entry anyway, this just skips the attempt.
	if ctx.Err() != nil {
		return
	}
	committing := time.Now()
	res, err := r.AppendAsLeader(ctx, data)
	if err != nil {
		if ctx.Err() == nil {
			l.stats.errors.Add(1)
			l.log.Warn("leader: commit decisions", "decisions", count, "err", err)
		}
		return
	}
	l.observePass(planned, time.Since(committing))
	accepted := res.AcceptedDecisions()
	l.stats.proposed.Add(uint64(count))
	l.stats.accepted.Add(uint64(accepted))
	l.stats.rejected.Add(uint64(count - accepted))
	if res.Err != nil {
		l.log.Warn("leader: decisions rejected", "index", res.Index, "err", res.Err)
	} else if accepted < count {
		l.log.Info("leader: stale decisions rejected", "index", res.Index, "accepted", accepted, "decisions", count)
	}
}

// plan runs the policy on the current view and returns the encoded
// decisions command and the number of decisions (ok false when there is
// nothing to propose).
func (l *Leader) plan(r StateViewer) (data []byte, count int, ok bool) {
	nowMs := l.cfg.Now().UnixMilli()
	var (
		st  *policy.State
		vm  *ledger.ViewMap
		org string
	)
	r.View(func(lg *ledger.Ledger) {
		org, ok = lg.OrgOfPeer(l.cfg.Self.String())
		if !ok {
			return
		}
		st, vm = lg.PolicyView(nowMs, l.cfg.CheckpointBlockSeconds)
	})
	if !ok {
		l.log.Debug("leader: leader's peer has no organisation; not scheduling")
		return nil, 0, false
	}
	if len(st.Queued) == 0 {
		return nil, 0, false
	}
	// The view is a copy: the policy runs without holding the lock.
	l.stats.passes.Add(1)
	ds, err := l.policy.Schedule(st)
	if err != nil {
		l.stats.errors.Add(1)
		l.log.Error("leader: policy failed", "policy", l.policy.Name(), "err", err)
		return nil, 0, false
	}
	if len(ds) == 0 {
		return nil, 0, false
	}
	if len(ds) > ledger.MaxDecisionsPerCommand {
		ds = ds[:ledger.MaxDecisionsPerCommand]
	}
	cmd, err := vm.DecisionsCommand(org, l.cfg.Self.String(), nowMs, ds)
	if err != nil {
		l.stats.errors.Add(1)
		l.log.Error("leader: decisions do not fit the view", "err", err)
		return nil, 0, false
	}
	data, err = l.encode(cmd)
	if err != nil {
		l.stats.errors.Add(1)
		l.log.Error("leader: encode decisions", "err", err)
		return nil, 0, false
	}
	return data, len(ds), true
}
