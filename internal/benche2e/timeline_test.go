package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// writeLog writes cmds as a real Raft log (bolt store) under dataDir/raft,
// entry i appended at appended[i]; a configuration entry comes first, as
// in a real log.
func writeLog(t *testing.T, dataDir string, cmds []ledger.Command, appended []time.Time) {
	t.Helper()
	store, err := raftboltdb.NewBoltStore(filepath.Join(dataDir, "raft", consensus.RaftDBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	logs := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("cfg")}}
	for i, c := range cmds {
		data, err := ledger.EncodeCommand(c)
		if err != nil {
			t.Fatalf("encode %d: %v", i, err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 2), Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: appended[i]})
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

// TestTimelineFromRealLog replays a small log of real ledger commands
// through the bolt store and checks each task's path and the phases.
func TestTimelineFromRealLog(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raft"), 0o755); err != nil {
		t.Fatal(err)
	}
	const peer = "12D3KooWPeer"
	at := func(ms int64) ledger.Command { return ledger.Command{Org: "a", Peer: peer, AtMs: 1_000_000 + ms} }
	reg := at(0)
	reg.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: 1_000_000, Machines: []ledger.MachineSpec{{Name: "m1", MFLOPS: 10_000, BusyMilliW: 100_000}}}
	sub := at(10)
	sub.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{
		{SizeMFlop: 1, Spec: ledger.Spec{Argv: []string{"true"}}},
		{SizeMFlop: 1, Spec: ledger.Spec{Argv: []string{"true"}}},
	}}
	// Task a-1 on m1, then a-2 on m1 once a-1 has ended.
	dec1 := at(20)
	dec1.Decisions = &ledger.Decisions{Decisions: []ledger.Decision{{Kind: ledger.DecideAllocate, Task: "a-1", Machine: "a/m1"}}}
	st1 := at(50)
	st1.TaskStarted = &ledger.TaskStarted{Task: "a-1", Machine: "a/m1"}
	end1 := at(80)
	end1.TaskEnded = &ledger.TaskEnded{Task: "a-1", Machine: "a/m1", Source: ledger.EnergyDeclared}
	dec2 := at(100)
	dec2.Decisions = &ledger.Decisions{Decisions: []ledger.Decision{{Kind: ledger.DecideAllocate, Task: "a-2", Machine: "a/m1"}}}
	st2 := at(130)
	st2.TaskStarted = &ledger.TaskStarted{Task: "a-2", Machine: "a/m1"}
	end2 := at(170)
	end2.TaskEnded = &ledger.TaskEnded{Task: "a-2", Machine: "a/m1", Source: ledger.EnergyDeclared}
	cmds := []ledger.Command{reg, sub, dec1, st1, end1, dec2, st2, end2}
	// The leader appends each entry 2 ms after its command's time.
	var appended []time.Time
	for _, c := range cmds {
		appended = append(appended, time.UnixMilli(c.AtMs+2))
	}
	writeLog(t, dir, cmds, appended)

	r, err := readLog(dir, 6)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Entries {
		if e.Res.Err != nil {
			t.Fatalf("entry %d (%s) rejected: %v", e.Index, e.Res.Kind, e.Res.Err)
		}
	}
	if r.HashAt == "" || r.HashAt == r.Ledger.Hash() {
		t.Fatalf("hash at index 6 %q should be set and differ from the final one %q", r.HashAt, r.Ledger.Hash())
	}
	if err := r.Ledger.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	tl := buildTimeline(r, 1_000_010, 0, "")
	a1, a2 := tl.Tasks["a-1"], tl.Tasks["a-2"]
	if a1 == nil || a2 == nil || !a1.complete() || !a2.complete() {
		t.Fatalf("tasks not complete: %+v %+v", a1, a2)
	}
	want := taskTimes{Machine: "a/m1", SubmitAt: 1_000_010, SubmitApp: 1_000_012, DecideAt: 1_000_100, DecideApp: 1_000_102,
		DecisionsInPass: 1, StartAt: 1_000_130, StartApp: 1_000_132, EndAt: 1_000_170, EndApp: 1_000_172}
	if *a2 != want {
		t.Fatalf("a-2:\n got %+v\nwant %+v", *a2, want)
	}
	if tl.Passes != 2 || tl.Allocations != 2 || tl.Kinds[ledger.KindRegisterOrg] != 0 || tl.Kinds[ledger.KindTaskEnded] != 2 {
		t.Fatalf("counts: passes %d allocations %d kinds %v", tl.Passes, tl.Allocations, tl.Kinds)
	}
	var b strings.Builder
	tl.report(&b, 1)
	out := b.String()
	// a-2's machine was free from a-1's end appended (1_000_082) until the
	// pass at 1_000_100: 18 ms; a-1 was the machine's first task.
	for _, line := range []string{
		"| free → decided | 1 | 18.0 |",
		"| submitted → first decision (a machine's first task) | 1 | 8.0 |",
		"| start proposed → end proposed | 2 | 35.0 |",
		"span 162 ms",
		"machine time accounted: 160 ms of 1 machines × 162 ms span",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("report lacks %q:\n%s", line, out)
		}
	}
}

