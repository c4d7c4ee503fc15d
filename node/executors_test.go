package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/checkpoint"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestExecutorsEarnTrust: issue 15's attacks by member peers on a live
// federation of three real peers (process executors, so the bootstrapping
// peer's registration makes the federation live):
//   - ex-own, the owner of the machine running ex-sub's task, forges
//     task_ended for it with 10 GJ of "rapl" energy: refused as
//     implausible, the state hash unchanged, the task still running;
//   - ex-far, a member with no part in the task, pushes a checkpoint
//     archive for it to ex-own: refused (forbidden); the task's own
//     organisation may;
//
// and the task then ends normally, its energy the declared estimate.
func TestExecutorsEarnTrust(t *testing.T) {
	waitsMostly(t)
	peers := federation(t, "process", []string{"ex-sub", "ex-own", "ex-far"}, map[string]string{
		"ex-own": processMachine("y1", 10, 100),
	}, map[string]func(*config.Config){
		"ex-sub": func(c *config.Config) { ckConfig(c); c.Limit = "system" },
		"ex-own": ckConfig,
		"ex-far": ckConfig,
	})
	sub, own, far := peers[0], peers[1], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rules ledger.Rules
	own.n.cons.View(func(l *ledger.Ledger) { rules, _ = l.Rules() })
	if rules.Executors != ledger.ExecutorsLive || rules.MaxQueuedPerOrg != ledger.DefaultMaxQueuedPerOrg {
		t.Fatalf("rules %+v: want a live federation with the default cap", rules)
	}
	// The first peer's consensus settings became the federation's: its
	// peers compute every scheduling pass (issue 15).
	if s := rules.Scheduling; s == nil || *s != (ledger.Scheduling{Policy: "ehosep", CheckpointBlockMs: 300_000}) {
		t.Fatalf("scheduling settings %+v: want the consensus defaults", s)
	}

	task := sleepTask("4", 1000)
	task.Checkpointable = true
	id := submitOne(t, ctx, sub, task)[0]
	waitFor(t, 20*time.Second, id+" running on ex-own/y1", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "ex-own/y1"
	})

	// Other entries (reports, heartbeats) commit meanwhile: the forged end
	// is sent until one lands alone between two readings, where the hash
	// before and after it must be equal. A proposal the leader's dry run
	// refused never reached the log (Result.NotAppended): nothing else
	// applied between the readings, the hash is the same.
	quiet := false
	for range 50 {
		before, i1 := own.n.cons.Hash()
		res, err := own.n.propose(ctx, func(c *ledger.Command) {
			c.TaskEnded = &ledger.TaskEnded{Task: id, Machine: "ex-own/y1", EnergyMilliJ: ledger.MaxSegmentMilliJ, Source: ledger.EnergyRAPL}
		})
		if ledger.CodeOf(err) != ledger.CodeImplausible {
			t.Fatalf("forged end: %v, want implausible", err)
		}
		after, i2 := own.n.cons.Hash()
		if (!res.NotAppended && res.Index == i1+1 && i2 == res.Index) || (res.NotAppended && i2 == i1) {
			if after != before {
				t.Fatalf("the refused end changed the state hash: %s → %s", before, after)
			}
			quiet = true
			break
		}
	}
	if !quiet {
		t.Fatal("no forged end landed alone in 50 tries")
	}
	if tk := sub.task(id); tk.State != ledger.TaskRunning {
		t.Fatalf("%s is %s after the refused end", id, tk.State)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte("forged"), 0o600); err != nil {
		t.Fatal(err)
	}
	push := func(from *tnode) error {
		a, err := from.n.runner.CheckpointStore().PackDir(ctx, id, dir)
		if err != nil {
			t.Fatalf("pack on %s: %v", from.org, err)
		}
		return from.n.runner.CheckpointService().Push(ctx, own.n.ID(), id, a.Hash)
	}
	if err := push(far); p2p.Code(err) != checkpoint.CodeForbidden {
		t.Fatalf("push by an unrelated member: %v, want %s", err, checkpoint.CodeForbidden)
	}
	if err := push(sub); err != nil {
		t.Fatalf("push by the task's organisation: %v", err)
	}

	waitFor(t, 30*time.Second, id+" done", func() bool { return sub.task(id).State.Terminal() })
	tk := sub.task(id)
	s := tk.Segments[len(tk.Segments)-1]
	// 100 W over the run; the executor's run starts a little before its
	// start report and ends a little before its end report.
	if d := s.EndMs - s.StartMs; tk.State != ledger.TaskDone || s.Source != ledger.EnergyDeclared || s.EnergyMilliJ > 100*(d+1000) || s.EnergyMilliJ < 100*(d-1000) {
		t.Fatalf("%s is %s with segment %+v", id, tk.State, s)
	}
	var o ledger.OrgInfo
	sub.n.cons.View(func(l *ledger.Ledger) { o, _ = l.Org("ex-sub") })
	if o.Energy.UserMilliJ != s.EnergyMilliJ {
		t.Fatalf("ex-sub charged %d mJ, its run %d", o.Energy.UserMilliJ, s.EnergyMilliJ)
	}
}
