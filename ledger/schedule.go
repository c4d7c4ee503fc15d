package ledger

import (
	"fmt"

	"github.com/coopgrid/coopgrid/policy"
)

// Decisions every peer can check (issue 15). On a federation whose rules
// carry Scheduling, the leader no longer writes placements into the log:
// it appends a schedule trigger, and every peer's Apply computes the
// scheduling pass itself, from its own ledger state, with the federation's
// policy and checkpoint block, at the trigger's time. The policy is pure
// and deterministic, every input of the pass is replicated (the state, the
// settings in Rules, the time in the command), so every peer computes the
// same decisions and applies them exactly as a decisions batch would
// (applyDecisions: the same verdict per decision, the same changes). A
// leader can no longer choose placements; such a federation refuses the
// decisions kind (CodeSchedulingMode). docs/SECURITY.md ("Member leader")
// states what the leader can still do.

// KindSchedule is a scheduling trigger.
const KindSchedule Kind = "schedule"

// Schedule asks every peer to run one scheduling pass at the command's
// AtMs, the leader's clock, on the state the log has reached. It carries
// nothing else: the policy and the checkpoint block are the federation's
// settings (Rules.Scheduling), and its job policy (jobpolicy.go) picks
// the pass (policy.WithJobPolicy). The acting peer is the leader (the
// consensus layer lets only the leader's own loop append it), the acting
// organisation its organisation.
//
// Apply refuses, changing nothing:
//   - on a federation without scheduling settings (CodeSchedulingMode);
//   - an AtMs before the last applied trigger's (CodeClockBackwards): a
//     leader cannot make a pass see the past;
//   - a pass that decides nothing (CodeNothingToSchedule), so that an
//     empty trigger never stays in the log when the leader's check
//     (Placeable) can judge it;
//   - a pass the policy fails on (CodePolicyFailed), identically on every
//     peer.
//
// Otherwise the pass's decisions, at most MaxDecisionsPerCommand, apply in
// order with a verdict each in Result.Decisions, as a decisions batch's.
type Schedule struct{}

func (*Schedule) Kind() Kind { return KindSchedule }

func (*Schedule) validate() *Error { return nil }

// leaderOnly: a trigger comes only from the leader's scheduling loop.
func (*Schedule) leaderOnly() bool { return true }

// wakesScheduler: the pass already decided on the state it leaves.
func (*Schedule) wakesScheduler(*Result) bool { return false }

func (b *Schedule) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	// The kept queue: the pass runs here, under the state's lock, and its
	// decisions are converted before anything changes.
	p, err := l.schedulingPass(c.AtMs, true)
	if err != nil {
		return nil, err
	}
	ds, err := p.Decide()
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return nil, errf(CodeNothingToSchedule, "the %s pass at %d ms decides nothing on this state", p.settings.Policy, c.AtMs)
	}
	return func(_ uint64, res *Result) {
		l.scheduledMs = c.AtMs
		l.applyDecisions(ds, c.AtMs, res)
	}, nil
}

// Scheduling are the federation's settings of the scheduling pass that
// every peer computes (Rules.Scheduling). They are inputs of Apply, so
// they are replicated, fixed by the federation's first registration.
type Scheduling struct {
	// Policy names the policy (policy.Names()). In a command "" means
	// DefaultSchedulingPolicy; the ledger stores the name it applies.
	Policy string `json:"policy"`
	// CheckpointBlockMs is policy.State.CheckpointBlockSeconds, in ms
	// like every duration of the ledger: 0 means no checkpointing.
	CheckpointBlockMs int64 `json:"checkpoint_block_ms"`
}

// The settings a federation created by `peer init --new-federation` gets
// unless its configuration names others (the consensus section's defaults).
const (
	DefaultSchedulingPolicy  = "ehosep"
	DefaultCheckpointBlockMs = 300_000
	// MaxCheckpointBlockMs bounds the setting: one week.
	MaxCheckpointBlockMs = 7 * 24 * 3600 * 1000
)

// DefaultScheduling returns the default settings.
func DefaultScheduling() *Scheduling {
	return &Scheduling{Policy: DefaultSchedulingPolicy, CheckpointBlockMs: DefaultCheckpointBlockMs}
}

func (s *Scheduling) validate() *Error {
	if s.Policy != "" {
		if _, err := policy.New(s.Policy); err != nil {
			return errf(CodeMalformed, "rules: scheduling: %v", err)
		}
	}
	if s.CheckpointBlockMs < 0 || s.CheckpointBlockMs > MaxCheckpointBlockMs {
		return errf(CodeMalformed, "rules: scheduling: checkpoint_block_ms %d out of range [0, %d]", s.CheckpointBlockMs, int64(MaxCheckpointBlockMs))
	}
	return nil
}

// normalized is a copy of s as the ledger stores it.
func (s Scheduling) normalized() *Scheduling {
	if s.Policy == "" {
		s.Policy = DefaultSchedulingPolicy
	}
	return &s
}

// SchedulingSettings returns the federation's scheduling settings; ok is
// false on a federation whose leader proposes decisions batches (no rules,
// or rules from before the settings).
func (l *Ledger) SchedulingSettings() (Scheduling, bool) {
	if l.rules == nil || l.rules.Scheduling == nil {
		return Scheduling{}, false
	}
	return *l.rules.Scheduling, true
}