func TestScanLog(t *testing.T) {
	tl := &timeline{Tasks: map[string]*taskTimes{"org-1-7": {}}}
	log := `time=2026-11-22T15:23:55.183Z level=INFO msg="task started" org=org-1 peer=vURsyV4P task=org-1-7 machine=org-1/m26 from_mflop=0 restored=false
time=2026-11-22T15:23:55.250Z level=INFO msg="task run ended" org=org-1 peer=vURsyV4P task=org-1-7 machine=org-1/m26 reason=ok
time=2026-11-22T15:23:55.260Z level=INFO msg="task started" org=org-1 peer=vURsyV4P task=org-1-99 machine=org-1/m2
time=2026-11-22T15:23:55.270Z level=WARN msg="something else" task=org-1-7
`
	if err := scanLog(strings.NewReader(log), tl); err != nil {
		t.Fatal(err)
	}
	got := tl.Tasks["org-1-7"]
	start := time.Date(2026, 11, 22, 15, 23, 55, 183e6, time.UTC).UnixMilli()
	if got.StartLogged != start || got.EndLogged != start+67 {
		t.Fatalf("logged start %d end %d, want %d and %d", got.StartLogged, got.EndLogged, start, start+67)
	}
	if len(tl.Tasks) != 1 {
		t.Fatalf("a task not in the timeline was added: %v", tl.Tasks)
	}
}

// A reports batch (the group-committed reports of an executing peer)
// counts each applied item at the batch's times.
func TestTimelineReportsBatch(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raft"), 0o755); err != nil {
		t.Fatal(err)
	}
	at := func(ms int64) ledger.Command {
		return ledger.Command{Org: "a", Peer: "12D3KooWPeer", AtMs: 1_000_000 + ms}
	}
	reg := at(0)
	reg.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: 1_000_000, Machines: []ledger.MachineSpec{{Name: "m1", MFLOPS: 10_000, BusyMilliW: 100_000}}}
	sub := at(10)
	sub.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1, Spec: ledger.Spec{Argv: []string{"true"}}}}}
	dec := at(20)
	dec.Decisions = &ledger.Decisions{Decisions: []ledger.Decision{{Kind: ledger.DecideAllocate, Task: "a-1", Machine: "a/m1"}}}
	batch := at(80)
	batch.Reports = &ledger.Reports{Items: []ledger.Report{
		{TaskStarted: &ledger.TaskStarted{Task: "a-1", Machine: "a/m1"}},
		{TaskEnded: &ledger.TaskEnded{Task: "a-1", Machine: "a/m1", Source: ledger.EnergyDeclared}},
	}}
	cmds := []ledger.Command{reg, sub, dec, batch}
	var appended []time.Time
	for _, c := range cmds {
		appended = append(appended, time.UnixMilli(c.AtMs+3))
	}
	writeLog(t, dir, cmds, appended)
	r, err := readLog(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.HashAt != r.Ledger.Hash() {
		t.Fatalf("hash at the last index %q differs from the final hash %q", r.HashAt, r.Ledger.Hash())
	}
	tl := buildTimeline(r, 1_000_010, 1_000_083, "12D3KooWLeader")
	a1 := tl.Tasks["a-1"]
	if a1 == nil || !a1.complete() || a1.StartAt != 1_000_080 || a1.EndAt != 1_000_080 || a1.EndApp != 1_000_083 {
		t.Fatalf("a-1: %+v", a1)
	}
	if tl.ReportItems != 2 || tl.Kinds[ledger.KindReports] != 1 {
		t.Fatalf("report items %d, batches %d; want 2 and 1", tl.ReportItems, tl.Kinds[ledger.KindReports])
	}
	// Another peer than the leader proposed the three entries of the run.
	if tl.Forwarded != 3 {
		t.Fatalf("%d entries forwarded, want 3 (submission, decisions, batch)", tl.Forwarded)
	}
	if own := buildTimeline(r, 1_000_010, 1_000_083, "12D3KooWPeer"); own.Forwarded != 0 {
		t.Fatalf("%d entries forwarded by the leader's own peer, want 0", own.Forwarded)
	}
	if st, ok := r.Ledger.Task("a-1"); !ok || st.State != ledger.TaskDone {
		t.Fatalf("a-1 after the replay: %+v", st)
	}
}
