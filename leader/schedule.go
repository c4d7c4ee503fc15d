package leader

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// SchedulerStats counts the scheduling passes this peer ran as leader.
type SchedulerStats struct {
	// Passes that ran the policy; Proposed decisions committed in entries
	// (for a schedule trigger, the decisions every peer's pass made in
	// Apply); Accepted and Rejected by Apply (stale decisions are
	// rejected); Errors counts passes whose entry failed to commit.
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
// commits all decisions of the pass as one log entry, or, on a federation
// whose peers compute the passes, a schedule trigger.
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
	p, ok := l.plan(r)
	planTook := time.Since(start)
	if !ok || p.count == 0 {
		if l.stats.passes.Load() != passes {
			l.observePass(planTook, 0)
		}
		return
	}
	// Leadership may have gone while the policy ran; raft would refuse the
	// entry anyway, this just skips the attempt.
	if ctx.Err() != nil {
		return
	}
	committing := time.Now()
	res, err := l.appendOwn(ctx, r, p.data)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, errVersionHeld) {
			l.stats.errors.Add(1)
			l.log.Warn("leader: commit "+string(p.kind), "decisions", p.count, "err", err)
		}
		return
	}
	l.observePass(planTook, time.Since(committing))
	l.account(p, &res)
}

// account counts what Apply made of a committed pass. A trigger's
// decisions are the ones every peer computed in Apply (Result.Decisions),
// not the ones this peer's own pass foresaw.
func (l *Leader) account(p planned, res *ledger.Result) {
	proposed := len(res.Decisions)
	if p.kind == ledger.KindDecisions {
		// A refused batch proposed its decisions all the same.
		proposed = p.count
	}
	accepted := res.AcceptedDecisions()
	l.stats.proposed.Add(uint64(proposed))
	l.stats.accepted.Add(uint64(accepted))
	l.stats.rejected.Add(uint64(proposed - accepted))
	switch {
	case res.Err != nil && res.Err.Code == ledger.CodeNothingToSchedule:
		// The state changed between this peer's pass and the trigger's.
		l.log.Debug("leader: schedule trigger found nothing to decide", "index", res.Index)
	case res.Err != nil:
		l.log.Warn("leader: "+string(p.kind)+" rejected", "index", res.Index, "err", res.Err)
	case accepted < proposed:
		l.log.Info("leader: stale decisions rejected", "index", res.Index, "accepted", accepted, "decisions", proposed)
	}
}

// planned is an encoded pass to append: a decisions batch (a federation
// whose leader decides) or a schedule trigger (one whose peers compute the
// pass), with the number of decisions this peer's pass made (for a
// trigger, 1: the leader only learns that the pass decides something).
type planned struct {
	kind  ledger.Kind
	data  []byte
	count int
}

// plan runs the policy on the current view and returns the encoded
// command to append (ok false when there is nothing to propose). On a
// federation whose peers compute the passes (ledger.Scheduling), the
// leader does not run the pass: every peer runs it in Apply. It asks,
// under the state's lock, whether a trigger would decide anything
// (Ledger.Placeable: the pass's first service, on the ledger's kept
// queue, with the federation's settings, not this peer's configuration),
// and proposes the trigger if so.
func (l *Leader) plan(r StateViewer) (p planned, ok bool) {
	nowMs := l.cfg.Now().UnixMilli()
	var (
		st        *policy.State
		vm        *ledger.ViewMap
		org       string
		byPeers   bool
		placeable bool
		perr      *ledger.Error
		job       string
	)
	r.View(func(lg *ledger.Ledger) {
		org, ok = lg.OrgOfPeer(l.cfg.Self.String())
		if !ok {
			return
		}
		if _, byPeers = lg.SchedulingSettings(); byPeers {
			// A trigger may not be earlier than the last one: a clock
			// behind it (another leader's ran ahead) uses its time.
			nowMs = max(nowMs, lg.ScheduledAtMs())
			var queued int
			queued, placeable, perr = lg.Placeable(nowMs)
			if queued > 0 {
				l.stats.passes.Add(1)
			}
			return
		}
		st, vm = lg.PolicyView(nowMs, l.cfg.CheckpointBlockSeconds)
		job = lg.JobPolicy().Policy
	})
	if !ok {
		l.log.Debug("leader: leader's peer has no organisation; not scheduling")
		return planned{}, false
	}
	if byPeers {
		return l.planTrigger(org, nowMs, placeable, perr)
	}
	if len(st.Queued) == 0 && len(st.Gangs) == 0 {
		return planned{}, false
	}
	// The view is a copy: the policy runs without holding the lock.
	l.stats.passes.Add(1)
	// The federation's job policy picks the pass (policy.WithJobPolicy).
	pol, err := policy.WithJobPolicy(l.policy, job)
	var ds []policy.Decision
	if err == nil {
		ds, err = pol.Schedule(st)
	}
	if err != nil {
		l.stats.errors.Add(1)
		l.log.Error("leader: policy failed", "policy", l.policy.Name(), "job_policy", job, "err", err)
		return planned{}, false
	}
	// At most a command's decisions, a gang's parts never split.
	if ds = policy.Truncate(st, ds, ledger.MaxDecisionsPerCommand); len(ds) == 0 {
		return planned{}, false
	}
	cmd, err := vm.DecisionsCommand(org, l.cfg.Self.String(), nowMs, ds)
	if err != nil {
		l.stats.errors.Add(1)
		l.log.Error("leader: decisions do not fit the view", "err", err)
		return planned{}, false
	}
	return l.encoded(ledger.KindDecisions, cmd, len(ds))
}

// planTrigger proposes a trigger at nowMs if its pass decides anything.
func (l *Leader) planTrigger(org string, nowMs int64, placeable bool, perr *ledger.Error) (planned, bool) {
	if perr != nil {
		// Every peer would refuse the trigger alike: do not append it.
		l.stats.errors.Add(1)
		l.log.Error("leader: scheduling pass", "at_ms", nowMs, "err", perr)
		return planned{}, false
	}
	if !placeable {
		return planned{}, false
	}
	cmd := ledger.Command{V: ledger.CommandVersion, Org: org, Peer: l.cfg.Self.String(), AtMs: nowMs, Schedule: &ledger.Schedule{}}
	return l.encoded(ledger.KindSchedule, cmd, 1)
}

func (l *Leader) encoded(kind ledger.Kind, cmd ledger.Command, count int) (planned, bool) {
	data, err := l.encode(cmd)
	if err != nil {
		l.stats.errors.Add(1)
		l.log.Error("leader: encode "+string(kind), "err", err)
		return planned{}, false
	}
	return planned{kind: kind, data: data, count: count}, true
}
