package leader

import (
	"context"
	"fmt"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// Liveness is what lost-machine detection reads from the gossip
// heartbeats this peer received (package gossip implements it).
type Liveness interface {
	// LastSeen is the local time machine id (org/name) was last heard of;
	// ok is false when it never was.
	LastSeen(id string) (at time.Time, ok bool)
	// OwnerClockMs estimates the wall clock of machine id's peer at local
	// time now, from its last heartbeat; ok is false without one.
	OwnerClockMs(id string, now time.Time) (ms int64, ok bool)
}

// detectLost declares lost, while this peer leads, a machine that is up in
// the ledger and has not been heard of for the heartbeat timeout, which
// queues its tasks again. The clock starts when this peer became leader
// (and serves), or when the machine came (back) up, whichever is later, so
// a new leader gives every machine a full timeout.
func (l *Leader) detectLost(ctx context.Context, r Replica) {
	timeout := l.cfg.LostTimeout
	t := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer t.Stop()
	var leaderSince time.Time
	// upFrom is when each machine was first seen up in this term; wasUp
	// the machines up at the previous tick.
	upFrom := map[string]time.Time{}
	wasUp := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !l.cfg.Serving() || !r.IsLeader() {
			leaderSince = time.Time{}
			continue
		}
		now := time.Now()
		if leaderSince.IsZero() {
			leaderSince = now
		}
		var ups []string
		r.View(func(lg *ledger.Ledger) {
			for _, m := range lg.Machines() {
				if m.State == ledger.MachineUp {
					ups = append(ups, m.ID)
				}
			}
		})
		nowUp := map[string]bool{}
		silent := map[string]int64{} // machine → loss stamp on its owner's clock (0: none)
		for _, id := range ups {
			nowUp[id] = true
			if !wasUp[id] {
				upFrom[id] = now
			}
			ref := leaderSince
			if s, ok := l.live.LastSeen(id); ok && s.After(ref) {
				ref = s
			}
			if u := upFrom[id]; u.After(ref) {
				ref = u
			}
			if now.Sub(ref) <= timeout {
				continue
			}
			silent[id] = 0
			// Stamp the loss on the owner's clock, as far as its
			// heartbeats tell it: the ledger books the lost runs' energy
			// as busy power × (loss − start), and the owner stamped the
			// start. A leader whose clock is an hour ahead would
			// otherwise credit an hour of energy per lost run (the chaos
			// harness's clock-leader-loses-follower found it). Without a
			// heartbeat, this peer's own clock.
			if ms, ok := l.live.OwnerClockMs(id, now); ok && ms > 0 && ms <= ledger.MaxTimeMs {
				silent[id] = ms
			}
		}
		wasUp = nowUp
		for _, id := range ups {
			if at, ok := silent[id]; ok && ctx.Err() == nil {
				l.declareLost(ctx, r, id, at)
			}
		}
	}
}

// declareLost proposes MachineLost for id, stamped at ownerMs when known.
func (l *Leader) declareLost(ctx context.Context, r Replica, id string, ownerMs int64) {
	timeout := l.cfg.LostTimeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := ledger.Command{Org: l.cfg.Org, Peer: l.cfg.Self.String(), AtMs: l.cfg.Now().UnixMilli(),
		MachineLost: &ledger.MachineLostCmd{Machine: id}}
	if ownerMs != 0 {
		if d := ownerMs - c.AtMs; d > time.Second.Milliseconds() || d < -time.Second.Milliseconds() {
			l.log.Info("machine lost: stamped on its owner's clock, which differs from this peer's", "machine", id, "owner_ms", ownerMs, "skew_ms", d)
		}
		c.AtMs = ownerMs
	}
	if err := l.propose(ctx, r, c); err != nil {
		l.log.Warn("declare silent machine lost", "machine", id, "err", err)
		return
	}
	l.log.Warn("machine lost: no heartbeat", "machine", id, "timeout", timeout)
}

// propose commits c and waits until the local ledger has applied it; a
// command the ledger rejected returns its *ledger.Error.
func (l *Leader) propose(ctx context.Context, r Replica, c ledger.Command) error {
	data, err := l.encode(c)
	if err != nil {
		return fmt.Errorf("encode %s: %w", c.Kind(), err)
	}
	res, err := r.Propose(ctx, data)
	if err != nil {
		return err
	}
	if err := r.WaitApplied(ctx, res.Index); err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	return nil
}
