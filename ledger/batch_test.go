package ledger

import (
	"encoding/json"
	"testing"
)

func reports(org string, at int64, items ...Report) Command {
	c := act(org, at)
	c.Reports = &Reports{Items: items}
	return c
}

// item turns a single report command into a batch item.
func item(c Command) Report {
	r, ok := ReportOf(c)
	if !ok {
		panic("not a report: " + string(c.Kind()))
	}
	return r
}

// assignedFixture is base with uni-a-1 on uni-a/m1 and uni-a-2 on uni-a/m2,
// both assigned (not started).
func assignedFixture(t *testing.T) *fed {
	f := base(t)
	r := f.must(decide("uni-b", 2500, alloc("uni-a-1", "uni-a/m1"), alloc("uni-a-2", "uni-a/m2")))
	if r.AcceptedDecisions() != 2 {
		t.Fatalf("fixture: %+v", r.Decisions)
	}
	return f
}

// TestReportsBatch applies batches item by item: each item gets the verdict
// the same report would get as a command of its own applied at that point,
// rejected items change nothing, and the batch leaves the state exactly as
// its accepted items applied one by one would.
func TestReportsBatch(t *testing.T) {
	const at = 3000
	two := Report{TaskStarted: &TaskStarted{Task: "uni-a-1", Machine: "uni-a/m1"}, TaskEnded: &TaskEnded{Task: "uni-a-1", Machine: "uni-a/m1", Source: EnergyDeclared}}
	cases := []struct {
		name  string
		items []Report
		want  []Code // per item, "" = applied
		// states of tasks after the batch
		states map[string]TaskState
	}{
		{"all accepted", []Report{
			item(started("uni-a", "uni-a-1", "uni-a/m1", at)),
			item(started("uni-a", "uni-a-2", "uni-a/m2", at)),
		}, []Code{"", ""}, map[string]TaskState{"uni-a-1": TaskRunning, "uni-a-2": TaskRunning}},
		{"start and end of one run in one batch", []Report{
			item(started("uni-a", "uni-a-1", "uni-a/m1", at)),
			item(ended("uni-a", "uni-a-1", "uni-a/m1", at, 5, false)),
		}, []Code{"", ""}, map[string]TaskState{"uni-a-1": TaskDone, "uni-a-2": TaskAssigned}},
		{"end before start: the end sees the state before the start", []Report{
			item(ended("uni-a", "uni-a-1", "uni-a/m1", at, 5, false)),
			item(started("uni-a", "uni-a-1", "uni-a/m1", at)),
		}, []Code{CodeBadState, ""}, map[string]TaskState{"uni-a-1": TaskRunning}},
		{"mixed: a replayed start, a queued task, a wrong machine", []Report{
			item(started("uni-a", "uni-a-1", "uni-a/m1", at)),
			item(started("uni-a", "uni-a-1", "uni-a/m1", at)),
			item(ended("uni-a", "uni-a-3", "uni-a/m1", at, 5, false)),
			item(started("uni-a", "uni-a-2", "uni-a/m1", at)),
			item(started("uni-a", "uni-a-2", "uni-a/m2", at)),
		}, []Code{"", CodeBadState, CodeBadState, CodeBadState, ""},
			map[string]TaskState{"uni-a-1": TaskRunning, "uni-a-2": TaskRunning, "uni-a-3": TaskQueued}},
		{"malformed items are rejected alone", []Report{
			{},
			two,
			{TaskStarted: &TaskStarted{Task: "uni-a-1", Machine: "not-a-machine"}},
			{TaskEnded: &TaskEnded{Task: "uni-a-1", Machine: "uni-a/m1", Source: "guess"}},
			item(started("uni-a", "uni-a-1", "uni-a/m1", at)),
		}, []Code{CodeMalformed, CodeMalformed, CodeMalformed, CodeMalformed, ""},
			map[string]TaskState{"uni-a-1": TaskRunning}},
		{"another organisation's machine and unknown references", []Report{
			item(started("uni-a", "uni-b-1", "uni-b/x1", at)),
			item(started("uni-a", "uni-a-9", "uni-a/m1", at)),
			item(started("uni-a", "uni-a-1", "uni-a/m9", at)),
			item(started("uni-a", "uni-a-2", "uni-a/m2", at)),
		}, []Code{CodeNotOwner, CodeUnknownTask, CodeUnknownMachine, ""},
			map[string]TaskState{"uni-a-1": TaskAssigned, "uni-a-2": TaskRunning}},
		{"all rejected", []Report{
			item(ended("uni-a", "uni-a-1", "uni-a/m1", at, 5, false)),
			item(stopped("uni-a", "uni-a-2", "uni-a/m2", at, 5, nil)),
			item(ckpt("uni-a", "uni-a-1", "uni-a/m1", at, 10)),
		}, []Code{CodeBadState, CodeBadState, CodeBadState},
			map[string]TaskState{"uni-a-1": TaskAssigned, "uni-a-2": TaskAssigned}},
		{"a failure before the start, a checkpoint of a running task", []Report{
			item(ended("uni-a", "uni-a-1", "uni-a/m1", at, 0, true)),
			item(started("uni-a", "uni-a-2", "uni-a/m2", at)),
			item(ckpt("uni-a", "uni-a-2", "uni-a/m2", at, 500)),
		}, []Code{"", "", ""}, map[string]TaskState{"uni-a-1": TaskFailed, "uni-a-2": TaskRunning}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := assignedFixture(t)
			// The twin applies the same reports as single commands.
			twin := assignedFixture(t)
			before := f.l.Hash()
			r := f.apply(reports("uni-a", at, tc.items...))
			if r.Err != nil || r.Kind != KindReports {
				t.Fatalf("batch: kind %q err %v", r.Kind, r.Err)
			}
			if len(r.Reports) != len(tc.items) {
				t.Fatalf("%d verdicts for %d items", len(r.Reports), len(tc.items))
			}
			accepted := 0
			for i, it := range tc.items {
				got := codeOf(r.Reports[i].Err)
				if got != tc.want[i] {
					t.Errorf("item %d (%s): code %q, want %q (%v)", i, r.Reports[i].Kind, got, tc.want[i], r.Reports[i].Err)
				}
				if got == "" {
					accepted++
				}
				// The same item as a command of its own, on the twin.
				single := it.Command(act("uni-a", at))
				tr := twin.apply(single)
				if codeOf(tr.Err) != got {
					t.Errorf("item %d: batch verdict %q, single command %q", i, got, codeOf(tr.Err))
				}
				if ir := r.ItemResult(i); ir.Index != r.Index || codeOf(ir.Err) != got || len(ir.Notes) != len(tr.Notes) {
					t.Errorf("item %d: ItemResult %+v, single %+v", i, ir, tr)
				}
			}
			if r.AcceptedReports() != accepted {
				t.Errorf("AcceptedReports %d, want %d", r.AcceptedReports(), accepted)
			}
			if f.l.Hash() != twin.l.Hash() {
				t.Error("the batch left another state than its items applied one by one")
			}
			if accepted == 0 && f.l.Hash() != before {
				t.Error("a batch whose items were all rejected changed the state")
			}
			for id, want := range tc.states {
				if task, _ := f.l.Task(id); task.State != want {
					t.Errorf("%s is %s, want %s", id, task.State, want)
				}
			}
			// The same batch again (a retry after an unknown outcome): what
			// it did is refused item by item and nothing changes.
			after := f.l.Hash()
			r2 := f.apply(reports("uni-a", at, tc.items...))
			for i := range tc.items {
				if tc.want[i] == "" && r2.Reports[i].Err == nil && tc.items[i].Checkpoint == nil {
					t.Errorf("replayed item %d (%s) applied again", i, r2.Reports[i].Kind)
				}
			}
			if r2.AcceptedReports() == 0 && f.l.Hash() != after {
				t.Error("a replay whose items were all refused changed the state")
			}
		})
	}
}

