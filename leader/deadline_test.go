package leader

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestAdmitDeadlines: on real peers (libp2p, Raft), a soft-deadline task
// that no machine can finish in time is refused by the leader with
// CodeDeadlineUnmeetable, from a follower and on the leader itself, and
// changes nothing (state and log); one that a machine can finish is
// queued; a resend of an admitted keyed submission is answered from the
// ledger even once its deadline can no longer be met, while a new one
// with that deadline is refused; a submission of tasks each admissible
// alone but not together is refused as a set.
func TestAdmitDeadlines(t *testing.T) {
	var skewMs atomic.Int64 // the leader's clock runs this far ahead
	c := newCluster(t, 3, 2, func(_ *consensus.Config, l *Config) {
		l.DisableScheduler = true
		l.Now = func() time.Time { return time.Now().Add(time.Duration(skewMs.Load()) * time.Millisecond) }
	})
	leader := c.waitLeader()
	f := c.other(leader)
	// Machines run 1000 MFLOPS: 3 600 000 MFlop take 1 h, 1 h 6 min with
	// the 10 % margin.
	soft := func(key string, deadline time.Time) ledger.Command {
		return ledger.Command{SubmitTasks: &ledger.SubmitTasks{RequestID: key, Tasks: []ledger.TaskSpec{
			{SizeMFlop: 1000, Spec: ledger.Spec{Class: ledger.ClassNice}},
			{SizeMFlop: 3_600_000, Spec: ledger.Spec{Class: ledger.ClassSoftDeadline, DeadlineMs: deadline.UnixMilli()}},
		}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refused := func(t *testing.T, p *tpeer, data []byte) {
		t.Helper()
		before, beforeIdx := leader.node.Hash()
		lastIdx := leader.node.Raft().LastIndex()
		_, err := p.node.Propose(ctx, data)
		if got := p2p.Code(err); got != CodeDeadlineUnmeetable {
			t.Fatalf("code %q (%v), want %q", got, err, CodeDeadlineUnmeetable)
		}
		if after, afterIdx := leader.node.Hash(); after != before || afterIdx != beforeIdx {
			t.Fatal("a refused submission changed the state")
		}
		if got := leader.node.Raft().LastIndex(); got != lastIdx {
			t.Fatalf("a refused submission reached the log (last index %d, then %d)", lastIdx, got)
		}
	}
	for _, p := range []*tpeer{f, leader} {
		refused(t, p, command(p, soft("", time.Now().Add(time.Hour))))
	}
	key := "deadline-1"
	admitted := command(f, soft(key, time.Now().Add(2*time.Hour)))
	res, err := f.node.Propose(ctx, admitted)
	if err != nil || !res.Applied() || len(res.TaskIDs) != 2 {
		t.Fatalf("meetable submission: %+v, %v", res, err)
	}
	c.converge()
	// Judged together: seven such tasks, each of which alone one machine
	// finishes in time, cannot all finish within 2 h on the cluster's six
	// machines (two back to back take 2 h 12 min): refused as a set.
	batch := soft("", time.Now().Add(2*time.Hour))
	one := batch.SubmitTasks.Tasks[1]
	for range 6 {
		batch.SubmitTasks.Tasks = append(batch.SubmitTasks.Tasks, one)
	}
	refused(t, f, command(f, batch))
	if _, err := f.node.Propose(ctx, command(f, batch)); err == nil || !strings.Contains(err.Error(), "with earlier deadlines") {
		t.Fatalf("batch refusal %v: want it to name the tasks packed before", err)
	}
	// An hour later by the leader's clock, 2 h after the submission is too
	// late for a new task, but the admitted one is remembered.
	skewMs.Store(time.Hour.Milliseconds())
	again, err := f.node.Propose(ctx, admitted)
	if err != nil || !again.Replayed || again.TaskIDs[1] != res.TaskIDs[1] {
		t.Fatalf("resend of an admitted submission: %+v, %v", again, err)
	}
	refused(t, f, command(f, soft("deadline-2", time.Now().Add(2*time.Hour))))
}
