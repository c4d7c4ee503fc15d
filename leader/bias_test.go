package leader

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/coopgrid/coopgrid/policy"
)

// Decisions every peer can check (issue 15): on a federation whose peers
// compute the passes, a leader running modified code appends what it
// likes through its consensus node (AppendAsLeader, as in forge_test.go;
// no hook in the production code). It cannot place anything itself: every
// peer refuses its decisions batches, and a trigger's placements are the
// policy's on the replicated state.

// biasFixture is a three-peer federation whose peers compute the passes,
// with the scheduler off (the test plays the leader): the victim queued two
// tasks, the leader one.
type biasFixture struct {
	c                 *cluster
	leader, victim, m *tpeer
	victimTasks       []string
	leaderTask        string
}

func newBiasFixture(t *testing.T) *biasFixture {
	rules := &ledger.Rules{Executors: ledger.ExecutorsSimulated, Scheduling: ledger.DefaultScheduling()}
	c := newClusterWithRules(t, 3, 2, rules, func(_ *consensus.Config, l *Config) { l.DisableScheduler = true })
	f := &biasFixture{c: c, leader: c.waitLeader()}
	f.victim = c.other(f.leader)
	f.m = c.other(f.leader, f.victim)
	f.victimTasks = submit(t, f.victim, 2)
	f.leaderTask = submit(t, f.leader, 1)[0]
	c.converge()
	return f
}

// TestMaliciousLeaderCannotBiasPlacement: the leader appends decisions
// batches of its own choosing, signed as itself (it is a member: identity
// checks pass). Every peer refuses each with scheduling_mode and the state
// hash stays as it was; nothing is placed.
func TestMaliciousLeaderCannotBiasPlacement(t *testing.T) {
	f := newBiasFixture(t)
	l, v := f.leader.org, f.victim.org
	for name, ds := range map[string][]ledger.Decision{
		// Its own task first, on the victim's machine.
		"own task on another's machine": {{Kind: ledger.DecideAllocate, Task: f.leaderTask, Machine: v + "/m0"}},
		// The victim's task on the leader's machine (energy billed to the
		// victim, the leader's owner credit grows).
		"victim's task where the leader wants": {{Kind: ledger.DecideAllocate, Task: f.victimTasks[0], Machine: l + "/m1"}},
		// A pass that starves the victim: the leader's task only.
		"a pass that starves the victim": {
			{Kind: ledger.DecideAllocate, Task: f.leaderTask, Machine: l + "/m0"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			before := f.c.converge()
			res, _ := appendAsTheLeader(t, f.c, func(*tpeer) ledger.Command {
				return ledger.Command{Decisions: &ledger.Decisions{Decisions: ds}}
			})
			if res.Err == nil || res.Err.Code != ledger.CodeSchedulingMode {
				t.Fatalf("biased decisions: %v, want %s", res.Err, ledger.CodeSchedulingMode)
			}
			refusedOnEveryPeer(t, f.c, res.Index, ledger.CodeSchedulingMode, before)
			if got := placement(f.m); len(got) != 0 {
				t.Fatalf("placed: %v", got)
			}
		})
	}
}

// appendAsTheLeader appends the command build makes for whoever leads
// now, retrying with the next leader when leadership moves under the call
// (a loaded machine loses leaders): a refusal must not be the election's.
// A command whose outcome was unknown is appended again: every command
// here is refused or changes nothing the second time; retried says so.
func appendAsTheLeader(t *testing.T, c *cluster, build func(leader *tpeer) ledger.Command) (res ledger.Result, retried bool) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		l := c.waitLeader()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := l.node.AppendAsLeader(ctx, command(l, build(l)))
		cancel()
		if err == nil {
			return res, attempt > 0
		}
		if code := p2p.Code(err); attempt >= 5 || code != consensus.CodeNotLeader && code != consensus.CodeOutcomeUnknown {
			t.Fatalf("%s append: %v", l.name, err)
		}
	}
}

// refusedOnEveryPeer checks that every running peer applied index with
// the verdict want and that the state hash is still before.
func refusedOnEveryPeer(t *testing.T, c *cluster, index uint64, want ledger.Code, before string) {
	t.Helper()
	if after := c.converge(); after != before {
		t.Fatalf("state hash changed: %.12s → %.12s", before, after)
	}
	for _, p := range c.running() {
		if got, ok := p.verdict(index); !ok || got != want {
			t.Errorf("%s's ledger on index %d: %q (seen %v), want %q", p.name, index, got, ok, want)
		}
	}
}

