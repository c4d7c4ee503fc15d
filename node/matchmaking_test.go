package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// machinesFile is a machines file of n machines named prefix0..., with the
// given policy lines (indented under policy:) and extra lines per machine.
func machinesFile(prefix string, n int, gflops, watts float64, extra, policy string) string {
	var b strings.Builder
	b.WriteString("machines:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: %s%d\n    gflops: %g\n    busy_watts: %g\n%s", prefix, i, gflops, watts, extra)
	}
	b.WriteString("policy:\n  unsafe_run_as_peer_user: true\n" + policy)
	return b.String()
}

// TestOwnersPoliciesSteerPlacement is issue 14's first scenario with real
// peers and real processes: organisation A offers four fast, efficient
// machines whose owner allows only /bin/true; B and C allow /bin/sh. B
// submits 12 /bin/sh tasks: all 12 end done and none was ever placed on
// A's machines (before, EHOSEP put them all there and the executor refused
// them). A /bin/true task then runs on A's machines, still offered to what
// A allows.
func TestOwnersPoliciesSteerPlacement(t *testing.T) {
	waitsMostly(t)
	peers := federation(t, "process", []string{"a", "b", "c"}, map[string]string{
		"a": machinesFile("a", 4, 100, 10, "", "  allow: [/bin/true]\n"),
		"b": machinesFile("b", 2, 10, 100, "", "  allow: [/bin/sh]\n"),
		"c": machinesFile("c", 2, 10, 90, "", "  allow: [/bin/sh]\n"),
	}, map[string]func(*config.Config){"b": func(c *config.Config) { c.Limit = "system" }})
	a, b := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Every peer sees A's registration with its owner policy.
	if m := b.machine("a/a0"); m.Owner == nil || m.Owner.AllowAny || len(m.Owner.Allow) != 1 || m.Owner.Allow[0] != "/bin/true" || m.OS == "" {
		t.Fatalf("a/a0 as b sees it: %+v", m)
	}
	req := api.SubmitRequest{Job: "sh"}
	for i := range 12 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Name: fmt.Sprintf("sh-%d", i), Argv: []string{"/bin/sh", "-c", "sleep 0.2"}, SizeMFlop: 1000})
	}
	resp, err := b.n.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range resp.TaskIDs {
		waitFor(t, 60*time.Second, id+" done", func() bool {
			tk := b.task(id)
			if tk.State == ledger.TaskFailed {
				t.Fatalf("%s failed: %s", id, tk.Reason)
			}
			for _, s := range tk.Segments {
				if s.MachineOrg == "a" {
					t.Fatalf("%s placed on %s, whose owner allows only /bin/true", id, s.Machine)
				}
			}
			return tk.State == ledger.TaskDone
		})
	}
	one, err := b.n.Submit(ctx, api.SubmitRequest{Job: "true", Tasks: []api.SubmitTask{{Argv: []string{"/bin/true"}, SizeMFlop: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	id := one.TaskIDs[0]
	a.waitDone(t, 30*time.Second, id+" done on a's machines", id)
	if seg := a.task(id).Segments; len(seg) != 1 || seg[0].MachineOrg != "a" {
		t.Fatalf("/bin/true ran on %+v, want one of a's (the most efficient) machines", seg)
	}
}

// TestSharedMachineAndPendingReasons: 4-CPU tasks on one 8-CPU machine,
// real processes: two run at once on it, a third waits with the reason
// no_free_resources (through the API); a task requiring a label nobody has
// waits with a reason naming the label; a memory request larger than any
// machine is refused at submit.
func TestSharedMachineAndPendingReasons(t *testing.T) {
	peers := federation(t, "process", []string{"u"}, map[string]string{
		"u": machinesFile("m", 1, 10, 100, "    cpus: 8\n    memory: 16GiB\n    labels: [infiniband]\n", "  allow: [/bin/sh]\n"),
	}, nil)
	u := peers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if m := u.machine("u/m0"); m.CPUs != 8 || m.MemoryBytes != 16<<30 || len(m.Labels) != 1 {
		t.Fatalf("u/m0 registered as %+v", m)
	}

	_, err := u.n.Submit(ctx, api.SubmitRequest{Job: "huge", Tasks: []api.SubmitTask{{Argv: []string{"/bin/sh", "-c", "true"}, SizeMFlop: 1, MemoryBytes: 64 << 30}}})
	var ae *api.Error
	if err == nil || !errorsAs(err, &ae) || ae.Code != api.CodeConflict || !strings.Contains(err.Error(), "no_machine_fits") {
		t.Fatalf("64 GiB on a 16 GiB federation: %v, want 409 conflict (no_machine_fits)", err)
	}

	// The gate holds the first two tasks running until the test lets go.
	gate := newGate(t)
	req := api.SubmitRequest{Job: "quad"}
	for i := range 3 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Name: fmt.Sprintf("quad-%d", i), SizeMFlop: 1000, CPUs: 4,
			Argv: []string{"/bin/sh", "-c", gate.wait()}})
	}
	req.Tasks = append(req.Tasks, api.SubmitTask{Name: "matlab", SizeMFlop: 1000, Argv: []string{"/bin/sh", "-c", "true"},
		Requirements: []api.Requirement{{Attribute: "label.infiniband", Operator: "is_set"}, {Attribute: "label.matlab", Operator: "is_set"}}})
	resp, err := u.n.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	quads, matlab := resp.TaskIDs[:3], resp.TaskIDs[3]
	waitFor(t, 30*time.Second, "two 4-CPU tasks running at once on the 8-CPU machine", func() bool {
		running := 0
		for _, id := range quads {
			if u.task(id).State == ledger.TaskRunning {
				running++
			}
		}
		return running == 2 && machineTasks(u.machine("u/m0")) == 2
	})
	views, err := u.n.Tasks(ctx, api.TaskQuery{States: []string{"queued"}})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]api.TaskView{}
	for _, v := range views {
		reasons[v.ID] = v
	}
	third := ""
	for _, id := range quads {
		if u.task(id).State == ledger.TaskQueued {
			third = id
		}
	}
	if v := reasons[third]; third == "" || v.Pending != "no_free_resources" {
		t.Fatalf("the third 4-CPU task %q waits with %q (%s), want no_free_resources", third, v.Pending, v.PendingDetail)
	}
	if v := reasons[matlab]; v.Pending != "no_match" || !strings.Contains(v.PendingDetail, "label.matlab") {
		t.Fatalf("the task requiring label.matlab waits with %q (%s), want no_match naming the label", v.Pending, v.PendingDetail)
	}
	d, err := u.n.Task(ctx, matlab)
	if err != nil || d.Pending != "no_match" {
		t.Fatalf("peer task %s: pending %q (%v)", matlab, d.Pending, err)
	}

	gate.open(t)
	for _, id := range quads {
		u.waitDone(t, 60*time.Second, id+" done", id)
	}
	if s := u.task(matlab).State; s != ledger.TaskQueued {
		t.Fatalf("the task requiring label.matlab is %s, want still queued", s)
	}
}

func errorsAs(err error, target **api.Error) bool { return errors.As(err, target) }

func machineTasks(m ledger.Machine) int { return len(m.Tasks()) }
