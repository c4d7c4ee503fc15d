package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
)

// Executors earn trust (issue 15): reports the ledger refuses as
// implausible, on a real single-peer federation (libp2p on loopback, Raft
// on bolt, the EHOSEP leader) with rules.

// lyingExecutor is a test-only misbehaving executor: it runs tasks with
// the wrapped executor and rewrites every Result before the runner sees
// it, as an executor modified by its owner would.
type lyingExecutor struct {
	executor.Executor
	out chan executor.Result
}

func lying(inner executor.Executor, rewrite func(*executor.Result)) *lyingExecutor {
	e := &lyingExecutor{Executor: inner, out: make(chan executor.Result)}
	go func() {
		defer close(e.out)
		for r := range inner.Results() {
			rewrite(&r)
			e.out <- r
		}
	}()
	return e
}

func (e *lyingExecutor) Results() <-chan executor.Result { return e.out }

func withRules(mode ledger.ExecutorMode) func(*ledger.RegisterOrg) {
	return func(r *ledger.RegisterOrg) { r.Rules = &ledger.Rules{Executors: mode} }
}

// simExecutorAt is a simulated executor of machines, compression times
// faster than real time.
func simExecutorAt(t *testing.T, machines []executor.MachineConfig, compression float64) executor.Executor {
	t.Helper()
	e, err := executor.NewSimExecutor(executor.SimConfig{Machines: machines, Compression: compression, Logger: testLogger("sim")})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSimulatedExecutorOnLiveFederation is the report: ten tasks of
// 1 PFlop "done" within a second each by a simulated executor on a live
// federation. The ledger refuses the simulated energy, then the declared
// estimate for a run that short; the runner reports each task failed,
// saying why, with the declared estimate, so that none stays running.
func TestSimulatedExecutorOnLiveFederation(t *testing.T) {
	const pflop = 1_000_000_000 // MFlop
	l := startLedgerWith(t, simMachines(10), withRules(ledger.ExecutorsLive), nil)
	// 10⁹ MFlop at 10 GFLOPS is 10⁵ s: half a second here.
	r := newRunner(t, l.config(simExecutorAt(t, l.machines, 200_000)))
	r.Start()
	sizes := make([]int64, 10)
	for i := range sizes {
		sizes[i] = pflop
	}
	ids := l.submit(sizes...)
	for _, id := range ids {
		waitFor(t, 30*time.Second, id+" ended", func() bool { return l.task(id).State.Terminal() })
		tk := l.task(id)
		if tk.State != ledger.TaskFailed || !strings.Contains(tk.Reason, "implausible") || !strings.Contains(tk.Reason, "done after") {
			t.Fatalf("%s is %s (%q): want failed as implausible", id, tk.State, tk.Reason)
		}
		s := tk.Segments[len(tk.Segments)-1]
		if s.Source != ledger.EnergyDeclared || s.Outcome != ledger.OutcomeFailed || s.EnergyMilliJ > 100*(s.EndMs-s.StartMs) {
			t.Fatalf("%s: segment %+v, want the declared estimate of 100 W over %d ms", id, s, s.EndMs-s.StartMs)
		}
	}
}

// TestLyingExecutorEnergyIsReplaced: an executor reporting 10 GJ of
// "rapl" energy for a second's run gets the report refused; the runner
// resends it with the declared estimate and the task is done. A forged
// end with absurd energy, proposed by the machine's owner for a running
// task, is refused and leaves the state hash unchanged.
func TestLyingExecutorEnergyIsReplaced(t *testing.T) {
	l := startLedgerWith(t, simMachines(1), withRules(ledger.ExecutorsLive), nil)

	id, machine, _ := startedByAnEarlierDaemon(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, _ := l.cons.Hash()
	_, err := l.propose(ctx, func(c *ledger.Command) {
		c.TaskEnded = &ledger.TaskEnded{Task: id, Machine: machine, EnergyMilliJ: ledger.MaxSegmentMilliJ, Source: ledger.EnergyRAPL}
	})
	if ledger.CodeOf(err) != ledger.CodeImplausible {
		t.Fatalf("forged end: %v, want implausible", err)
	}
	if after, _ := l.cons.Hash(); after != before || l.task(id).State != ledger.TaskRunning {
		t.Fatalf("the refused end changed the state (hash %s → %s, %s is %s)", before, after, id, l.task(id).State)
	}
	if _, err := l.propose(ctx, func(c *ledger.Command) { c.CancelTask = &ledger.CancelTask{Task: id} }); err != nil {
		t.Fatal(err)
	}

	exec := lying(simExecutorAt(t, l.machines, 1), func(r *executor.Result) {
		r.EnergyMilliJ, r.EnergySource = ledger.MaxSegmentMilliJ, executor.EnergyRAPL
	})
	run := newRunner(t, l.config(exec))
	run.Start()
	// 10,000 MFlop at 10 GFLOPS: one second.
	next := l.submit(10_000)[0]
	waitFor(t, 30*time.Second, next+" done", func() bool { return l.task(next).State.Terminal() })
	tk := l.task(next)
	s := tk.Segments[len(tk.Segments)-1]
	if tk.State != ledger.TaskDone || s.Source != ledger.EnergyDeclared || s.EnergyMilliJ > 100*(s.EndMs-s.StartMs) || s.EnergyMilliJ < 100*900 {
		t.Fatalf("%s is %s with segment %+v: want done with the declared estimate of about 100 J", next, tk.State, s)
	}
}

// TestSlowMachineIsCorrected: a machine declared at 10⁶ GFLOPS that runs at
// 10 attracts every task; once it has run three, its effective speed is
// the observed one, it is flagged, and the next task goes to the honest
// machine. (A simulated federation: the executor simulates the machine's
// real speed in real time.)
func TestSlowMachineIsCorrected(t *testing.T) {
	machines := []executor.MachineConfig{
		{Name: "fast", GFLOPS: 10, BusyWatts: 200},
		{Name: "honest", GFLOPS: 10, BusyWatts: 50},
	}
	l := startLedgerWith(t, machines, func(r *ledger.RegisterOrg) {
		r.Rules = &ledger.Rules{Executors: ledger.ExecutorsSimulated}
		r.Machines = []ledger.MachineSpec{
			{Name: "fast", MFLOPS: 1_000_000_000, BusyMilliW: 200_000},
			{Name: "honest", MFLOPS: 10_000, BusyMilliW: 50_000},
		}
	}, nil)
	run := newRunner(t, l.config(simExecutorAt(t, machines, 1)))
	run.Start()
	for i := range ledger.ObserveMinRuns {
		// 55,000 MFlop at the real 10 GFLOPS: 5.5 s.
		id := l.submit(55_000)[0]
		waitFor(t, 30*time.Second, id+" done", func() bool { return l.task(id).State == ledger.TaskDone })
		if m := l.task(id).Segments[0].Machine; m != "alpha/fast" {
			t.Fatalf("run %d went to %s before the correction", i, m)
		}
	}
	var (
		m     ledger.Machine
		viewM int64
	)
	l.cons.View(func(lg *ledger.Ledger) {
		m, _ = lg.Machine("alpha/fast")
		s, _ := lg.PolicyView(time.Now().UnixMilli(), 0)
		for _, pm := range s.Machines {
			if pm.ID == "alpha/fast" {
				viewM = pm.MFLOPS
			}
		}
	})
	if eff := m.EffectiveMFLOPS(); m.ObservedRuns != 3 || eff > 10_000 || eff < 5_000 || !m.SpeedMismatch() || viewM != eff {
		t.Fatalf("machine %+v: effective %d MFLOPS (policy view %d), mismatch %v", m, eff, viewM, m.SpeedMismatch())
	}
	id := l.submit(55_000)[0]
	waitFor(t, 30*time.Second, id+" placed", func() bool { return l.task(id).Machine != "" || l.task(id).State.Terminal() })
	if got := l.task(id).Machine; got != "alpha/honest" {
		t.Fatalf("after the correction the task went to %q", got)
	}
}

// TestQueueCap: on a federation whose rules cap an organisation's
// unfinished tasks at 3, a submit over the cap is refused with queue_full
// and changes nothing; a task that ends makes room.
func TestQueueCap(t *testing.T) {
	l := startLedgerWith(t, simMachines(1), func(r *ledger.RegisterOrg) {
		r.Rules = &ledger.Rules{Executors: ledger.ExecutorsSimulated, MaxQueuedPerOrg: 3}
	}, nil)
	ids := l.submit(10_000, 10_000, 10_000)
	waitFor(t, 20*time.Second, ids[0]+" assigned", func() bool { return l.task(ids[0]).State == ledger.TaskAssigned })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, _ := l.cons.Hash()
	_, err := l.propose(ctx, func(c *ledger.Command) {
		c.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1}}}
	})
	if ledger.CodeOf(err) != ledger.CodeQueueFull {
		t.Fatalf("submit over the cap: %v, want queue_full", err)
	}
	if after, _ := l.cons.Hash(); after != before {
		t.Fatalf("the refused submit changed the state: %s → %s", before, after)
	}
	if _, err := l.propose(ctx, func(c *ledger.Command) { c.CancelTask = &ledger.CancelTask{Task: ids[2]} }); err != nil {
		t.Fatal(err)
	}
	l.submit(1)
}
