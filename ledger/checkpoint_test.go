package ledger

import (
	"bytes"
	"maps"
	"strings"
	"testing"
)

// resumeFed is base with uni-b-1 (15,000 MFlop) preempted on uni-a/m2 and
// its stop reported with a checkpoint of 3,000 MFlop (hash "ck1"), then
// allocated to uni-b/x1 but not started.
func resumeFed(t *testing.T) *fed {
	t.Helper()
	f := base(t)
	placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
	f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1")))
	f.must(stopped("uni-a", "uni-b-1", "uni-a/m2", 4200, 5000, &CheckpointData{Hash: "ck1", SizeBytes: 10, ProgressMFlop: 3000, Holders: []string{peerOf("uni-a")}}))
	f.must(decide("uni-b", 4300, alloc("uni-b-1", "uni-b/x1")))
	return f
}

func startFrom(hash string, progress int64, zero bool) Command {
	c := started("uni-b", "uni-b-1", "uni-b/x1", 5000)
	c.TaskStarted.FromCheckpoint = hash
	c.TaskStarted.RestoredProgressMFlop = progress
	c.TaskStarted.FromZero = zero
	return c
}

// TestTaskStartedStartState covers the optional fields of task_started that
// say what state a run starts from: a restored checkpoint must be the one
// recorded, and a start from zero drops the recorded checkpoint so that
// the remaining work is the whole size again.
func TestTaskStartedStartState(t *testing.T) {
	allocA2 := func(f *fed) {
		f.t.Helper()
		if r := f.must(decide("uni-b", 4400, alloc("uni-a-2", "uni-a/m1"))); r.Decisions[0].Err != nil {
			f.t.Fatalf("allocate uni-a-2: %v", r.Decisions[0].Err)
		}
	}
	cases := []struct {
		name  string
		task  string     // the task started; "" = uni-b-1
		setup func(*fed) // after resumeFed
		cmd   Command
		code  Code // "" = applied
		// For applied commands: the task's remaining work and checkpoint
		// hash ("" = none) afterwards, and whether a note was returned.
		remaining int64
		ckHash    string
		note      bool
	}{
		{name: "no statement keeps the checkpoint", cmd: startFrom("", 0, false), remaining: 12_000, ckHash: "ck1"},
		{name: "restored the recorded checkpoint", cmd: startFrom("ck1", 3000, false), remaining: 12_000, ckHash: "ck1"},
		{name: "from zero drops the checkpoint", cmd: startFrom("", 0, true), remaining: 15_000, note: true},
		{name: "from zero without a checkpoint", setup: allocA2, task: "uni-a-2", cmd: func() Command {
			c := started("uni-a", "uni-a-2", "uni-a/m1", 5000)
			c.TaskStarted.FromZero = true
			return c
		}(), remaining: 20_000},
		{name: "another hash", cmd: startFrom("ck2", 3000, false), code: CodeBadState},
		{name: "another progress", cmd: startFrom("ck1", 2999, false), code: CodeBadState},
		{name: "a checkpoint the task does not have", setup: allocA2, cmd: func() Command {
			c := started("uni-a", "uni-a-2", "uni-a/m1", 5000)
			c.TaskStarted.FromCheckpoint, c.TaskStarted.RestoredProgressMFlop = "ck1", 3000
			return c
		}(), code: CodeBadState},
		{name: "both from zero and from a checkpoint", cmd: startFrom("ck1", 3000, true), code: CodeMalformed},
		{name: "from zero with progress", cmd: func() Command {
			c := startFrom("", 0, true)
			c.TaskStarted.RestoredProgressMFlop = 1
			return c
		}(), code: CodeMalformed},
		{name: "progress without a hash", cmd: startFrom("", 3000, false), code: CodeMalformed},
		{name: "malformed hash", cmd: startFrom("ck/1", 3000, false), code: CodeMalformed},
		{name: "hash too long", cmd: startFrom(strings.Repeat("a", MaxCheckpointHash+1), 3000, false), code: CodeMalformed},
		{name: "negative progress", cmd: startFrom("ck1", -1, false), code: CodeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := resumeFed(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			before := f.l.Hash()
			_, encErr := EncodeCommand(tc.cmd)
			r := f.apply(tc.cmd)
			if tc.code != "" {
				if r.Err == nil || r.Err.Code != tc.code {
					t.Fatalf("got %+v, want %s", r, tc.code)
				}
				if f.l.Hash() != before {
					t.Fatal("a rejected command changed the state")
				}
				if tc.code == CodeMalformed && CodeOf(encErr) != CodeMalformed {
					t.Fatalf("EncodeCommand accepted a malformed command: %v", encErr)
				}
				return
			}
			if r.Err != nil {
				t.Fatalf("rejected: %v", r.Err)
			}
			id := tc.task
			if id == "" {
				id = "uni-b-1"
			}
			tk := mustTask(t, f.l, id)
			if tk.State != TaskRunning || tk.RemainingMFlop != tc.remaining {
				t.Fatalf("%s %s, remaining %d, want running with %d", id, tk.State, tk.RemainingMFlop, tc.remaining)
			}
			if got := ""; tk.Checkpoint != nil {
				got = tk.Checkpoint.Hash
				if got != tc.ckHash {
					t.Fatalf("checkpoint %q, want %q", got, tc.ckHash)
				}
			} else if tc.ckHash != "" {
				t.Fatalf("checkpoint dropped, want %q", tc.ckHash)
			}
			if (len(r.Notes) > 0) != tc.note {
				t.Fatalf("notes %v", r.Notes)
			}
		})
	}
}

