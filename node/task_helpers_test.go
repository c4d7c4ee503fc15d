package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// shellPeer is a federation of one real peer of organisation org, on the
// process executor, offering n machines (m0, m1, ...: 10 GFLOPS, 100 W)
// of cpus CPUs each, whose owner allows /bin/sh.
func shellPeer(t *testing.T, org string, n, cpus int) *tnode {
	t.Helper()
	return federation(t, "process", []string{org}, map[string]string{
		org: machinesFile("m", n, 10, 100, fmt.Sprintf("    cpus: %d\n", cpus), "  allow: [/bin/sh]\n"),
	}, nil)[0]
}

// submitShell submits a job of one task, name, that runs script under
// /bin/sh with cpus CPUs and a wall-clock limit, and returns its ID.
func (tn *tnode) submitShell(ctx context.Context, name string, cpus int64, limit time.Duration, script string) string {
	tn.tb.Helper()
	resp, err := tn.n.Submit(ctx, api.SubmitRequest{Job: name, Tasks: []api.SubmitTask{{Name: name, SizeMFlop: 1000,
		CPUs: cpus, WallLimitMs: limit.Milliseconds(), Argv: []string{"/bin/sh", "-c", script}}}})
	if err != nil {
		tn.tb.Fatalf("%s submits %s: %v", tn.org, name, err)
	}
	return resp.TaskIDs[0]
}

// gate is a file whose creation lets the tasks waiting for it go: it
// holds a task running for as long as the test needs.
type gate string

func newGate(t testing.TB) gate { return gate(filepath.Join(t.TempDir(), "go")) }

// wait is a shell script that returns once the gate is open.
func (g gate) wait() string { return fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done", string(g)) }

// open lets the waiting tasks go.
func (g gate) open(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(string(g), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitDone waits up to d, as waitFor does (what names the wait), until
// task id is done as tn's ledger has it, and fails the test at once when
// it failed instead.
func (tn *tnode) waitDone(t testing.TB, d time.Duration, what, id string) {
	t.Helper()
	waitFor(t, d, what, func() bool {
		tk := tn.task(id)
		if tk.State == ledger.TaskFailed {
			t.Fatalf("task %s failed: %+v", id, tk)
		}
		return tk.State == ledger.TaskDone
	})
}
