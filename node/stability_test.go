package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestOpportunisticReclaimAndMTBF is issue 20's opportunistic machine and
// machine stability with real peers (sim executors):
//   - o-sub's checkpointable task runs on o-own's opportunistic machine
//     y1. o-sub and o-far, not its owner, try to reclaim it: refused
//     (forbidden), and nothing changes. o-own reclaims it: the task is
//     stopped with a checkpoint, runs on o-far's z1 from there and
//     finishes; y1 is down (reclaimed) until o-own releases it.
//   - o-far's z1 is declared lost twice by its owner at scripted times;
//     each time o-far's heartbeat brings it back. The MTBF every peer's
//     ledger gives equals the one computed by hand from those times.
func TestOpportunisticReclaimAndMTBF(t *testing.T) {
	waitsMostly(t)
	peers := federation(t, "sim", []string{"o-sub", "o-own", "o-far"}, map[string]string{
		"o-own": simMachine("y1", 100, 100) + "    opportunistic: true\n",
		"o-far": simMachine("z1", 50, 150),
	}, map[string]func(*config.Config){
		"o-sub": func(c *config.Config) { ckConfig(c); c.Limit = "system" },
		"o-own": ckConfig,
		"o-far": ckConfig,
	})
	sub, own, far := peers[0], peers[1], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, p := range peers {
		waitFor(t, 10*time.Second, p.org+" tracks stability", func() bool {
			var ok bool
			p.n.cons.View(func(l *ledger.Ledger) { _, ok = l.StabilityTracked() })
			return ok && p.machine("o-own/y1").Opportunistic
		})
	}

	// 100 s simulated on y1 (2.5 s real at compression 40).
	const size = 10_000_000
	id := submitOne(t, ctx, sub, api.SubmitTask{SizeMFlop: size, Checkpointable: true})[0]
	waitFor(t, 20*time.Second, id+" running on o-own", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "o-own/y1"
	})
	time.Sleep(time.Second)
	for _, p := range []*tnode{sub, far} {
		_, err := p.n.ReclaimMachine(ctx, api.ReclaimRequest{Machine: "o-own/y1", Reclaimed: true})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
			t.Fatalf("%s reclaims o-own's machine: %v, want forbidden", p.org, err)
		}
	}
	if tk, m := sub.task(id), sub.machine("o-own/y1"); tk.State != ledger.TaskRunning || tk.Machine != "o-own/y1" || len(tk.Segments) != 1 || m.Reclaimed || m.Reclaims != 0 {
		t.Fatalf("after refused reclaims: task %s on %s (%d runs), machine %+v", tk.State, tk.Machine, len(tk.Segments), m)
	}
	v, err := own.n.ReclaimMachine(ctx, api.ReclaimRequest{Machine: "y1", Reclaimed: true})
	if err != nil || !v.Reclaimed || v.Task != "" || v.Stability == nil || v.Stability.Reclaims != 1 {
		t.Fatalf("owner's reclaim: %+v, %v", v, err)
	}
	waitFor(t, 20*time.Second, id+" running on o-far", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "o-far/z1"
	})
	ck := sub.task(id).Checkpoint
	if ck == nil || ck.ProgressMFlop <= 0 || ck.ProgressMFlop >= size {
		t.Fatalf("checkpoint %+v", ck)
	}
	waitFor(t, 30*time.Second, id+" done", func() bool { return sub.task(id).State == ledger.TaskDone })
	segs := sub.task(id).Segments
	if len(segs) != 2 || segs[0].Machine != "o-own/y1" || segs[0].Outcome != ledger.OutcomePreempted || segs[1].Machine != "o-far/z1" || segs[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", segs)
	}
	if m := sub.machine("o-own/y1"); !m.Reclaimed || m.Task != "" {
		t.Fatalf("y1 after its task left: %+v", m)
	}
	if v, err := own.n.ReclaimMachine(ctx, api.ReclaimRequest{Machine: "y1"}); err != nil || v.Reclaimed {
		t.Fatalf("release: %+v, %v", v, err)
	}

	// Scripted failures of z1, each brought back by o-far's heartbeat.
	const z = "o-far/z1"
	start := far.machine(z).SinceMs
	var lost, back []int64
	for i := range 2 {
		time.Sleep(300 * time.Millisecond)
		at := time.Now().UnixMilli()
		if _, err := far.n.propose(ctx, func(c *ledger.Command) { c.AtMs = at; c.MachineLost = &ledger.MachineLostCmd{Machine: z} }); err != nil {
			t.Fatalf("declare z1 lost (%d): %v", i, err)
		}
		waitFor(t, 10*time.Second, "z1 back up", func() bool { return far.machine(z).State == ledger.MachineUp })
		lost, back = append(lost, at), append(back, far.machine(z).SinceMs)
	}
	now := time.Now().UnixMilli() + 1000
	up := (lost[0] - start) + (lost[1] - back[0]) + (now - back[1])
	down := (back[0] - lost[0]) + (back[1] - lost[1])
	want := ledger.Stability{Tracked: true, Available: true, UpMs: up, DownMs: down, Failures: 2, MTBFMs: up / 2, AvailabilityPermille: up * 1000 / (up + down)}
	t.Logf("z1 from %d: lost %v, back %v: %+v", start, lost, back, want)
	for _, p := range peers {
		waitFor(t, 10*time.Second, p.org+" applied z1's return", func() bool { return p.machine(z).SinceMs == back[1] })
		var got ledger.Stability
		p.n.cons.View(func(l *ledger.Ledger) { got, _ = l.MTBF(z, now) })
		if got != want {
			t.Fatalf("%s: MTBF of z1 %+v, want %+v", p.org, got, want)
		}
	}
}
