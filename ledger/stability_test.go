package ledger

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

func reclaim(org, machine string, at int64, reclaimed bool) Command {
	c := act(org, at)
	c.ReclaimMachine = &ReclaimMachine{Machine: machine, Reclaimed: reclaimed}
	c.V, _ = RequiredVersion(&c)
	return c
}

// stableFed registers uni-a at atMs with an opportunistic machine o1 and a
// dedicated d1 (a version-3 registration: tracking starts there), and
// uni-b with x1.
func stableFed(t testing.TB, atMs int64) *fed {
	f := newFed(t)
	o1 := mspec("o1", 1000, 100_000)
	o1.Opportunistic = true
	c := register("uni-a", 300_000, o1, mspec("d1", 2000, 150_000))
	c.AtMs = atMs
	f.must(c)
	c = register("uni-b", 200_000, mspec("x1", 1500, 120_000))
	c.AtMs = atMs
	f.must(c)
	return f
}

// TestStabilityHandWorked: a history worked by hand, with its policy.MTBF.
func TestStabilityHandWorked(t *testing.T) {
	f := stableFed(t, 1000)
	id := "uni-a/o1"
	f.must(lost("uni-a", id, 5000))            // up 4000, failure 1
	f.must(heartbeat("uni-a", id, 7000))       // down 2000
	f.must(heartbeat("uni-a", id, 8000))       // still up: nothing
	f.must(reclaim("uni-a", id, 10000, true))  // up 3000, reclaim 1
	f.must(lost("uni-b", id, 10500))           // lost while reclaimed: nothing
	f.must(heartbeat("uni-a", id, 11000))      // up again but still reclaimed
	f.must(reclaim("uni-a", id, 12000, false)) // down 2000
	f.must(lost("uni-b", id, 15000))           // up 3000, failure 2
	f.must(heartbeat("uni-a", id, 14000))      // the clock went back: adds zero
	st, ok := f.l.MTBF(id, 20000)              // up 6000 since 15000
	want := Stability{Tracked: true, Available: true, UpMs: 4000 + 3000 + 3000 + 5000, DownMs: 2000 + 2000, Failures: 2, Reclaims: 1, MTBFMs: 15000 / 3, AvailabilityPermille: 15000 * 1000 / 19000}
	if !ok || st != want {
		t.Fatalf("MTBF = %+v, want %+v", st, want)
	}
	m, _ := f.l.Machine(id)
	if m.SinceMs != 15000 || m.UpMs != 10000 || m.DownMs != 4000 || m.Failures != 2 || m.Reclaims != 1 {
		t.Fatalf("record %+v", m)
	}
	// A dedicated machine never interrupted: its MTBF is its up time.
	if st, _ := f.l.MTBF("uni-a/d1", 20000); st.MTBFMs != 19000 || st.Failures != 0 || st.AvailabilityPermille != 1000 {
		t.Fatalf("d1: %+v", st)
	}
	// The same history as policy.MTBF sees it (the clock going back is
	// where they differ: policy.MTBF refuses it, so it ends at 15000).
	p, err := policy.MTBF([]policy.AvailabilityEvent{{AtMs: 1000, Up: true}, {AtMs: 5000}, {AtMs: 7000, Up: true}, {AtMs: 10000}, {AtMs: 12000, Up: true}, {AtMs: 15000}, {AtMs: 15000, Up: true}}, 20000)
	if err != nil || p.UpMs != want.UpMs || p.DownMs != want.DownMs || p.Failures != 3 || p.MTBFMs != want.MTBFMs {
		t.Fatalf("policy.MTBF = %+v, %v", p, err)
	}
}

// TestStabilityOldLogFoldsNothing: a federation of version-1 commands only
// tracks nothing (its states hash as an older build's did), until its first
// version-3 command, where every machine's history starts.
func TestStabilityOldLogFoldsNothing(t *testing.T) {
	f := base(t)
	f.must(lost("uni-a", "uni-a/m1", 3000))
	f.must(heartbeat("uni-a", "uni-a/m1", 4000))
	if st, _ := f.l.MTBF("uni-a/m1", 5000); st != (Stability{}) {
		t.Fatalf("untracked MTBF %+v", st)
	}
	if _, ok := f.l.StabilityTracked(); ok || bytes.Contains(snapshotOf(t, f.l), []byte("since_ms")) {
		t.Fatal("a version-1 log tracks stability")
	}
	o := mspec("o9", 1000, 1000)
	o.Opportunistic = true
	c := act("uni-a", 6000)
	c.AddMachine = &AddMachine{Machine: o}
	f.must(c)
	if from, ok := f.l.StabilityTracked(); !ok || from != 6000 {
		t.Fatalf("tracked from %d, %v", from, ok)
	}
	f.must(lost("uni-a", "uni-a/m1", 9000))
	if st, _ := f.l.MTBF("uni-a/m1", 10000); st.UpMs != 3000 || st.DownMs != 1000 || st.Failures != 1 {
		t.Fatalf("m1 after tracking began: %+v", st)
	}
	if st, _ := f.l.MTBF("uni-a/o9", 10000); st.UpMs != 4000 {
		t.Fatalf("o9: %+v", st)
	}
	if _, ok := f.l.MTBF("uni-a/nope", 1); ok {
		t.Fatal("an unknown machine has a stability")
	}
}