// TestTriggerPlacesWhatThePolicyDecides: a trigger the leader appends
// places exactly what EHOSEP decides on the view at the trigger's time,
// computed apart on another peer's ledger; a trigger earlier than the last
// one is refused on every peer (clock_backwards); and a follower cannot
// propose a trigger (admission: forbidden), directly or forwarded.
func TestTriggerPlacesWhatThePolicyDecides(t *testing.T) {
	f := newBiasFixture(t)
	f.c.converge()
	now := time.Now().UnixMilli()
	var want []ledger.Decision
	f.m.node.View(func(lg *ledger.Ledger) {
		st, vm := lg.PolicyView(now, ledger.DefaultCheckpointBlockMs/1000)
		ds, err := policy.EHOSEP{}.Schedule(st)
		if err != nil {
			t.Fatal(err)
		}
		if want, err = vm.Decisions(ds); err != nil {
			t.Fatal(err)
		}
	})
	if len(want) != 3 {
		t.Fatalf("EHOSEP decides %d placements, want the 3 queued tasks: %+v", len(want), want)
	}
	res, retried := appendAsTheLeader(t, f.c, func(*tpeer) ledger.Command { return ledger.Command{AtMs: now, Schedule: &ledger.Schedule{}} })
	switch {
	case retried && res.Err != nil && res.Err.Code == ledger.CodeNothingToSchedule:
		// The first attempt, whose outcome was unknown, applied: the
		// placements below say what it did.
	case !res.Applied() || res.AcceptedDecisions() != len(want):
		t.Fatalf("trigger: %v %+v", res.Err, res.Decisions)
	default:
		got := make([]ledger.Decision, len(res.Decisions))
		for i, d := range res.Decisions {
			got[i] = d.Decision
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trigger placed %+v, EHOSEP decides %+v", got, want)
		}
	}
	f.c.converge()
	wantPlaced := map[string]string{}
	for _, d := range want {
		wantPlaced[d.Task] = d.Machine
	}
	for _, p := range f.c.running() {
		if got := placement(p); !reflect.DeepEqual(got, wantPlaced) {
			t.Fatalf("%s: placement %v, want %v", p.name, got, wantPlaced)
		}
	}

	t.Run("the past", func(t *testing.T) {
		submit(t, f.victim, 1)
		before := f.c.converge()
		res, _ := appendAsTheLeader(t, f.c, func(*tpeer) ledger.Command { return ledger.Command{AtMs: now - 1, Schedule: &ledger.Schedule{}} })
		if res.Err == nil || res.Err.Code != ledger.CodeClockBackwards {
			t.Fatalf("trigger in the past: %v, want %s", res.Err, ledger.CodeClockBackwards)
		}
		refusedOnEveryPeer(t, f.c, res.Index, ledger.CodeClockBackwards, before)
	})

	t.Run("a follower's trigger", func(t *testing.T) {
		before := f.c.converge()
		leader := f.c.waitLeader()
		follower := f.c.other(leader)
		last := leader.node.Raft().LastIndex()
		asked := leader
		trigger := command(follower, ledger.Command{Schedule: &ledger.Schedule{}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := follower.node.Propose(ctx, trigger); p2p.Code(err) != consensus.CodeForbidden {
			t.Fatalf("proposed trigger: %v, want %s", err, consensus.CodeForbidden)
		}
		// Modified code skips its own admission: the leader's refuses. A
		// peer that lost leadership meanwhile answers not_leader: ask the
		// next one.
		for attempt := 0; ; attempt++ {
			_, err := follower.host.Request(ctx, leader.node.ID(), consensus.ProtoPropose, trigger)
			if p2p.Code(err) == consensus.CodeForbidden {
				break
			}
			if p2p.Code(err) != consensus.CodeNotLeader || attempt >= 5 {
				t.Fatalf("forwarded trigger: %v, want %s", err, consensus.CodeForbidden)
			}
			if leader = f.c.waitLeader(); leader == follower {
				follower = f.c.other(leader)
				trigger = command(follower, ledger.Command{Schedule: &ledger.Schedule{}})
			}
		}
		if after := f.c.converge(); after != before {
			t.Fatalf("a refused trigger changed the state")
		}
		// The log too, unless an election (which appends its own entry)
		// came between.
		if leader == asked && f.c.waitLeader() == leader && leader.node.Raft().LastIndex() != last {
			t.Fatalf("a refused trigger reached the log: %d → %d", last, leader.node.Raft().LastIndex())
		}
	})
}
