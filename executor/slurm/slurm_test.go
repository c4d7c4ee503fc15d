package slurm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/executor/slurm/slurmtest"
)

// The tests below run real jobs on a private Slurm (slurmtest): one
// cluster for the whole sequence, the node set down last.

var quiet = slog.New(slog.DiscardHandler)

// testPolicy runs tasks as the dedicated coopgrid-task user where it
// exists (.ci/run creates it), else as the test's own user (opt-in).
func testPolicy() executor.Policy {
	p := executor.Policy{Allow: []string{"sh", "sleep", "true"}, KillGrace: time.Second}
	if _, err := user.Lookup("coopgrid-task"); err == nil {
		p.RunAs = "coopgrid-task"
	} else {
		p.UnsafeRunAsPeerUser = true
	}
	return p
}

func newExec(t *testing.T, c *slurmtest.Cluster, data string) *Executor {
	t.Helper()
	s := Settings{Partition: c.Partition, Share: 1, GFLOPSPerCPU: 2, BusyWattsPerCPU: 10, IdleWattsPerCPU: 2, PollInterval: 200 * time.Millisecond}
	ctx := context.Background()
	ms, skipped, err := Discover(ctx, s)
	if err != nil {
		t.Fatalf("Discover: %v (skipped %v)", err, skipped)
	}
	e, err := New(ctx, Config{Settings: s, Machines: ms, Policy: testPolicy(), TasksDir: filepath.Join(data, "tasks"),
		JournalPath: filepath.Join(data, JobJournalFile), Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func closeExec(t *testing.T, e *Executor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	for range e.Results() {
	}
}

func result(t *testing.T, e *Executor, id string) executor.Result {
	t.Helper()
	select {
	case r := <-e.Results():
		if r.ID != id {
			t.Fatalf("result of %s, want %s", r.ID, id)
		}
		return r
	case <-time.After(90 * time.Second):
		t.Fatalf("no result for %s within 90 s", id)
	}
	return executor.Result{}
}

// jobOf waits until squeue shows task's job in state (a prefix of
// "ID|STATE|NAME" after the ID), and returns its ID.
func jobOf(t *testing.T, c *slurmtest.Cluster, task, state string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, j := range c.Jobs() {
			f := strings.Split(j, "|")
			if len(f) == 3 && f[1] == state && strings.HasPrefix(f[2], "coopgrid-"+task+"-") {
				return f[0]
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no job of %s in state %s; squeue: %v", task, state, c.Jobs())
	return ""
}

func TestSlurmExecutor(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{CPUs: 4, MemoryMiB: 4096, Features: "ssd,coopgridtest"})
	data := filepath.Join(c.Dir, "peer")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newExec(t, c, data)
	defer closeExec(t, e)

	// A job past its time limit (Slurm's limits are whole minutes: a
	// 1 s limit is one minute), on an executor of its own so that its
	// Result, a minute or two away, waits while the others run.
	dataTO := filepath.Join(c.Dir, "peer-timeout")
	if err := os.MkdirAll(dataTO, 0o755); err != nil {
		t.Fatal(err)
	}
	eTO := newExec(t, c, dataTO)
	defer closeExec(t, eTO)
	if err := eTO.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-timeout", Argv: []string{"sleep", "600"}, WallClockLimit: time.Second}); err != nil {
		t.Fatal(err)
	}

	t.Run("machines from the cluster", func(t *testing.T) {
		ms := e.Machines()
		if len(ms) != 1 || ms[0].Name != c.Node || ms[0].CPUs != 4 || ms[0].MemoryBytes != 4096<<20 || ms[0].GFLOPS != 8 || ms[0].BusyWatts != 40 {
			t.Fatalf("machines %+v: want the node %s with 4 CPUs, 4 GiB, 8 GFLOPS, 40 W", ms, c.Node)
		}
		if !slices.Equal(ms[0].Labels, []string{"ssd", "coopgridtest"}) {
			t.Errorf("labels %v: want the node's features", ms[0].Labels)
		}
	})

	t.Run("held until the gate opens, outputs back", func(t *testing.T) {
		gate := make(chan bool, 1)
		spec := executor.TaskSpec{ID: "t-ok", Argv: []string{"sh", "-c", "echo hello; echo \"$GREETING $COOPGRID_TASK_ID\" > out.txt; cat in.txt >> out.txt"},
			Env: map[string]string{"GREETING": "it's"}, Inputs: map[string][]byte{"in.txt": []byte("input\n")},
			OutputPatterns: []string{"out.txt"}, CPUs: 2, MemoryBytes: 100 << 20, WallClockLimit: 5 * time.Minute, Gate: gate}
		if err := e.Start(context.Background(), c.Node, spec); err != nil {
			t.Fatal(err)
		}
		job := jobOf(t, c, "t-ok", "PENDING")
		reason, _ := c.Run("squeue", "-h", "-j", job, "-o", "%r|%C|%m|%l")
		if !strings.HasPrefix(reason, "JobHeld") || !strings.Contains(reason, "|2|100M|") {
			t.Errorf("squeue says %q: want the job held, with 2 CPUs and 100M", reason)
		}
		if got := e.Running(); !slices.Equal(got, []string{"t-ok"}) {
			t.Errorf("Running %v", got)
		}
		gate <- true
		r := result(t, e, "t-ok")
		if !r.OK() || r.ExitCode != 0 || r.MachineFailed {
			t.Fatalf("result %+v: want ok", r)
		}
		b, err := os.ReadFile(r.Outputs["out.txt"])
		if err != nil || string(b) != "it's t-ok\ninput\n" {
			t.Errorf("output out.txt = %q, %v", b, err)
		}
		if out, _ := os.ReadFile(r.StdoutPath); string(out) != "hello\n" {
			t.Errorf("stdout %q", out)
		}
		if r.EnergySource != executor.EnergyDeclared || r.EnergyMilliJ <= 0 {
			t.Errorf("energy %d mJ from %s: want declared, positive (the test cluster has no energy plugin)", r.EnergyMilliJ, r.EnergySource)
		}
		recs, err := ReadJobJournal(filepath.Join(data, JobJournalFile))
		if err != nil {
			t.Fatal(err)
		}
		var evs []string
		for _, rec := range recs {
			if rec.Task == "t-ok" {
				evs = append(evs, rec.Event)
				if rec.Event != EventSubmit && rec.Job != job {
					t.Errorf("journal record %+v: want job %s", rec, job)
				}
			}
		}
		if !slices.Equal(evs, []string{EventSubmit, EventJob, EventEnd}) {
			t.Errorf("journal events %v", evs)
		}
	})

	t.Run("a closed gate runs nothing", func(t *testing.T) {
		gate := make(chan bool, 1)
		marker := filepath.Join(data, "ran")
		spec := executor.TaskSpec{ID: "t-gate", Argv: []string{"sh", "-c", "touch " + marker}, Gate: gate}
		if err := e.Start(context.Background(), c.Node, spec); err != nil {
			t.Fatal(err)
		}
		jobOf(t, c, "t-gate", "PENDING")
		gate <- false
		r := result(t, e, "t-gate")
		if r.Reason != executor.ReasonStopped || r.MachineFailed {
			t.Fatalf("result %+v: want stopped", r)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the task ran although its gate said false")
		}
	})

	t.Run("a gate opened after the start's deadline runs nothing", func(t *testing.T) {
		gate := make(chan bool, 1)
		marker := filepath.Join(data, "ran-late")
		by := time.Now().Add(-time.Second) // the peer was held up past it
		spec := executor.TaskSpec{ID: "t-late-gate", Argv: []string{"sh", "-c", "touch " + marker}, Gate: gate,
			StartBy: func() time.Time { return by }}
		if err := e.Start(context.Background(), c.Node, spec); err != nil {
			t.Fatal(err)
		}
		job := jobOf(t, c, "t-late-gate", "PENDING")
		gate <- true
		r := result(t, e, "t-late-gate")
		if r.Reason != executor.ReasonStopped || !r.LeaseLapsed || r.MachineFailed || !strings.Contains(r.Detail, "start_late") {
			t.Fatalf("result %+v: want stopped, a lapsed lease (start_late), not a machine failure", r)
		}
		if st := endedState(c, job); st != "CANCELLED" {
			t.Errorf("job %s ended %q: want cancelled held", job, st)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the task ran although its gate opened after its start's deadline")
		}
		recs, err := ReadJobJournal(filepath.Join(data, JobJournalFile))
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(recs, func(r JobRecord) bool { return r.Event == EventEnd && r.Task == "t-late-gate" }); i < 0 || !recs[i].NotRun || recs[i].Job != job {
			t.Errorf("journal %+v: want an end record of job %s, not run", recs, job)
		}
	})

	t.Run("exit status", func(t *testing.T) {
		if err := e.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-exit", Argv: []string{"sh", "-c", "exit 3"}}); err != nil {
			t.Fatal(err)
		}
		r := result(t, e, "t-exit")
		if r.Reason != executor.ReasonExitNonzero || r.ExitCode != 3 || r.MachineFailed {
			t.Fatalf("result %+v: want exit_nonzero 3", r)
		}
	})

	t.Run("refused by the policy, nothing submitted", func(t *testing.T) {
		if err := e.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-refused", Argv: []string{"cat", "/etc/passwd"}}); err != nil {
			t.Fatal(err)
		}
		r := result(t, e, "t-refused")
		if r.Reason != executor.ReasonNotAllowed {
			t.Fatalf("result %+v: want not_allowed", r)
		}
	})

	t.Run("stop of a checkpointable task", func(t *testing.T) {
		ck := "trap 'echo 42 > \"$CHECKPOINT_DIR/state\"; exit 0' TERM; while :; do sleep 0.1; done"
		if err := e.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-ck", Argv: []string{"sh", "-c", ck}, Checkpointable: true}); err != nil {
			t.Fatal(err)
		}
		jobOf(t, c, "t-ck", "RUNNING")
		time.Sleep(500 * time.Millisecond) // the trap is set
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// A grace far longer than the test's deadline: the job must end
		// by its own handling of SIGTERM, not by the kill after the grace.
		if err := e.Stop(ctx, "t-ck", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		r := result(t, e, "t-ck")
		if r.Reason != executor.ReasonStopped || r.MachineFailed {
			t.Fatalf("result %+v: want stopped", r)
		}
		b, err := os.ReadFile(filepath.Join(r.CheckpointDir, "state"))
		if err != nil || string(b) != "42\n" {
			t.Errorf("checkpoint state %q, %v: want what the task wrote on SIGTERM", b, err)
		}
	})

	t.Run("scancel from outside is a machine failure", func(t *testing.T) {
		if err := e.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-scancel", Argv: []string{"sleep", "300"}}); err != nil {
			t.Fatal(err)
		}
		job := jobOf(t, c, "t-scancel", "RUNNING")
		if out, err := c.Run("scancel", job); err != nil {
			t.Fatalf("scancel: %v %s", err, out)
		}
		r := result(t, e, "t-scancel")
		if !r.MachineFailed || !strings.Contains(r.Detail, "cancelled") {
			t.Fatalf("result %+v: want a machine failure naming the cancellation", r)
		}
	})

	t.Run("a restarted peer ends the jobs it left", func(t *testing.T) {
		gate := make(chan bool, 1)
		gate <- true
		if err := e.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-left", Argv: []string{"sleep", "300"}, Gate: gate}); err != nil {
			t.Fatal(err)
		}
		job := jobOf(t, c, "t-left", "RUNNING")
		// A second executor on the same journal: as after a crash.
		data2 := filepath.Join(c.Dir, "peer2")
		if err := os.MkdirAll(data2, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(data, JobJournalFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data2, JobJournalFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		e2 := newExec(t, c, data2)
		if left := e2.Leftovers(); len(left) != 1 || left["t-left"] != c.Node {
			t.Errorf("leftovers %v: want t-left on %s", left, c.Node)
		}
		// The runner found the ledger no longer places t-left there.
		if err := e2.EndLeftovers(context.Background()); err != nil {
			t.Fatal(err)
		}
		closeExec(t, e2)
		// Cancelled: it may show COMPLETING for a moment, never RUNNING
		// again, and leaves the queue.
		deadline := time.Now().Add(30 * time.Second)
		for gone := false; !gone; {
			gone = true
			for _, j := range c.Jobs() {
				if strings.HasPrefix(j, job+"|") {
					gone = false
					if !strings.HasPrefix(j, job+"|COMPLETING|") || time.Now().After(deadline) {
						t.Fatalf("job %s still queued after the restart: %s", job, j)
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		recs, _ := ReadJobJournal(filepath.Join(data2, JobJournalFile))
		if i := slices.IndexFunc(recs, func(r JobRecord) bool { return r.Event == EventAbandoned && r.Task == "t-left" && r.Job == job }); i < 0 {
			t.Errorf("no abandoned record of job %s in %+v", job, recs)
		}
		// The first executor sees its job ended by someone else.
		if r := result(t, e, "t-left"); !r.MachineFailed {
			t.Errorf("result %+v: want a machine failure", r)
		}
	})

	t.Run("a restarted peer adopts its jobs", func(t *testing.T) {
		data4 := filepath.Join(c.Dir, "peer4")
		if err := os.MkdirAll(data4, 0o755); err != nil {
			t.Fatal(err)
		}
		e4 := newExec(t, c, data4)
		// t-adopt-run still runs at the restart; t-adopt-done ends while
		// the peer is down. Both write an output and a line on stdout.
		specs := map[string]executor.TaskSpec{}
		for id, sleep := range map[string]string{"t-adopt-run": "8", "t-adopt-done": "2"} {
			gate := make(chan bool, 1)
			gate <- true
			specs[id] = executor.TaskSpec{ID: id, Argv: []string{"sh", "-c", "sleep " + sleep + "; echo $COOPGRID_TASK_ID > out.txt; echo hi"},
				OutputPatterns: []string{"out.txt"}, Inputs: map[string][]byte{"in.txt": []byte("x")}}
			sp := specs[id]
			sp.Gate = gate
			if err := e4.Start(context.Background(), c.Node, sp); err != nil {
				t.Fatal(err)
			}
		}
		runJob := jobOf(t, c, "t-adopt-run", "RUNNING")
		doneJob := jobOf(t, c, "t-adopt-done", "RUNNING")
		// As if the peer died: Close leaves the released jobs running and
		// reports nothing.
		e4.Detach()
		closeExec(t, e4)
		if st := squeueState(c, runJob); st != "RUNNING" {
			t.Fatalf("job %s %s after the detached close: want it running on", runJob, st)
		}
		endedJobOf(t, c, "t-adopt-done", "COMPLETED") // while the peer is down
		e5 := newExec(t, c, data4)
		defer closeExec(t, e5)
		left := e5.Leftovers()
		if len(left) != 2 || left["t-adopt-run"] != c.Node || left["t-adopt-done"] != c.Node {
			t.Fatalf("leftovers %v: want both runs on %s", left, c.Node)
		}
		ctx := context.Background()
		if err := e5.Adopt(ctx, "elsewhere", specs["t-adopt-run"]); !errors.Is(err, executor.ErrUnknownTask) {
			t.Errorf("adopt on another machine: %v, want ErrUnknownTask", err)
		}
		if err := e5.Adopt(ctx, c.Node, executor.TaskSpec{ID: "t-never"}); !errors.Is(err, executor.ErrUnknownTask) {
			t.Errorf("adopt of a task never run: %v, want ErrUnknownTask", err)
		}
		for _, id := range []string{"t-adopt-done", "t-adopt-run"} {
			sp := specs[id]
			sp.Inputs = nil // the ledger's view: inputs are not refetched
			if err := e5.Adopt(ctx, c.Node, sp); err != nil {
				t.Fatalf("adopt %s: %v", id, err)
			}
		}
		if err := e5.EndLeftovers(ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]executor.Result{}
		for range 2 {
			select {
			case r := <-e5.Results():
				got[r.ID] = r
			case <-time.After(90 * time.Second):
				t.Fatalf("adopted results: %v after 90 s", got)
			}
		}
		for id, job := range map[string]string{"t-adopt-run": runJob, "t-adopt-done": doneJob} {
			r := got[id]
			if !r.OK() || r.MachineFailed || r.ExitCode != 0 {
				t.Fatalf("%s: result %+v: want ok", id, r)
			}
			if b, err := os.ReadFile(r.Outputs["out.txt"]); err != nil || string(b) != id+"\n" {
				t.Errorf("%s: output %q, %v", id, b, err)
			}
			if b, _ := os.ReadFile(r.StdoutPath); string(b) != "hi\n" {
				t.Errorf("%s: stdout %q", id, b)
			}
			if r.EnergySource != executor.EnergyDeclared || r.EnergyMilliJ <= 0 || !r.End.After(r.Start) {
				t.Errorf("%s: %d mJ %s from %v to %v: want declared energy over the job's own times", id, r.EnergyMilliJ, r.EnergySource, r.Start, r.End)
			}
			recs, _ := ReadJobJournal(filepath.Join(data4, JobJournalFile))
			var evs []string
			for _, rec := range recs {
				if rec.Task == id {
					evs = append(evs, rec.Event)
					if rec.Event != EventSubmit && rec.Job != job {
						t.Errorf("%s: journal record %+v: want job %s", id, rec, job)
					}
				}
			}
			if !slices.Equal(evs, []string{EventSubmit, EventJob, EventAdopted, EventEnd}) {
				t.Errorf("%s: journal events %v", id, evs)
			}
		}
		if got["t-adopt-run"].End.Sub(got["t-adopt-run"].Start) < 7*time.Second {
			t.Errorf("t-adopt-run from %v to %v: want the job's own run (8 s)", got["t-adopt-run"].Start, got["t-adopt-run"].End)
		}
	})

	t.Run("TIMEOUT at the time limit", func(t *testing.T) {
		select {
		case r := <-eTO.Results():
			if r.ID != "t-timeout" || r.Reason != executor.ReasonTimeout || r.MachineFailed {
				t.Fatalf("result %+v: want killed_timeout, not a machine failure", r)
			}
			t.Logf("ran %v", r.End.Sub(r.Start).Round(time.Second))
		case <-time.After(180 * time.Second):
			t.Fatalf("no result within 180 s; squeue %v", c.Jobs())
		}
		if testing.Verbose() {
			recs, _ := ReadJobJournal(filepath.Join(dataTO, JobJournalFile))
			for _, rec := range recs {
				if rec.Event == EventJob {
					out, _ := c.Run("scontrol", "show", "job", "-o", rec.Job)
					t.Logf("scontrol show job -o: %s", out)
				}
			}
		}
	})

	t.Run("a lapsed lease kills the job", func(t *testing.T) {
		data6 := filepath.Join(c.Dir, "peer6")
		if err := os.MkdirAll(data6, 0o755); err != nil {
			t.Fatal(err)
		}
		e6 := newExec(t, c, data6)
		defer closeExec(t, e6)
		// The peer's contact with its federation, renewed until it is
		// cut off.
		var last atomic.Int64
		last.Store(time.Now().UnixNano())
		cutOff := make(chan struct{})
		go func() {
			for {
				select {
				case <-cutOff:
					return
				case <-time.After(100 * time.Millisecond):
					last.Store(time.Now().UnixNano())
				}
			}
		}()
		e6.SetLease(time.Second, func() time.Time { return time.Unix(0, last.Load()) })
		gate := make(chan bool, 1)
		gate <- true
		// It ignores SIGTERM: only the lease's SIGKILL (or Slurm's after
		// KillWait) ends it.
		if err := e6.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-lease", Argv: []string{"sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"}, Gate: gate}); err != nil {
			t.Fatal(err)
		}
		job := jobOf(t, c, "t-lease", "RUNNING")
		time.Sleep(3 * time.Second) // three leases, in contact
		if st := squeueState(c, job); st != "RUNNING" || !slices.Equal(e6.Running(), []string{"t-lease"}) {
			t.Fatalf("job %s %s, running %v while the peer is in contact: want it running", job, st, e6.Running())
		}
		close(cutOff)
		cut := time.Now()
		r := result(t, e6, "t-lease")
		t.Logf("ended %v after the cut (lease 1 s)", time.Since(cut).Round(100*time.Millisecond))
		if r.Reason != executor.ReasonStopped || !r.LeaseLapsed || r.MachineFailed || !strings.Contains(r.Detail, "lease lapsed") {
			t.Fatalf("result %+v: want stopped, a lapsed lease, not a machine failure", r)
		}
		if st := squeueState(c, job); st == "RUNNING" || st == "PENDING" {
			t.Errorf("job %s still %s after its lease lapsed", job, st)
		}
	})

	t.Run("a dead peer's lease kills nothing", func(t *testing.T) {
		// A peer that dies (Detach, as node's crash) leaves its jobs to
		// the next daemon: its lapsing contact must not kill them.
		data7 := filepath.Join(c.Dir, "peer7")
		if err := os.MkdirAll(data7, 0o755); err != nil {
			t.Fatal(err)
		}
		e7 := newExec(t, c, data7)
		var dead atomic.Bool
		e7.SetLease(time.Second, func() time.Time {
			if dead.Load() {
				return time.Now().Add(-time.Hour)
			}
			return time.Now()
		})
		gate := make(chan bool, 1)
		gate <- true
		if err := e7.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-dead", Argv: []string{"sleep", "300"}, Gate: gate}); err != nil {
			t.Fatal(err)
		}
		job := jobOf(t, c, "t-dead", "RUNNING")
		e7.Detach()
		dead.Store(true)
		time.Sleep(2 * time.Second) // two leases without contact
		closeExec(t, e7)
		if st := squeueState(c, job); st != "RUNNING" {
			t.Errorf("job %s %q after its peer died: want it running on, for the next daemon", job, st)
		}
		if out, err := c.Run("scancel", job); err != nil {
			t.Errorf("scancel: %v %s", err, out)
		}
	})

	t.Run("close stops the running jobs", func(t *testing.T) {
		data3 := filepath.Join(c.Dir, "peer3")
		if err := os.MkdirAll(data3, 0o755); err != nil {
			t.Fatal(err)
		}
		e3 := newExec(t, c, data3)
		if err := e3.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-close", Argv: []string{"sleep", "300"}}); err != nil {
			t.Fatal(err)
		}
		job := jobOf(t, c, "t-close", "RUNNING")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := e3.Close(ctx); err != nil {
			t.Fatal(err)
		}
		r := result(t, e3, "t-close")
		if r.Reason != executor.ReasonStopped || r.MachineFailed {
			t.Errorf("result %+v: want stopped by the executor", r)
		}
		for _, j := range c.Jobs() {
			if strings.HasPrefix(j, job+"|RUNNING") || strings.HasPrefix(j, job+"|PENDING") {
				t.Errorf("job %s still queued after Close: %s", job, j)
			}
		}
		if _, ok := <-e3.Results(); ok {
			t.Error("Results still open after Close and the last result")
		}
		if err := e3.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-late", Argv: []string{"true"}}); !errors.Is(err, executor.ErrClosed) {
			t.Errorf("Start after Close: %v, want ErrClosed", err)
		}
	})

	t.Run("a node set down", func(t *testing.T) {
		if err := e.Start(context.Background(), c.Node, executor.TaskSpec{ID: "t-down", Argv: []string{"sleep", "300"}}); err != nil {
			t.Fatal(err)
		}
		jobOf(t, c, "t-down", "RUNNING")
		if err := c.SetNode("down", "coopgrid-test"); err != nil {
			t.Fatal(err)
		}
		r := result(t, e, "t-down")
		if !r.MachineFailed {
			t.Fatalf("result %+v: want a machine failure", r)
		}
		waitAvail(t, e, c.Node, false)
		if err := c.SetNode("resume", ""); err != nil {
			t.Fatal(err)
		}
		waitAvail(t, e, c.Node, true)
	})
}

// endedJobOf waits until squeue -t all shows task's job in state, and
// returns its ID.
func endedJobOf(t *testing.T, c *slurmtest.Cluster, task, state string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := c.Run("squeue", "-h", "-t", "all", "-o", "%i|%T|%j")
		for _, j := range strings.Fields(out) {
			if f := strings.Split(j, "|"); len(f) == 3 && f[1] == state && strings.HasPrefix(f[2], "coopgrid-"+task+"-") {
				return f[0]
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no job of %s in state %s", task, state)
	return ""
}

// endedState is the job's state in squeue -t all ("" when unknown).
func endedState(c *slurmtest.Cluster, job string) string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := c.Run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T")
		st := strings.TrimSpace(out)
		if st != "PENDING" && st != "RUNNING" && st != "COMPLETING" || time.Now().After(deadline) {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// squeueState is the job's state in squeue ("" when gone).
func squeueState(c *slurmtest.Cluster, job string) string {
	for _, j := range c.Jobs() {
		if f := strings.Split(j, "|"); len(f) == 3 && f[0] == job {
			return f[1]
		}
	}
	return ""
}

func waitAvail(t *testing.T, e *Executor, node string, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		why, down := e.NodeAvailability()[node]
		if down != want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s available=%v (%q), want %v", node, !down, why, want)
		}
		select {
		case <-e.AvailabilityChanged():
		case <-time.After(time.Second):
		}
	}
}