// TestReportsEnvelope: only the envelope rejects a whole batch, and then
// nothing changes.
func TestReportsEnvelope(t *testing.T) {
	good := item(started("uni-a", "uni-a-1", "uni-a/m1", 3000))
	wrongPeer := reports("uni-a", 3000, good)
	wrongPeer.Peer = peerOf("uni-b")
	cases := []struct {
		name string
		cmd  Command
		want Code
	}{
		{"wrong peer", wrongPeer, CodeNotOwner},
		{"unknown organisation", reports("uni-z", 3000, good), CodeUnknownOrg},
		{"no items", reports("uni-a", 3000), CodeMalformed},
		{"too many items", reports("uni-a", 3000, make([]Report, MaxReportsPerCommand+1)...), CodeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := assignedFixture(t)
			before := f.l.Hash()
			r := f.apply(tc.cmd)
			if codeOf(r.Err) != tc.want {
				t.Fatalf("code %q, want %q (%v)", codeOf(r.Err), tc.want, r.Err)
			}
			if len(r.Reports) != 0 || f.l.Hash() != before {
				t.Fatal("a rejected batch changed something")
			}
			if it := r.ItemResult(0); codeOf(it.Err) != tc.want {
				t.Fatalf("an item of a rejected batch has code %q", codeOf(it.Err))
			}
		})
	}
}

// TestReportsEncoding: a batch round-trips, and commands without it encode
// as before (the field is omitted).
func TestReportsEncoding(t *testing.T) {
	c := reports("uni-a", 3000, item(started("uni-a", "uni-a-1", "uni-a/m1", 3000)), item(ended("uni-a", "uni-a-1", "uni-a/m1", 3000, 7, true)))
	b, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != KindReports || len(d.Reports.Items) != 2 || d.Reports.Items[1].TaskEnded.ExitCode != 2 {
		t.Fatalf("decoded %+v", d)
	}
	single, err := EncodeCommand(started("uni-a", "uni-a-1", "uni-a/m1", 3000))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(single, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["reports"]; ok {
		t.Fatalf("a single report encodes a reports field: %s", single)
	}
	// A batch with a second body besides the reports is not a command.
	c.TaskStarted = &TaskStarted{Task: "uni-a-1", Machine: "uni-a/m1"}
	if _, err := EncodeCommand(c); CodeOf(err) != CodeMalformed {
		t.Fatalf("two bodies: %v", err)
	}
}

// codeOf is CodeOf for a result's *Error field (a nil *Error is no error).
func codeOf(e *Error) Code {
	if e == nil {
		return ""
	}
	return e.Code
}