// TestStabilityFoldEqualsMTBF: on random histories of losses, heartbeats,
// reclaims and releases (some repeated, some refused), the fold equals
// policy.MTBF over the availability events the same commands produce, at
// every step, and survives a snapshot.
func TestStabilityFoldEqualsMTBF(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 5))
	for run := range 300 {
		start := 1 + r.Int64N(5000)
		f := stableFed(t, start)
		id := "uni-a/o1"
		events := []policy.AvailabilityEvent{{AtMs: start, Up: true}}
		failures := int64(0)
		at := start
		for range 1 + r.IntN(40) {
			at += r.Int64N(3000)
			was := availableIn(f.l, id)
			var c Command
			switch r.IntN(4) {
			case 0:
				c = lost([]string{"uni-a", "uni-b"}[r.IntN(2)], id, at)
			case 1:
				c = heartbeat("uni-a", id, at)
			default:
				c = reclaim("uni-a", id, at, r.IntN(2) == 0)
			}
			res := f.apply(c)
			if c.MachineLost != nil && was && res.Applied() {
				failures++
			}
			if now := availableIn(f.l, id); now != was {
				events = append(events, policy.AvailabilityEvent{AtMs: at, Up: now})
			}
			now := at + r.Int64N(1000)
			want, err := policy.MTBF(events, now)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := f.l.MTBF(id, now)
			if got.UpMs != want.UpMs || got.DownMs != want.DownMs || got.Failures+got.Reclaims != int64(want.Failures) || got.Failures != failures || got.MTBFMs != want.MTBFMs {
				t.Fatalf("run %d at %d: fold %+v, policy.MTBF %+v over %v (failures %d)", run, now, got, want, events, failures)
			}
		}
		restored := New()
		if err := restored.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil || restored.Hash() != f.l.Hash() {
			t.Fatalf("run %d: restore: %v", run, err)
		}
		a, _ := f.l.MTBF(id, at+5)
		b, _ := restored.MTBF(id, at+5)
		if a != b {
			t.Fatalf("run %d: restored %+v, want %+v", run, b, a)
		}
	}
}

func availableIn(l *Ledger, id string) bool {
	m, _ := l.Machine(id)
	return m.available()
}

// TestReclaim: the owner's reclaim evicts the running task (stopped as a
// preempted one, back to the queue), the machine takes no decision until
// released; a dedicated machine or another organisation's is refused and
// changes nothing.
func TestReclaim(t *testing.T) {
	f := stableFed(t, 1000)
	f.must(submit("uni-b", 2000, 10_000, 5_000))
	f.must(decide("uni-b", 2500, alloc("uni-b-1", "uni-a/o1")))
	f.must(started("uni-a", "uni-b-1", "uni-a/o1", 3000))

	before := f.l.Hash()
	for _, tc := range []struct {
		name string
		c    Command
		want Code
	}{
		{"another organisation", reclaim("uni-b", "uni-a/o1", 4000, true), CodeNotOwner},
		{"a dedicated machine", reclaim("uni-a", "uni-a/d1", 4000, true), CodeBadState},
		{"an unknown machine", reclaim("uni-a", "uni-a/zz", 4000, true), CodeUnknownMachine},
	} {
		if err := f.l.Check(&tc.c); CodeOf(err) != tc.want {
			t.Errorf("%s: check %v, want %s", tc.name, err, tc.want)
		}
		if r := f.apply(tc.c); r.Err == nil || r.Err.Code != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, r.Err, tc.want)
		}
	}
	if f.l.Hash() != before {
		t.Fatal("a refused reclaim changed the state")
	}

	r := f.must(reclaim("uni-a", "uni-a/o1", 4000, true))
	task, _ := f.l.Task("uni-b-1")
	m, _ := f.l.Machine("uni-a/o1")
	if task.State != TaskQueued || task.Machine != "" || m.Task != "" || !m.Reclaimed {
		t.Fatalf("after the reclaim: task %s on %q, machine %+v", task.State, task.Machine, m)
	}
	if s := task.Segments[len(task.Segments)-1]; s.Outcome != OutcomePreempting {
		t.Fatalf("the run is %s, want preempting (stopped with a checkpoint)", s.Outcome)
	}
	if len(r.Changes) != 1 || r.Changes[0].Action != ActionStop || r.Changes[0].Reason != "reclaimed" {
		t.Fatalf("changes %+v", r.Changes)
	}
	if res := f.apply(decide("uni-b", 4100, alloc("uni-b-1", "uni-a/o1"))); res.AcceptedDecisions() != 0 || res.Decisions[0].Err.Code != CodeMachineDown {
		t.Fatalf("a decision on a reclaimed machine: %+v", res.Decisions)
	}
	_, vm := f.l.PolicyView(4100, 0)
	for _, pm := range vm.Machines {
		if pm == "uni-a/o1" {
			t.Fatal("a reclaimed machine is in the policy's view")
		}
	}
	// The stop report closes the run with its checkpoint; the task
	// resumes elsewhere from it.
	ck := goldenCheckpoint()
	f.must(stopped("uni-a", "uni-b-1", "uni-a/o1", 4200, 50, &ck))
	f.must(reclaim("uni-a", "uni-a/o1", 4300, true)) // again: no change
	f.must(decide("uni-b", 4400, alloc("uni-b-1", "uni-a/d1")))
	f.must(reclaim("uni-a", "uni-a/o1", 9000, false))
	f.must(decide("uni-b", 9100, alloc("uni-b-2", "uni-a/o1")))
	if st, _ := f.l.MTBF("uni-a/o1", 10000); st.Reclaims != 1 || st.Failures != 0 || st.UpMs != 3000+1000 || st.DownMs != 5000 {
		t.Fatalf("stability after reclaim and release: %+v", st)
	}
}
