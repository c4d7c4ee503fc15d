package node

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestDeadlinesOnRealPeers is issue 20's deadline scenario with real peers
// (libp2p, Raft, bolt, real processes). Organisation a has a slow,
// efficient machine a/a0 (1 GFLOPS, 10 W: EHOSEP's least-energy choice)
// and a fast, hungry one a/a1 (100 GFLOPS, 10 kW); b has one slow machine.
//   - A soft-deadline task of 360 GFlop due in a minute (6 min on a slow
//     machine, 4 s on the fast one, with the 10 % margin) runs on a/a1.
//   - The same task due in 2 s is refused with deadline_unmeetable: no
//     peer's state or log changes.
//   - With on_miss: nice it is queued as a nice task instead, and the
//     answer says so.
//   - Without a class it runs on a/a0, EHOSEP's choice.
func TestDeadlinesOnRealPeers(t *testing.T) {
	waitsMostly(t)
	peers := federation(t, "process", []string{"a", "b"}, map[string]string{
		"a": "machines:\n  - name: a0\n    gflops: 1\n    busy_watts: 10\n  - name: a1\n    gflops: 100\n    busy_watts: 10000\npolicy:\n  unsafe_run_as_peer_user: true\n  allow: [/bin/sh]\n",
		"b": machinesFile("b", 1, 1, 50, "", "  allow: [/bin/sh]\n"),
	}, nil)
	a := peers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	soft := func(name string, in time.Duration, onMiss string) api.SubmitRequest {
		return api.SubmitRequest{Job: "dl", Tasks: []api.SubmitTask{{Name: name, Argv: []string{"/bin/sh", "-c", "sleep 0.2"},
			SizeMFlop: 360_000, WallLimitMs: 60_000, Class: ledger.ClassSoftDeadline, DeadlineInMs: in.Milliseconds(), OnMiss: onMiss}}}
	}

	resp, err := a.n.Submit(ctx, soft("meetable", time.Minute, ""))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]
	a.waitDone(t, 60*time.Second, id+" done", id)
	tk := a.task(id)
	if len(tk.Segments) != 1 || tk.Segments[0].Machine != "a/a1" {
		t.Fatalf("the soft-deadline task ran on %+v, want only a/a1 (the one machine that meets its deadline)", tk.Segments)
	}
	if tk.Spec.Class != ledger.ClassSoftDeadline || tk.Spec.DeadlineMs < tk.SubmittedMs+59_000 || tk.Spec.DeadlineMs > tk.SubmittedMs+61_000 {
		t.Fatalf("stored class %q deadline %d (submitted %d)", tk.Spec.Class, tk.Spec.DeadlineMs, tk.SubmittedMs)
	}
	detail, err := a.n.Task(ctx, id)
	if err != nil || detail.Class != ledger.ClassSoftDeadline || detail.DeadlineMs != tk.Spec.DeadlineMs {
		t.Fatalf("task view: %+v, %v", detail.TaskView, err)
	}

	type mark struct {
		hash string
		idx  uint64
		last uint64
	}
	marks := func() []mark {
		var out []mark
		for _, p := range peers {
			h, i := p.n.cons.Hash()
			out = append(out, mark{h, i, p.n.cons.Raft().LastIndex()})
		}
		return out
	}
	before := marks()
	_, err = a.n.Submit(ctx, soft("unmeetable", 2*time.Second, ""))
	if api.CodeOf(err) != api.CodeDeadlineUnmeetable {
		t.Fatalf("unmeetable deadline: %v, want %s", err, api.CodeDeadlineUnmeetable)
	}
	t.Logf("refusal: %v", err)
	for i, m := range marks() {
		if m != before[i] {
			t.Fatalf("%s: the refused submission changed the state or the log: %+v, then %+v", peers[i].org, before[i], m)
		}
	}

	nice, err := a.n.Submit(ctx, soft("fallback", 2*time.Second, "nice"))
	if err != nil {
		t.Fatal(err)
	}
	if len(nice.AcceptedAsNice) != 1 || nice.AcceptedAsNice[0] != nice.TaskIDs[0] || nice.Note == "" {
		t.Fatalf("on_miss nice: %+v", nice)
	}
	if tk := a.task(nice.TaskIDs[0]); tk.Spec.Class != ledger.ClassNice || tk.Spec.DeadlineMs != 0 {
		t.Fatalf("stored as class %q deadline %d, want nice without one", tk.Spec.Class, tk.Spec.DeadlineMs)
	}

	// Without a class, the same task goes where EHOSEP puts it: the
	// least-energy machine, a/a0 (so the first placement was the
	// deadline's doing).
	plain := soft("plain", 0, "")
	plain.Tasks[0].Class = ""
	pr, err := a.n.Submit(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, pr.TaskIDs[0]+" placed", func() bool { return len(a.task(pr.TaskIDs[0]).Segments) > 0 })
	if m := a.task(pr.TaskIDs[0]).Segments[0].Machine; m != "a/a0" {
		t.Fatalf("a task without a class ran on %s, want a/a0", m)
	}
}
