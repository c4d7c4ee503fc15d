package node

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/history"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// TestHistoryAfterSnapshotCatchUp: r-c's tasks end and r-c stops before
// they leave the state (an 8 s retention); the others apply the
// forget_tasks and take a snapshot that compacts the log behind it. Started again, r-c is too far behind for the log: it installs
// the snapshot, which skipped the forget_tasks, and fetches the records
// from another member: `peer history` on r-c lists its tasks. r-d, a new
// member joining after, installs the snapshot too and fetches every
// organisation's records (its store holds what r-a's holds). A host that
// holds the federation key but is not a member is refused.
func TestHistoryAfterSnapshotCatchUp(t *testing.T) {
	waitsMostly(t)
	compact := func(c *consensus.Config) { c.TrailingLogs = 1 }
	machines := map[string]string{"r-a": simMachine("a1", 10, 100), "r-b": simMachine("b1", 10, 100), "r-c": simMachine("c1", 10, 100)}
	var peers []*tnode
	for i, org := range []string{"r-a", "r-b", "r-c"} {
		cfg := testConfig("sim")
		if i == 0 {
			cfg = func(c *config.Config) { testConfig("sim")(c); c.Consensus.RetentionAfter = 8 * time.Second }
		}
		secret := ""
		if i > 0 {
			secret = peers[0].secret()
		}
		tn := newTNode(t, org, secret, machines[org], cfg)
		if i == 0 {
			tn.startWith(compact)
		} else {
			tn.startWith(compact, peers[0].addr())
		}
		peers = append(peers, tn)
	}
	a, b, c := peers[0], peers[1], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	for _, tn := range peers {
		waitFor(t, 20*time.Second, tn.org+" sees every organisation", func() bool {
			var k int
			tn.n.cons.View(func(l *ledger.Ledger) { k = len(l.Orgs()) })
			return k == 3
		})
	}

	req := api.SubmitRequest{Job: "jc"}
	for range 2 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Argv: []string{"true"}, SizeMFlop: 100})
	}
	resp, err := c.n.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ids := resp.TaskIDs
	for _, id := range ids {
		waitFor(t, 30*time.Second, id+" done", func() bool { return c.task(id).State == ledger.TaskDone })
	}
	cAt := c.n.cons.AppliedIndex()
	c.close()
	for _, id := range ids {
		waitFor(t, 60*time.Second, id+" forgotten", func() bool {
			var ok bool
			a.n.cons.View(func(l *ledger.Ledger) { _, ok = l.Task(id) })
			return !ok
		})
	}
	// A few more entries, then every member compacts its log to one entry
	// behind a snapshot: r-c's next entry is gone from every log.
	before := a.n.cons.AppliedIndex()
	if _, err := a.n.Submit(ctx, api.SubmitRequest{Job: "pad", Tasks: []api.SubmitTask{{Argv: []string{"true"}, SizeMFlop: 100}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "more entries", func() bool { return b.n.cons.AppliedIndex() > before+1 })
	for _, tn := range []*tnode{a, b} {
		if err := tn.n.cons.Snapshot(); err != nil {
			t.Logf("%s snapshot: %v", tn.org, err)
		}
	}
	if n, err := a.n.history.Len(); err != nil || n != len(ids) {
		t.Fatalf("r-a's store holds %d records (%v), want r-c's %d", n, err, len(ids))
	}

	// r-c restarts: it installs the snapshot and fetches its records.
	c.startWith(compact)
	waitFor(t, 30*time.Second, "r-c caught up", func() bool { return c.n.cons.AppliedIndex() >= before+2 })
	var got []string
	waitFor(t, 30*time.Second, "r-c's history holds its tasks", func() bool {
		p, err := c.n.History(ctx, api.HistoryQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, r := range p.Records {
			// r-c never applied the forget (after cAt): the record came
			// from another member.
			if r.State != "done" || r.Job != "jc" || r.ForgottenIndex <= cAt || r.ForgottenIndex > before {
				t.Fatalf("r-c's record %+v", r)
			}
			got = append(got, r.ID)
		}
		g, _ := c.n.history.Gaps()
		return len(got) == len(ids) && len(g) == 0
	})
	if !slices.Equal(got, ids) {
		t.Fatalf("r-c's history %v, want %v", got, ids)
	}

	// A new member installs the snapshot and fetches every record.
	d := newTNode(t, "r-d", a.secret(), "", testConfig("sim"))
	d.startWith(compact, a.addr())
	waitFor(t, 30*time.Second, "r-d holds the history", func() bool {
		n, _ := d.n.history.Len()
		g, _ := d.n.history.Gaps()
		return n == len(ids) && len(g) == 0
	})
	if p, err := d.n.History(ctx, api.HistoryQuery{Limit: 100}); err != nil || len(p.Records) != 0 {
		t.Fatalf("r-d's own history: %+v, %v", p, err)
	}

	// Who may not ask: a host with the federation key that is not a member.
	outsider, err := p2p.New(p2p.Config{DataDir: t.TempDir(), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, SecretFile: a.secret(), Logger: testLogger("outsider")})
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	if _, err := outsider.ConnectAddr(ctx, a.addr()); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]uint64{"from": 0, "to": before})
	if _, err := outsider.Request(ctx, a.n.self, protocol.ID(history.ProtoHistory), body); p2p.Code(err) != history.CodeNotMember {
		t.Fatalf("a non-member asked for the history: %v", err)
	}
	// A member gets it.
	out, err := b.n.host.Request(ctx, a.n.self, protocol.ID(history.ProtoHistory), body)
	var page struct{ Records []history.Record }
	if err != nil || json.Unmarshal(out, &page) != nil || len(page.Records) != len(ids) {
		t.Fatalf("a member asked: %d records, %v", len(page.Records), err)
	}
}
