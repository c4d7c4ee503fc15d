package ledger

import "testing"

// The fixture of the tests that drive a small federation to completion
// the way its peers do (TestEHOSEPDrivesTheLedger,
// TestScheduledRunToCompletion): every entry goes through the encoder and
// to a second ledger, three organisations share the grid, and the test's
// executors play the machine owners.

// runState is what the test's executor remembers about a run it started.
type runState struct {
	startMs        int64
	startRemaining int64
	lastCkMs       int64
}

// mirroredApply returns an apply for f that encodes c with the encoder's
// checks, applies it to f and to a second ledger, and fails the test
// unless both agree on the hash and c was applied.
func mirroredApply(t *testing.T, f *fed) func(Command) Result {
	mirror := New()
	return func(c Command) Result {
		t.Helper()
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("encode %s: %v", c.Kind(), err)
		}
		r := f.raw(b)
		mirror.Apply(f.idx, b)
		if mirror.Hash() != f.l.Hash() {
			t.Fatalf("index %d: the two ledgers disagree", f.idx)
		}
		if !r.Applied() {
			t.Fatalf("index %d: %s rejected: %v", f.idx, c.Kind(), r.Err)
		}
		return r
	}
}

// driveOrgs are the organisations of driveFederation.
var driveOrgs = []string{"u1", "u2", "u3"}

// driveFederation registers at time 0, with apply, u1 (rules r; 4 machines
// of 2000 MFLOPS, 200 W) and u2 (4 of 1000 MFLOPS, 100 W), both under 10
// kW so that no limit binds, and u3 (2 of 1500 MFLOPS, 150 W) whose 450 W
// limit is below the others': algorithm 5 then preempts for it as long as
// it is in deficit. u1 and u2 submit 12 tasks each (driveSizes(12, 20_000)).
func driveFederation(apply func(Command) Result, r *Rules) {
	const whole = 10_000_000
	specs := func(n int, mflops, mw int64) []MachineSpec {
		out := make([]MachineSpec, n)
		for i := range out {
			out[i] = MachineSpec{Name: "n" + string(rune('0'+i)), MFLOPS: mflops, BusyMilliW: mw}
		}
		return out
	}
	for _, c := range []Command{
		registerRules("u1", whole, r, specs(4, 2000, 200_000)...),
		register("u2", whole, specs(4, 1000, 100_000)...),
		register("u3", 450_000, specs(2, 1500, 150_000)...),
	} {
		c.AtMs = 0
		apply(c)
	}
	apply(submit("u1", 0, driveSizes(12, 20_000)...))
	apply(submit("u2", 0, driveSizes(12, 20_000)...))
}

// driveSizes are the sizes of n tasks from base MFlop up, 10 GFlop apart,
// in turns of five.
func driveSizes(n int, base int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = base + int64(i%5)*10_000
	}
	return out
}

// executors plays the machine owners of orgs at now: it reports the stops
// the ledger waits for, starts what is assigned, ends a running task once
// its machine's speed did its remaining work and checkpoints it every 5 s
// before that. runs remembers the runs started.
func executors(t *testing.T, f *fed, apply func(Command) Result, runs map[string]*runState, now int64, orgs []string) {
	t.Helper()
	for _, org := range orgs {
		for _, p := range f.l.PendingStops(org) {
			m := mustMachine(t, f.l, p.Machine)
			apply(stopped(org, p.Task, p.Machine, now, declaredMilliJ(m.BusyMilliW, p.StartMs, now), nil))
		}
		for _, a := range f.l.Allocations(org) {
			tk, m := a.Task, a.Machine
			switch tk.State {
			case TaskAssigned:
				apply(started(org, tk.ID, m.ID, now))
				runs[tk.ID] = &runState{startMs: now, startRemaining: tk.RemainingMFlop, lastCkMs: now}
			case TaskRunning:
				rs := runs[tk.ID]
				done := (now - rs.startMs) * m.MFLOPS / 1000
				if done >= rs.startRemaining {
					apply(ended(org, tk.ID, m.ID, now, declaredMilliJ(m.BusyMilliW, rs.startMs, now), false))
				} else if now-rs.lastCkMs >= 5000 {
					apply(ckpt(org, tk.ID, m.ID, now, tk.SizeMFlop-rs.startRemaining+done))
					rs.lastCkMs = now
				}
			}
		}
	}
}