// ScheduledAtMs is the time of the last applied schedule trigger (0 before
// the first): the earliest time the next one may carry.
func (l *Ledger) ScheduledAtMs() int64 { return l.scheduledMs }

// Pass is one scheduling pass taken from the ledger: a copy of the policy
// view, so that Decide may run after the ledger has changed (unless it
// reads the ledger's kept queue: see schedulingPass).
type Pass struct {
	settings Scheduling
	policy   policy.Policy
	state    *policy.State
	view     *ViewMap
}

// SchedulingPass takes the pass a schedule trigger at nowMs would run on
// this state: the federation's policy on PolicyView(nowMs, its checkpoint
// block), a copy that stays valid after the ledger changes. It refuses a
// federation without scheduling settings (CodeSchedulingMode) and a time
// before the last trigger's (CodeClockBackwards).
func (l *Ledger) SchedulingPass(nowMs int64) (*Pass, *Error) { return l.schedulingPass(nowMs, false) }

// schedulingPass is SchedulingPass; with kept, the view reads the ledger's
// kept queue (keptqueue.go) instead of listing the queued tasks: the pass
// then costs what it serves, not the queue's length, and must run before
// the ledger changes (Apply, and Placeable under the state's lock). Both
// views give the same decisions.
func (l *Ledger) schedulingPass(nowMs int64, kept bool) (*Pass, *Error) {
	s, ok := l.SchedulingSettings()
	if !ok {
		return nil, errf(CodeSchedulingMode, "this federation's leader proposes decisions: it has no scheduling settings for its peers to compute a pass")
	}
	if nowMs < l.scheduledMs {
		return nil, errf(CodeClockBackwards, "schedule at %d ms is before the last pass, at %d ms", nowMs, l.scheduledMs)
	}
	pol, err := policy.New(s.Policy)
	if err == nil {
		// The job policy in force picks the pass (policy.WithJobPolicy):
		// a replicated setting, so every peer runs the same one.
		pol, err = policy.WithJobPolicy(pol, l.JobPolicy().Policy)
	}
	if err != nil {
		// Validated when the rules were fixed; only a ledger without the
		// named policy gets here, and every such peer alike.
		return nil, errf(CodePolicyFailed, "policy %q: %v", s.Policy, err)
	}
	var (
		st *policy.State
		vm *ViewMap
	)
	if kept {
		st, vm = l.keptView(nowMs, float64(s.CheckpointBlockMs)/1000, l.keptPolicyQueue())
	} else {
		st, vm = l.policyView(nowMs, float64(s.CheckpointBlockMs)/1000, nil)
	}
	return &Pass{settings: s, policy: pol, state: st, view: vm}, nil
}

// Placeable reports whether a schedule trigger at nowMs would decide
// anything, with the error Apply would refuse it with, and how many tasks
// wait (0: the policy did not run): the leader's question before it
// appends one. It runs the pass's first service only (policy.Decides) on
// the kept queue, so it costs about the federation's machines and
// organisations, not a pass; call it under the state's lock.
func (l *Ledger) Placeable(nowMs int64) (queued int, placeable bool, err *Error) {
	p, err := l.schedulingPass(nowMs, true)
	if err != nil {
		return 0, false, err
	}
	placeable, err = p.decides()
	return p.Queued(), placeable, err
}

// Queued is the number of queued tasks the pass sees, gang parts
// included.
func (p *Pass) Queued() int {
	n := len(p.state.Queued)
	if p.state.Queue != nil {
		n += p.state.Queue.Len()
	}
	for _, g := range p.state.Gangs {
		n += len(g.Parts)
	}
	return n
}

func (p *Pass) decides() (yes bool, err *Error) {
	if p.Queued() == 0 {
		return false, nil
	}
	defer func() {
		if r := recover(); r != nil {
			yes, err = false, errf(CodePolicyFailed, "policy %s panicked: %v", p.settings.Policy, r)
		}
	}()
	yes, perr := policy.Decides(p.policy, p.state)
	if perr != nil {
		return false, errf(CodePolicyFailed, "policy %s: %v", p.settings.Policy, perr)
	}
	return yes, nil
}

// Decide runs the policy on the pass's view and returns its decisions, at
// most MaxDecisionsPerCommand, as ledger decisions. A policy error, a
// decision that does not fit the view and a panic of the policy are
// refusals (CodePolicyFailed): the policy is deterministic, so every peer
// refuses alike.
func (p *Pass) Decide() (ds []Decision, err *Error) {
	if p.Queued() == 0 {
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			ds, err = nil, errf(CodePolicyFailed, "policy %s panicked: %v", p.settings.Policy, r)
		}
	}()
	pds, perr := p.policy.Schedule(p.state)
	if perr != nil {
		return nil, errf(CodePolicyFailed, "policy %s: %v", p.settings.Policy, perr)
	}
	pds = policy.Truncate(p.state, pds, MaxDecisionsPerCommand)
	out, verr := p.view.Decisions(pds)
	if verr != nil {
		return nil, errf(CodePolicyFailed, "policy %s: %v", p.settings.Policy, verr)
	}
	return out, nil
}

// String names the pass for logs.
func (p *Pass) String() string {
	return fmt.Sprintf("%s pass at %d ms on index %d", p.settings.Policy, p.view.NowMs, p.view.Index)
}
