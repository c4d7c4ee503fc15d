package node

import (
	"context"
	"fmt"
	"github.com/coopgrid/coopgrid/config"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// manyMachines is a machines file of n identical machines allowing only
// trueBin.
func manyMachines(n int, trueBin string) string {
	var b strings.Builder
	b.WriteString("machines:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: m%02d\n    gflops: 10\n    busy_watts: 100\n", i)
	}
	fmt.Fprintf(&b, "policy:\n  allow: [%s]\n  unsafe_run_as_peer_user: true\n", trueBin)
	return b.String()
}

// startSlowLeader starts tn with every Raft log write delayed by delay (the
// consensus store's fault decorator, as a slow disk): reports that arrive
// while one entry is being written queue up behind it, which is when the
// reporter batches.
func (tn *tnode) startSlowLeader(delay time.Duration, bootstrap ...string) {
	tn.tb.Helper()
	tn.startWith(func(c *consensus.Config) { c.StoreDelay = func() time.Duration { return delay } }, bootstrap...)
}

// TestReportsAreBatched: with real peers, real Raft and real processes, a
// follower peer with 16 machines runs 64 short tasks. Its start and end
// reports (128) reach the log in fewer entries than reports, through
// reports batches forwarded to the leader; every task still ends done,
// with exactly one closed segment and its energy booked, the invariants
// hold after every entry on both peers, and both peers agree on the state.
func TestReportsAreBatched(t *testing.T) {
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no `true` executable")
	}
	const machines, tasks = 16, 64
	lead := newTNode(t, "rb-lead", "", "", testConfig("process"))
	lead.startSlowLeader(20 * time.Millisecond)
	work := newTNode(t, "rb-work", lead.secret(), manyMachines(machines, trueBin), func(c *config.Config) {
		testConfig("process")(c)
		c.Limit = "system"
	})
	work.start(lead.addr())
	waitFor(t, 20*time.Second, "both peers see both organisations", func() bool {
		for _, tn := range []*tnode{lead, work} {
			var k int
			tn.n.cons.View(func(l *ledger.Ledger) { k = len(l.Orgs()) })
			if k != 2 {
				return false
			}
		}
		return true
	})
	if !lead.n.cons.IsLeader() {
		t.Fatal("the first peer does not lead")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	req := api.SubmitRequest{Job: "batch"}
	for i := range tasks {
		req.Tasks = append(req.Tasks, api.SubmitTask{Name: fmt.Sprintf("t%d", i), Argv: []string{trueBin}, SizeMFlop: 1})
	}
	before := work.n.cons.AppliedIndex()
	commandsBefore, sentBefore := work.n.runner.ReportCounts()
	resp, err := work.n.Submit(ctx, req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	for _, id := range resp.TaskIDs {
		waitFor(t, 90*time.Second, id+" done", func() bool {
			s := work.task(id).State
			if s.Terminal() && s != ledger.TaskDone {
				t.Fatalf("task %s ended %s: %+v", id, s, work.task(id))
			}
			return s == ledger.TaskDone
		})
	}
	after := work.n.cons.AppliedIndex()
	commandsAfter, sentAfter := work.n.runner.ReportCounts()
	commands, sent := commandsAfter-commandsBefore, sentAfter-sentBefore

	for _, id := range resp.TaskIDs {
		tk := work.task(id)
		if tk.Attempts != 1 || len(tk.Segments) != 1 || tk.Segments[0].Outcome != ledger.OutcomeDone || tk.RemainingMFlop != 0 {
			t.Fatalf("task %s: attempts %d, segments %+v", id, tk.Attempts, tk.Segments)
		}
	}
	// A start and an end per task; a report whose commit timed out or
	// whose outcome was unknown is sent again (under heavy load it
	// happens), and the ledger refuses the duplicate, as the segments
	// checked above show.
	if sent < 2*tasks {
		t.Fatalf("the reporter sent %d reports, want at least %d (a start and an end per task)", sent, 2*tasks)
	}
	if sent > 2*tasks {
		t.Logf("%d reports sent again after a timeout or an unknown outcome", sent-2*tasks)
	}
	if commands >= sent {
		t.Fatalf("%d reports went out in %d commands: nothing was batched", sent, commands)
	}
	// The log itself: one submit, at least one decisions entry, and the
	// reports in fewer entries than reports. One entry per report would
	// take more than 2 × tasks entries.
	if entries := after - before; entries >= 2*tasks {
		t.Fatalf("%d log entries for %d tasks: reports were not batched", entries, tasks)
	}
	t.Logf("%d reports in %d commands; %d log entries for %d tasks", sent, commands, after-before, tasks)

	waitFor(t, 10*time.Second, "same state hash on both peers", func() bool {
		ha, ia := lead.n.cons.Hash()
		hb, ib := work.n.cons.Hash()
		return ia == ib && ha == hb
	})
}
