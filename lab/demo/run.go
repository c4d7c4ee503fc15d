package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/ledger"
)

// demoDriver plays the workload against the running federation: it
// submits each organisation's tasks through that organisation's own peer
// at their (compressed) submit times, lowers the late organisation's limit
// when it arrives, kills the leader half way, samples PI against the
// limits at every frame, and waits until every task is done.
type demoDriver struct {
	w    *demoWorkload
	fed  *demoFed
	tm   demoTiming
	view *demoView
	log  *slog.Logger
	// maxWall bounds the run: a federation that stops making progress is
	// an error, not a hang.
	maxWall time.Duration

	t0     time.Time
	total  int
	lateIn bool
	leader string // last leader seen

	killed       *demoPeer
	killedAt     time.Time
	killedAtDone int
	leaderBefore string
	leaderAfter  string
	failover     time.Duration
	lostAfter    time.Duration
	requeued     int

	samples    int
	violations []string
	maxPI      map[string]int64
}

// demoBatch is the tasks one organisation submits at one time.
type demoBatch struct {
	at    float64 // simulated seconds after the start
	org   int
	tasks []scenario.TaskSpec
}

// submitChunk bounds the tasks of one Submit: a follower forwards the
// command to the leader in one stream frame.
const submitChunk = 100

// batches groups the instance's tasks by organisation and submit time, in
// time order.
func (d *demoDriver) batches() []demoBatch {
	var out []demoBatch
	for _, t := range d.w.inst.Tasks {
		k := slices.IndexFunc(out, func(b demoBatch) bool { return b.org == t.Org && b.at == t.SubmitSeconds })
		if k < 0 {
			out = append(out, demoBatch{at: t.SubmitSeconds, org: t.Org})
			k = len(out) - 1
		}
		out[k].tasks = append(out[k].tasks, t)
	}
	slices.SortStableFunc(out, func(a, b demoBatch) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return out
}

func (d *demoDriver) elapsed() time.Duration { return time.Since(d.t0) }

// simSeconds converts wall time since the start to simulated seconds.
func (d *demoDriver) simSeconds(wall time.Duration) float64 {
	return wall.Seconds() * d.tm.compression
}

func (d *demoDriver) event(format string, args ...any) {
	e := d.elapsed()
	ev := demoEvent{elapsed: e, simSeconds: d.simSeconds(e), text: fmt.Sprintf(format, args...)}
	d.view.event(ev)
	d.log.Info("demo: " + ev.text)
}

// submit sends one batch through its organisation's peer. The late
// organisation first lowers its limit to demoLateLimitPercent of its power
// quota (it registered at "system" like the others).
func (d *demoDriver) submit(ctx context.Context, b demoBatch) error {
	org := d.w.inst.Orgs[b.org]
	p := d.fed.byOrg(org.Name)
	if p == nil || p.dead {
		return fmt.Errorf("demo: %s's peer is not running: its tasks cannot be submitted", org.Name)
	}
	late := b.org == d.w.late && b.at > 0
	if late {
		pct := float64(demoLateLimitPercent)
		ov, err := p.n.SetLimit(ctx, api.LimitRequest{Percent: &pct})
		if err != nil {
			return fmt.Errorf("demo: %s sets its limit to %d%%: %w", org.Name, demoLateLimitPercent, err)
		}
		d.lateIn = true
		d.event("%s arrives late: limit %d%% of its power quota (%.0f of %.0f W), %d tasks", org.Name,
			demoLateLimitPercent, ov.LimitW, ov.PowerQuotaW, len(b.tasks))
	}
	for start := 0; start < len(b.tasks); start += submitChunk {
		chunk := b.tasks[start:min(start+submitChunk, len(b.tasks))]
		req := api.SubmitRequest{Job: demoScenarioName}
		for _, t := range chunk {
			// Checkpointable, as in Model 1's "CC" runs: a preempted task
			// keeps its progress where the daemon supports it.
			req.Tasks = append(req.Tasks, api.SubmitTask{Name: t.ID, SizeMFlop: t.SizeMFlop, Checkpointable: true})
		}
		if _, err := p.n.Submit(ctx, req); err != nil {
			return fmt.Errorf("demo: %s submits %d tasks: %w", org.Name, len(chunk), err)
		}
	}
	if !late {
		d.log.Info("demo: submitted", "org", org.Name, "tasks", len(b.tasks))
	}
	return nil
}

// observer is a live peer whose replica the progress is read from.
func (d *demoDriver) observer() *demoPeer {
	alive := d.fed.alive()
	if len(alive) == 0 {
		return nil
	}
	return alive[0]
}

func (d *demoDriver) snapshot() demoSnap {
	e := d.elapsed()
	s := demoSnap{elapsed: e, simSeconds: d.simSeconds(e), leader: d.fed.leader(), total: d.total,
		late: d.w.inst.Orgs[d.w.late].Name, lateIn: d.lateIn, dead: map[string]bool{}}
	if d.killed != nil {
		s.dead[d.killed.org] = true
	}
	obs := d.observer()
	if obs == nil {
		return s
	}
	s.observer = obs.org
	obs.n.ViewLedger(func(l *ledger.Ledger) { s.orgs = l.Orgs() })
	for _, o := range s.orgs {
		s.done += o.Done
	}
	return s
}

// checkLimits samples PI ≤ Lim in one replica's state and asks every live
// peer whether an applied entry broke an invariant.
func (d *demoDriver) checkLimits(s demoSnap) {
	if len(s.orgs) == 0 {
		return
	}
	d.samples++
	for _, o := range s.orgs {
		d.maxPI[o.Name] = max(d.maxPI[o.Name], o.PIMilliW)
		if o.PIMilliW > o.LimitMilliW {
			d.violate(fmt.Sprintf("%s: PI %d mW above its limit %d mW in %s's replica at %s", o.Name, o.PIMilliW, o.LimitMilliW, s.observer, fmtWall(s.elapsed)))
		}
	}
	for _, p := range d.fed.alive() {
		if err := p.n.InvariantError(); err != nil {
			d.violate(fmt.Sprintf("%s's replica: %v", p.org, err))
		}
	}
}

func (d *demoDriver) violate(msg string) {
	if !slices.Contains(d.violations, msg) {
		d.violations = append(d.violations, msg)
		d.event("LIMIT OR INVARIANT BROKEN: %s", msg)
	}
}

// killLeader kills the leading peer and measures the fail-over: the time
// until one of the survivors is Raft leader.
func (d *demoDriver) killLeader(ctx context.Context, done int) error {
	if err := waitUntil(ctx, 30*time.Second, "a leader to kill", func() bool { return d.fed.leader() != "" }); err != nil {
		return err
	}
	org := d.fed.leader()
	p := d.fed.byOrg(org)
	running := 0
	p.n.ViewLedger(func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			if m.Org == org && m.Task != "" {
				running++
			}
		}
	})
	d.leaderBefore, d.killedAtDone = org, done
	d.event("half way (%d/%d done): killing the leader, %s's peer, with %d task(s) on its machines", done, d.total, org, running)
	d.killedAt = time.Now()
	d.killed = p
	d.fed.kill(p)
	if err := waitUntil(ctx, 30*time.Second, "a new leader after the kill", func() bool { return d.fed.leader() != "" }); err != nil {
		return err
	}
	d.failover = time.Since(d.killedAt)
	d.leaderAfter = d.fed.leader()
	d.leader = d.leaderAfter
	d.event("%s leads after %d ms: Raft elected it among the %d surviving peers", d.leaderAfter, d.failover.Milliseconds(), len(d.fed.alive()))
	return nil
}