// A start report without the optional fields encodes as it did before
// they existed, so logs written by older peers decode to the same command.
func TestTaskStartedEncodingUnchanged(t *testing.T) {
	b, err := EncodeCommand(started("uni-b", "uni-b-1", "uni-b/x1", 5000))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"task_started":{"task":"uni-b-1","machine":"uni-b/x1"}`)) {
		t.Fatalf("encoding %s", b)
	}
	old := []byte(`{"v":1,"org":"uni-b","peer":"` + peerOf("uni-b") + `","at_ms":5000,"task_started":{"task":"uni-b-1","machine":"uni-b/x1"}}`)
	c, err := DecodeCommand(old)
	if err != nil || c.TaskStarted.FromCheckpoint != "" || c.TaskStarted.FromZero {
		t.Fatalf("decode %+v %v", c.TaskStarted, err)
	}
}

// TestStopCheckpointWhileAssigned: the stop report of a preempted run
// arrives after the task was allocated again but before the new machine
// started it. The checkpoint is applied (the next run can still resume
// from it); once the task runs again it is ignored.
func TestStopCheckpointWhileAssigned(t *testing.T) {
	ck := &CheckpointData{Hash: "ck9", SizeBytes: 10, ProgressMFlop: 4000, Holders: []string{peerOf("uni-a")}}
	cases := []struct {
		name    string
		started bool
		applied bool
	}{
		{name: "assigned, not started", applied: true},
		{name: "running again", started: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := base(t)
			placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
			f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1"), alloc("uni-b-1", "uni-b/x1")))
			if tc.started {
				f.must(started("uni-b", "uni-b-1", "uni-b/x1", 4050))
			}
			r := f.must(stopped("uni-a", "uni-b-1", "uni-a/m2", 4100, 900, ck))
			tk := mustTask(t, f.l, "uni-b-1")
			if tc.applied {
				if tk.Checkpoint == nil || tk.Checkpoint.Hash != "ck9" || tk.RemainingMFlop != 11_000 || len(r.Notes) != 0 || tk.State != TaskAssigned {
					t.Fatalf("task %+v notes %v", tk, r.Notes)
				}
				// The new machine then reports that it resumed from it.
				c := started("uni-b", "uni-b-1", "uni-b/x1", 4200)
				c.TaskStarted.FromCheckpoint, c.TaskStarted.RestoredProgressMFlop = "ck9", 4000
				f.must(c)
				return
			}
			if tk.Checkpoint != nil || tk.RemainingMFlop != 15_000 || len(r.Notes) != 1 {
				t.Fatalf("task %+v notes %v", tk, r.Notes)
			}
		})
	}
}

// TestLiveCheckpoints: the archives to keep are those of tasks that are
// not finished or cancelled.
func TestLiveCheckpoints(t *testing.T) {
	withBody := func(c Command, set func(*Command)) Command { set(&c); return c }
	f := base(t)
	if got := f.l.LiveCheckpoints(); len(got) != 0 {
		t.Fatalf("live %v before any checkpoint", got)
	}
	// uni-a-1 runs on m1 with a checkpoint; uni-a-2 runs on m2 with one,
	// then finishes; uni-a-3 is cancelled while queued (no checkpoint).
	placeAndStart(f, "uni-a-1", "uni-a/m1", 3000)
	f.must(withBody(ckpt("uni-a", "uni-a-1", "uni-a/m1", 3100, 100), func(c *Command) { c.Checkpoint.Checkpoint.Hash = "live-1" }))
	placeAndStart(f, "uni-a-2", "uni-a/m2", 3000)
	f.must(withBody(ckpt("uni-a", "uni-a-2", "uni-a/m2", 3100, 100), func(c *Command) { c.Checkpoint.Checkpoint.Hash = "dead-2" }))
	if got, want := f.l.LiveCheckpoints(), map[string]bool{"live-1": true, "dead-2": true}; !maps.Equal(got, want) {
		t.Fatalf("live %v, want %v", got, want)
	}
	f.must(ended("uni-a", "uni-a-2", "uni-a/m2", 4000, 10, false))
	if got, want := f.l.LiveCheckpoints(), map[string]bool{"live-1": true}; !maps.Equal(got, want) {
		t.Fatalf("live %v after uni-a-2 ended, want %v", got, want)
	}
	f.must(withBody(act("uni-a", 4100), func(c *Command) { c.CancelTask = &CancelTask{Task: "uni-a-1"} }))
	if got := f.l.LiveCheckpoints(); len(got) != 0 {
		t.Fatalf("live %v after uni-a-1 was cancelled", got)
	}
}
