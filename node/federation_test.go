package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/coopgrid/coopgrid/config"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// processMachine is a machines file allowing /bin/sh.
func processMachine(name string, gflops, watts float64) string {
	return fmt.Sprintf("machines:\n  - name: %s\n    gflops: %g\n    busy_watts: %g\npolicy:\n  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n", name, gflops, watts)
}

// TestFederationRunsRealTasks: three organisations form a federation (the
// first bootstraps, the others join through its address); uni-a submits
// tasks with an input and an output through the Backend; real processes
// run them on machines of all three organisations; the outputs arrive in
// uni-a's data directory, the logs come from the peer that ran each task,
// and the energy accounts are credited. Then the authorisation rules.
func TestFederationRunsRealTasks(t *testing.T) {
	// uni-a's machine is the least efficient (W per GFLOPS), so EHOSEP
	// places uni-a's tasks on the other organisations' machines first.
	peers := federation(t, "process", []string{"uni-a", "uni-b", "uni-c"}, map[string]string{
		"uni-a": processMachine("a1", 1, 200),
		"uni-b": processMachine("b1", 10, 100),
		"uni-c": processMachine("c1", 10, 90),
	}, map[string]func(*config.Config){"uni-a": func(c *config.Config) { c.Limit = "system" }})
	a, b, c := peers[0], peers[1], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const tasks = 4
	req := api.SubmitRequest{Job: "upper"}
	for i := range tasks {
		req.Tasks = append(req.Tasks, api.SubmitTask{
			Name:      fmt.Sprintf("upper-%d", i),
			Argv:      []string{"/bin/sh", "-c", `tr a-z A-Z < in.txt > out/result.txt && echo "ran on $COOPGRID_MACHINE"`},
			SizeMFlop: 1000,
			Inputs:    []api.InputFile{{Name: "in.txt", Data: []byte(fmt.Sprintf("hello %d\n", i))}},
			Outputs:   []string{"out"},
		})
		// The task writes into out/, so the directory must exist: ship it
		// as an input too.
		req.Tasks[i].Inputs = append(req.Tasks[i].Inputs, api.InputFile{Name: "out/.keep", Data: nil})
	}
	resp, err := a.n.Submit(ctx, req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if len(resp.TaskIDs) != tasks {
		t.Fatalf("task IDs %v", resp.TaskIDs)
	}
	for _, id := range resp.TaskIDs {
		a.waitDone(t, 40*time.Second, id+" done", id)
	}

	ranElsewhere := 0
	for i, id := range resp.TaskIDs {
		d, err := a.n.Task(ctx, id)
		if err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
		if d.Name != fmt.Sprintf("upper-%d", i) || d.ExitCode != 0 || len(d.Segments) != 1 || d.Segments[0].Outcome != "done" {
			t.Fatalf("task %s: %+v", id, d)
		}
		seg := d.Segments[0]
		if seg.MachineOrg != "uni-a" {
			ranElsewhere++
		}
		if seg.EnergyJ <= 0 || seg.Source == "" {
			t.Fatalf("task %s: segment without energy: %+v", id, seg)
		}
		want := filepath.Join(a.dir, config.OutputsDir, id, "out", "result.txt")
		got, err := os.ReadFile(want)
		if err != nil {
			t.Fatalf("output of %s (ran on %s) not returned: %v", id, seg.Machine, err)
		}
		if string(got) != fmt.Sprintf("HELLO %d\n", i) {
			t.Fatalf("output of %s = %q", id, got)
		}
		if len(d.OutputFiles) != 2 || !strings.HasSuffix(d.OutputFiles[1], "out/result.txt") {
			t.Fatalf("output files of %s: %v", id, d.OutputFiles)
		}
		logs, err := a.n.Logs(ctx, id, "stdout")
		if err != nil {
			t.Fatalf("logs of %s: %v", id, err)
		}
		_, mname, _ := strings.Cut(seg.Machine, "/")
		if string(logs) != "ran on "+mname+"\n" {
			t.Fatalf("stdout of %s (ran on %s) = %q", id, seg.Machine, logs)
		}
	}
	if ranElsewhere == 0 {
		t.Fatal("no task ran on another organisation's machine")
	}

	// Every peer holds the same state.
	waitFor(t, 10*time.Second, "same state hash everywhere", func() bool {
		ha, ia := a.n.cons.Hash()
		hb, ib := b.n.cons.Hash()
		hc, ic := c.n.cons.Hash()
		return ia == ib && ib == ic && ha == hb && hb == hc
	})
	lv, err := b.n.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acc := map[string]api.LedgerAccount{}
	for _, o := range lv.Orgs {
		acc[o.Org] = o
	}
	if acc["uni-a"].UserJ <= 0 || acc["uni-b"].OwnerOthersJ+acc["uni-c"].OwnerOthersJ <= 0 {
		t.Fatalf("energy accounts %+v", acc)
	}
	ownersTotal := 0.0
	for _, o := range lv.Orgs {
		ownersTotal += o.OwnerSelfJ + o.OwnerOthersJ
	}
	if d := ownersTotal - acc["uni-a"].UserJ; d > 1e-9 || d < -1e-9 {
		t.Fatalf("owners were credited %v J, the user %v J", ownersTotal, acc["uni-a"].UserJ)
	}

	t.Run("status", func(t *testing.T) {
		st, err := c.n.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Org != "uni-c" || st.Leader == "" || len(st.Peers) != 3 || len(st.Orgs) != 3 {
			t.Fatalf("status %+v", st)
		}
		for _, p := range st.Peers {
			if p.Org == "" || len(p.Addrs) == 0 {
				t.Fatalf("peer %+v", p)
			}
		}
		if st.Orgs[0].Name != "uni-a" || st.Orgs[0].Done != tasks {
			t.Fatalf("orgs %+v", st.Orgs)
		}
	})

	t.Run("authorisation", func(t *testing.T) {
		id := resp.TaskIDs[0]
		// Another organisation cannot cancel uni-a's task.
		if err := b.n.Cancel(ctx, id); apiCode(err) != api.CodeForbidden {
			t.Fatalf("uni-b cancels uni-a's task: %v", err)
		}
		// Nor change uni-a's limit: a command acting for uni-a from uni-b's
		// peer is refused.
		cmd := ledger.Command{Org: "uni-a", Peer: b.n.self.String(), AtMs: time.Now().UnixMilli(), SetLimit: &ledger.SetLimit{LimitMilliW: 1}}
		data, err := ledger.EncodeCommand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.n.cons.Propose(ctx, data)
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if apiCode(apiError(err)) != api.CodeForbidden {
			t.Fatalf("uni-b sets uni-a's limit: %v", err)
		}
		if o, _ := a.n.Orgs(ctx); o[0].LimitW == 0.001 {
			t.Fatal("uni-a's limit changed")
		}
		if err := a.n.Cancel(ctx, "uni-a-999"); apiCode(err) != api.CodeNotFound {
			t.Fatalf("cancel of an unknown task: %v", err)
		}
		if err := a.n.Cancel(ctx, id); apiCode(err) != api.CodeConflict {
			t.Fatalf("cancel of a done task: %v", err)
		}
		if _, err := a.n.Task(ctx, "uni-a-999"); apiCode(err) != api.CodeNotFound {
			t.Fatalf("unknown task: %v", err)
		}
		// Logs of uni-a's task are uni-a's (and the machine owner's, who
		// holds them on disk anyway).
		for _, tid := range resp.TaskIDs {
			if seg := a.task(tid).Segments[0]; seg.MachineOrg != "uni-c" {
				if _, err := c.n.Logs(ctx, tid, "stdout"); apiCode(err) != api.CodeForbidden {
					t.Fatalf("uni-c reads the logs of uni-a's task that ran on %s: %v", seg.Machine, err)
				}
			}
		}
	})

	t.Run("limit", func(t *testing.T) {
		w := 150.0
		o, err := b.n.SetLimit(ctx, api.LimitRequest{Watts: &w})
		if err != nil || o.Name != "uni-b" || o.LimitW != 150 {
			t.Fatalf("set limit: %+v %v", o, err)
		}
		p := 50.0
		if o, err = b.n.SetLimit(ctx, api.LimitRequest{Percent: &p}); err != nil || o.LimitW != 50 {
			t.Fatalf("set limit 50%%: %+v %v", o, err)
		}
		if _, err := b.n.SetLimit(ctx, api.LimitRequest{Percent: &p, Watts: &w}); apiCode(err) != api.CodeBadRequest {
			t.Fatalf("both percent and watts: %v", err)
		}
	})

	t.Run("file protocols", func(t *testing.T) {
		fileProtocolChecks(t, ctx, a, b, c, resp.TaskIDs)
	})
}

func apiCode(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	if err == nil {
		return ""
	}
	return "not an api error: " + err.Error()
}
