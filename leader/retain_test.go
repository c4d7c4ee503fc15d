package leader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
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
