package leader

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestRetentionDuty: on a federation with a retention rule, only the
// leader's own duty forgets finished tasks: a forget_tasks from a
// follower, proposed or forwarded, is refused by admission and never
// reaches the log; the leader's duty then forgets the task on every peer
// (one hash everywhere), and a task still queued stays.
func TestRetentionDuty(t *testing.T) {
	rules := &ledger.Rules{Executors: ledger.ExecutorsSimulated, Retention: &ledger.Retention{AfterMs: 1}}
	c := newClusterWithRules(t, 3, 1, rules, func(_ *consensus.Config, l *Config) {
		l.DisableScheduler = true
		l.RetentionInterval = 50 * time.Millisecond
	})
	leader := c.waitLeader()
	f := c.other(leader)
	ids := submit(t, f, 2)
	forget := command(f, ledger.Command{ForgetTasks: &ledger.ForgetTasks{Tasks: ids[:1]}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, send := range map[string]func() error{
		"proposed by a follower": func() error { _, err := f.node.Propose(ctx, forget); return err },
		"forwarded to the leader": func() error {
			_, err := f.host.Request(ctx, leader.node.ID(), consensus.ProtoPropose, forget)
			return err
		},
	} {
		last := leader.node.Raft().LastIndex()
		if got := p2p.Code(send()); got != consensus.CodeForbidden {
			t.Fatalf("%s: code %q, want %q", name, got, consensus.CodeForbidden)
		}
		if leader.node.Raft().LastIndex() != last {
			t.Fatalf("%s: a refused forget_tasks reached the log", name)
		}
	}
	if res := mustPropose(t, f, ledger.Command{CancelTask: &ledger.CancelTask{Task: ids[0]}}); !res.Applied() {
		t.Fatalf("cancel: %v", res.Err)
	}
	eventually(t, 20*time.Second, func() error {
		for _, p := range c.running() {
			var ok bool
			p.node.View(func(l *ledger.Ledger) { _, ok = l.Task(ids[0]) })
			if ok {
				return fmt.Errorf("%s still holds %s", p.name, ids[0])
			}
		}
		return nil
	})
	c.converge()
	for _, p := range c.running() {
		var queued bool
		var forgotten ledger.ForgottenTotals
		p.node.View(func(l *ledger.Ledger) {
			tk, ok := l.Task(ids[1])
			queued = ok && tk.State == ledger.TaskQueued
			forgotten = l.Forgotten(f.org)
		})
		if !queued || forgotten.Tasks != 1 {
			t.Fatalf("%s: %s queued %v, forgotten %+v", p.name, ids[1], queued, forgotten)
		}
	}
}

// versionAgents is what each peer announced, as the test sets it: a peer
// in old announces nothing (a build from before announcements: version
// 1), the others this build's agent.
type versionAgents struct {
	mu  sync.Mutex
	old map[peer.ID]bool
}

func (a *versionAgents) AgentVersion(id peer.ID) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.old[id] {
		return ""
	}
	return UserAgent("test")
}

func (a *versionAgents) set(id peer.ID, old bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.old[id] = old
}

// TestRetentionWaitsForEveryMembersVersion: the leader's own forget_tasks
// (command version 2), appended without admission, passes the version
// rule all the same: while a member announces only version 1 the duty
// appends nothing (the log does not move, the task stays on every peer);
// once every member announces version 2 it forgets the task.
func TestRetentionWaitsForEveryMembersVersion(t *testing.T) {
	agents := &versionAgents{old: map[peer.ID]bool{}}
	// Until the cluster is formed (its registrations, of version 2 with
	// the retention rule), no member is checked.
	var formed atomic.Pointer[cluster]
	members := func() ([]consensus.Member, error) {
		c := formed.Load()
		if c == nil {
			return nil, nil
		}
		for _, p := range c.running() {
			if p.node.IsLeader() {
				return p.node.Members()
			}
		}
		return nil, fmt.Errorf("no leader")
	}
	rules := &ledger.Rules{Executors: ledger.ExecutorsSimulated, Retention: &ledger.Retention{AfterMs: 1}}
	c := newClusterWithRules(t, 3, 1, rules, func(_ *consensus.Config, l *Config) {
		l.DisableScheduler = true
		l.RetentionInterval = time.Hour // the test runs the duty's rounds itself
		l.Members, l.Agents = members, agents
	})
	formed.Store(c)
	leader := c.waitLeader()
	f := c.other(leader)
	ids := submit(t, f, 1)
	if res := mustPropose(t, f, ledger.Command{CancelTask: &ledger.CancelTask{Task: ids[0]}}); !res.Applied() {
		t.Fatalf("cancel: %v", res.Err)
	}
	c.converge()
	agents.set(f.node.ID(), true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := countingReplica{Replica: leader.node, p: leader}
	last, appends := leader.node.Raft().LastIndex(), leader.appends.Load()
	if more, _ := leader.lead.forgetOnce(ctx, r); more || leader.appends.Load() != appends || leader.node.Raft().LastIndex() != last {
		t.Fatal("the leader appended a forget_tasks while a member applies only version 1")
	}
	var held bool
	leader.node.View(func(l *ledger.Ledger) { _, held = l.Task(ids[0]) })
	if !held {
		t.Fatal("the task left the state")
	}
	agents.set(f.node.ID(), false)
	leader.lead.forgetOnce(ctx, r)
	if leader.appends.Load() != appends+1 {
		t.Fatal("no forget_tasks once every member applies version 2")
	}
	c.converge()
	for _, p := range c.running() {
		p.node.View(func(l *ledger.Ledger) { _, held = l.Task(ids[0]) })
		if held {
			t.Fatalf("%s still holds %s", p.name, ids[0])
		}
	}
}

func TestCommandVersion(t *testing.T) {
	for _, tc := range []struct {
		data string
		want int
	}{
		{`{"v":2,"org":"a"}`, 2},
		{`{"org":"a","v":3}`, 3},
		{`{"v":1}`, 1},
		{`[]`, 0},
		{`nope`, 0},
		{`{"org":"a"}`, 0},
	} {
		if got := commandVersion([]byte(tc.data)); got != tc.want {
			t.Errorf("commandVersion(%s) = %d, want %d", tc.data, got, tc.want)
		}
	}
}

// TestRestartProposesNoStaleForget: a leader that restarts replays the
// entries committed before it while its duties already run. Its retention
// duty waits for a barrier of its term first, so it never computes a
// forget_tasks from a state half-way through the replay (one naming tasks
// a later replayed entry forgets, refused by every peer as unknown_task:
// a wasted entry after each restart). The replay is slowed here (one
// entry a state-machine batch, 40 ms after each) so that the duty ticks
// many times during it.
func TestRestartProposesNoStaleForget(t *testing.T) {
	rules := &ledger.Rules{Executors: ledger.ExecutorsSimulated, Retention: &ledger.Retention{AfterMs: 1}}
	c := newClusterWithRules(t, 1, 1, rules, func(cc *consensus.Config, l *Config) {
		cc.MaxAppendEntries = 1
		l.DisableScheduler = true
		l.RetentionInterval = 20 * time.Millisecond
	})
	p := c.waitLeader()
	ids := submit(t, p, 12)
	gone := func(id string) func() error {
		return func() error {
			var ok bool
			p.node.View(func(l *ledger.Ledger) { _, ok = l.Task(id) })
			if ok {
				return fmt.Errorf("%s not forgotten yet", id)
			}
			return nil
		}
	}
	// One cancel and one forget after another: every prefix of the replay
	// has a cancelled task that the next entry forgets.
	for _, id := range ids[:len(ids)-1] {
		if res := mustPropose(t, p, ledger.Command{CancelTask: &ledger.CancelTask{Task: id}}); !res.Applied() {
			t.Fatalf("cancel %s: %v", id, res.Err)
		}
		eventually(t, 20*time.Second, gone(id))
	}
	if _, refused := p.appliedKinds(); refused[ledger.KindForgetTasks] != 0 {
		t.Fatalf("before the restart: %d forget_tasks refused", refused[ledger.KindForgetTasks])
	}
	last := p.node.AppliedIndex()

	p.stop()
	p.onApply = func(res *ledger.Result) {
		if res.Index <= last {
			time.Sleep(40 * time.Millisecond)
		}
	}
	p.start()
	c.waitLeader()
	// The duty runs after the restart: the last task, cancelled now, is
	// forgotten.
	eventually(t, 20*time.Second, func() error {
		if p.node.AppliedIndex() < last {
			return fmt.Errorf("replayed to %d of %d", p.node.AppliedIndex(), last)
		}
		return nil
	})
	if res := mustPropose(t, p, ledger.Command{CancelTask: &ledger.CancelTask{Task: ids[len(ids)-1]}}); !res.Applied() {
		t.Fatalf("cancel after the restart: %v", res.Err)
	}
	eventually(t, 20*time.Second, gone(ids[len(ids)-1]))
	applied, refused := p.appliedKinds()
	if refused[ledger.KindForgetTasks] != 0 {
		t.Fatalf("after the restart: %d forget_tasks refused (computed from a state before the replay caught up)", refused[ledger.KindForgetTasks])
	}
	if applied[ledger.KindForgetTasks] != len(ids) {
		t.Fatalf("%d forget_tasks applied, want one per task (%d)", applied[ledger.KindForgetTasks], len(ids))
	}
}