// watchLost reports when every machine of the killed organisation is
// declared lost by the new leader (after the heartbeat timeout).
func (d *demoDriver) watchLost() {
	if d.killed == nil || d.lostAfter > 0 {
		return
	}
	obs := d.observer()
	if obs == nil {
		return
	}
	org := d.killed.org
	all, lost, requeued := 0, 0, 0
	obs.n.ViewLedger(func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			if m.Org == org {
				all++
				if m.State == ledger.MachineLost {
					lost++
				}
			}
		}
		if all == lost {
			for _, t := range l.Tasks(ledger.TaskFilter{}) {
				for _, s := range t.Segments {
					if s.Outcome == ledger.OutcomeLost && s.MachineOrg == org {
						requeued++
					}
				}
			}
		}
	})
	if all == 0 || lost < all {
		return
	}
	d.lostAfter = time.Since(d.killedAt)
	d.requeued = requeued
	d.event("%s's %d machine(s) declared lost after %.1f s of silence (heartbeat timeout %s); %d run(s) on them queued again, %s's own tasks go on running on the others' machines",
		org, all, d.lostAfter.Seconds(), d.tm.heartbeatTimeout, requeued, org)
}

// run drives the federation until every task is done.
func (d *demoDriver) run(ctx context.Context) error {
	d.maxPI = map[string]int64{}
	d.total = len(d.w.inst.Tasks)
	batches := d.batches()
	frameEvery := 250 * time.Millisecond
	if d.view.tty {
		frameEvery = 100 * time.Millisecond
	}
	tick := time.NewTicker(frameEvery)
	defer tick.Stop()
	d.t0 = time.Now()
	d.leader = d.fed.leader()
	deadline := time.NewTimer(d.maxWall)
	defer deadline.Stop()
	for {
		for len(batches) > 0 && d.simSeconds(d.elapsed()) >= batches[0].at {
			if err := d.submit(ctx, batches[0]); err != nil {
				return err
			}
			batches = batches[1:]
		}
		s := d.snapshot()
		d.checkLimits(s)
		if s.leader != "" && s.leader != d.leader {
			d.event("%s leads now (was %s)", s.leader, orNone(d.leader))
			d.leader = s.leader
		}
		if d.killed == nil && d.lateIn && len(batches) == 0 && 2*s.done >= d.total {
			if err := d.killLeader(ctx, s.done); err != nil {
				return err
			}
			s = d.snapshot()
		}
		d.watchLost()
		// The end: every task done, and the dead peer's machines declared
		// lost (if they were idle at the kill, that can come after the
		// last task).
		finished := len(batches) == 0 && d.settled(s) && (d.killed == nil || d.lostAfter > 0)
		d.view.frame(s, finished)
		if finished {
			return nil
		}
		// Sleep until the next frame, or the next batch if it is due first.
		var next <-chan time.Time
		var timer *time.Timer
		if len(batches) > 0 {
			wait := time.Duration(batches[0].at/d.tm.compression*float64(time.Second)) - d.elapsed()
			timer = time.NewTimer(max(wait, 0))
			next = timer.C
		}
		var err error
		select {
		case <-ctx.Done():
			err = fmt.Errorf("demo: %w", ctx.Err())
		case <-deadline.C:
			err = fmt.Errorf("demo: not finished after %s: %s", d.maxWall, plainStatus(s))
		case <-tick.C:
		case <-next:
		}
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// settled says every task reached a terminal state in the snapshot.
func (d *demoDriver) settled(s demoSnap) bool {
	n := 0
	for _, o := range s.orgs {
		n += o.Done + o.Failed + o.Cancelled
	}
	return n >= d.total && d.total > 0
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// converge waits until every live peer has applied the same entries and
// holds the same state hash, and returns that hash and index.
func (d *demoDriver) converge(ctx context.Context) (string, uint64, error) {
	var hash string
	var idx uint64
	err := waitUntil(ctx, 20*time.Second, "the surviving peers to hold the same state", func() bool {
		hash, idx = "", 0
		for i, p := range d.fed.alive() {
			var h string
			var k uint64
			p.n.ViewLedger(func(l *ledger.Ledger) { h, k = l.Hash(), l.AppliedIndex() })
			if i == 0 {
				hash, idx = h, k
			} else if h != hash || k != idx {
				return false
			}
		}
		return hash != ""
	})
	return hash, idx, err
}

// finalChecks checks the invariants of every replica once more, from
// scratch, and collects the first violation each peer recorded after any
// applied entry (the killed peer's up to its death).
func (d *demoDriver) finalChecks() []string {
	var bad []string
	for _, p := range d.fed.peers {
		if p == nil || p.n == nil {
			continue
		}
		if err := p.n.InvariantError(); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", p.org, err))
		}
		if p.dead {
			continue
		}
		var err error
		p.n.ViewLedger(func(l *ledger.Ledger) { err = l.CheckInvariants() })
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s's final state: %v", p.org, err))
		}
	}
	return append(bad, d.violations...)
}

// ErrChecks marks a demo that ran to the end but whose checks failed.
var ErrChecks = errors.New("demo: checks failed")
