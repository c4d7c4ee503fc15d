package node

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/executor/slurm"
	"github.com/coopgrid/coopgrid/executor/slurm/slurmtest"
	"github.com/coopgrid/coopgrid/ledger"
)

// slurmMachinesFile is a Slurm peer's machines file: the private
// cluster's partition, 10 GFLOPS and 10 W per CPU (more efficient than the
// process peer's machine), tasks on a directory the job user reaches.
func slurmMachinesFile(c *slurmtest.Cluster) string {
	runAs := "  unsafe_run_as_peer_user: true\n"
	if _, err := user.Lookup("coopgrid-task"); err == nil {
		runAs = "  run_as: coopgrid-task\n"
	}
	return fmt.Sprintf("slurm:\n  partition: %s\n  gflops_per_cpu: 10\n  busy_watts_per_cpu: 10\n  tasks_dir: %s\n  poll_interval: 200ms\npolicy:\n  allow: [/bin/sh]\n%s",
		c.Partition, filepath.Join(c.Dir, "hpc-tasks"), runAs)
}

// TestSlurmPeerInAFederation (issue 18): a process-backed peer (sl-sub,
// one slot) and a Slurm-backed peer (sl-hpc: its machine is the private
// cluster's node, 4 CPUs) form a federation. sl-sub submits a mixed job:
// the tasks placed on the Slurm node run as Slurm jobs (seen in squeue),
// the others as processes, and every output comes back. Then a job
// cancelled with scancel from outside, and the node set down in Slurm,
// are machine failures: the task is queued again and finishes, the
// machine is drained while the node is down and undrained when it is back.
func TestSlurmPeerInAFederation(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{CPUs: 4, MemoryMiB: 4096, Features: "ssd"})
	if err := os.MkdirAll(filepath.Join(c.Dir, "hpc-tasks"), 0o711); err != nil {
		t.Fatal(err)
	}
	peers := federation(t, "process", []string{"sl-sub", "sl-hpc"}, map[string]string{
		"sl-sub": processMachine("a1", 1, 200),
		"sl-hpc": slurmMachinesFile(c),
	}, map[string]func(*config.Config){
		"sl-sub": func(c *config.Config) { c.Limit = "system" },
		"sl-hpc": func(c *config.Config) { c.Executor.Kind = "slurm" },
	})
	sub, hpc := peers[0], peers[1]
	node := "sl-hpc/" + c.Node
	waitFor(t, 20*time.Second, node+" registered", func() bool { return sub.machine(node).ID == node })
	if m := sub.machine(node); m.CPUs != 4 || m.MemoryBytes != 4096<<20 || m.MFLOPS != 40_000 || len(m.Labels) != 1 || m.Labels[0] != "ssd" {
		t.Fatalf("machine %+v: want the node's 4 CPUs, 4 GiB, 40 GFLOPS and its feature", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The mixed job: five tasks for one process slot and four CPUs.
	req := api.SubmitRequest{Job: "mixed"}
	for i := range 5 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Name: fmt.Sprintf("m-%d", i),
			Argv:    []string{"/bin/sh", "-c", `sleep 2; echo "$COOPGRID_MACHINE ${COOPGRID_SLURM_JOB_ID:-none}" > where.txt; echo ok`},
			Outputs: []string{"where.txt"}, SizeMFlop: 10})
	}
	resp, err := sub.n.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sawJob := false
	for _, id := range resp.TaskIDs {
		waitFor(t, 90*time.Second, id+" done", func() bool {
			for _, j := range c.Jobs() {
				sawJob = sawJob || strings.Contains(j, "|coopgrid-")
			}
			s := sub.task(id).State
			if s == ledger.TaskFailed {
				t.Fatalf("task %s failed: %+v", id, sub.task(id))
			}
			return s == ledger.TaskDone
		})
	}
	if !sawJob {
		t.Error("squeue never showed a coopgrid job")
	}
	on := map[string]int{}
	for _, id := range resp.TaskIDs {
		tk := sub.task(id)
		tk.Machine = tk.Segments[len(tk.Segments)-1].Machine
		on[tk.Machine]++
		b, err := os.ReadFile(filepath.Join(sub.dir, config.OutputsDir, id, "where.txt"))
		if err != nil {
			t.Fatalf("output of %s (ran on %s): %v", id, tk.Machine, err)
		}
		_, mname, _ := strings.Cut(tk.Machine, "/")
		f := strings.Fields(string(b))
		if len(f) != 2 || f[0] != mname || (tk.Machine == node) == (f[1] == "none") {
			t.Errorf("output of %s on %s: %q (want the machine, and a Slurm job ID exactly on the Slurm node)", id, tk.Machine, b)
		}
		logs, err := sub.n.Logs(ctx, id, "stdout")
		if err != nil || string(logs) != "ok\n" {
			t.Errorf("stdout of %s on %s: %q, %v", id, tk.Machine, logs, err)
		}
	}
	if on[node] == 0 || on["sl-sub/a1"] == 0 {
		t.Errorf("tasks ran on %v: want both the Slurm node and the process machine", on)
	}

	// scancel from outside: a machine failure, the task runs again.
	id := submitOne(t, ctx, sub, api.SubmitTask{Argv: []string{"/bin/sh", "-c", "sleep 3"}, SizeMFlop: 10, Requirements: []api.Requirement{{Attribute: "label.ssd", Operator: "is_set"}}})[0]
	job := runningJob(t, c, sub, id, node)
	if out, err := c.Run("scancel", job); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	sub.waitDone(t, 90*time.Second, id+" done after the scancel", id)
	if tk := sub.task(id); tk.Attempts < 2 {
		t.Errorf("task %+v: want a second run after the cancellation", tk)
	}

	// The node set down: the job dies, the machine is drained, the task
	// runs again once the node is back.
	id = submitOne(t, ctx, sub, api.SubmitTask{Argv: []string{"/bin/sh", "-c", "sleep 3"}, SizeMFlop: 10, Requirements: []api.Requirement{{Attribute: "label.ssd", Operator: "is_set"}}})[0]
	runningJob(t, c, sub, id, node)
	if err := c.SetNode("down", "coopgrid-test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, node+" drained", func() bool { return sub.machine(node).Drained })
	if s := sub.task(id).State; s == ledger.TaskDone || s == ledger.TaskFailed {
		t.Fatalf("task %s %s while its node is down", id, s)
	}
	if err := c.SetNode("resume", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, node+" undrained", func() bool { return !sub.machine(node).Drained })
	sub.waitDone(t, 90*time.Second, id+" done after the node came back", id)
	_ = hpc
}

// runningJob waits until task id runs on machine and its Slurm job shows
// RUNNING in squeue; it returns the job's ID.
func runningJob(t *testing.T, c *slurmtest.Cluster, tn *tnode, id, machine string) string {
	t.Helper()
	var job string
	waitFor(t, 60*time.Second, id+" running as a Slurm job", func() bool {
		tk := tn.task(id)
		if tk.State != ledger.TaskRunning || tk.Machine != machine {
			return false
		}
		for _, j := range c.Jobs() {
			f := strings.Split(j, "|")
			if len(f) == 3 && f[1] == "RUNNING" && strings.HasPrefix(f[2], "coopgrid-"+id+"-") {
				job = f[0]
				return true
			}
		}
		return false
	})
	return job
}

// TestSlurmPreemptedTaskResumesElsewhere is issue 5's preemption scenario
// with the preempted task on a Slurm peer (issue 18): ck-sub's counting
// task runs as a Slurm job on ck-hpc's one-CPU node; ck-hpc then submits
// work of its own and EHOSEP preempts ck-sub's task. The job gets SIGTERM
// (scancel --full --signal=TERM), writes its final checkpoint within the
// grace, ck-hpc packs and records it, and the task resumes on ck-far's
// process machine from where it stopped.
func TestSlurmPreemptedTaskResumesElsewhere(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{CPUs: 1, MemoryMiB: 1024})
	// Jobs as the peer's user (root): the tasks stay in the peer's data
	// directory, where the checks below read them.
	hpcMachines := fmt.Sprintf("slurm:\n  partition: %s\n  gflops_per_cpu: 10\n  busy_watts_per_cpu: 100\n  poll_interval: 200ms\npolicy:\n  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n", c.Partition)
	peers := federation(t, "process", []string{"ck-sub", "ck-hpc", "ck-far"}, map[string]string{
		"ck-hpc": hpcMachines,
		"ck-far": processMachine("z1", 5, 150),
	}, map[string]func(*config.Config){
		"ck-sub": func(c *config.Config) { ckConfig(c); c.Limit = "system" },
		"ck-hpc": func(c *config.Config) { ckConfig(c); c.Executor.Kind = "slurm" },
		"ck-far": ckConfig,
	})
	sub, hpc, far := peers[0], peers[1], peers[2]
	node := "ck-hpc/" + c.Node
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	id := submitOne(t, ctx, sub, counterTask())[0]
	runningJob(t, c, sub, id, node)
	waitFor(t, 30*time.Second, id+" saved 20 steps", func() bool { return savedCount(hpc, id) >= 20 })
	submitOne(t, ctx, hpc, sleepTask("1", 1000))
	var ck ledger.CheckpointRef
	waitFor(t, 40*time.Second, id+" checkpointed and running on ck-far", func() bool {
		tk := sub.task(id)
		if tk.Checkpoint != nil {
			ck = *tk.Checkpoint
		}
		return tk.State == ledger.TaskRunning && tk.Machine == "ck-far/z1"
	})
	if ck.Hash == "" || ck.ProgressMFlop == 0 {
		t.Fatalf("checkpoint %+v: want one with progress", ck)
	}
	sub.waitDone(t, 40*time.Second, id+" done", id)
	tk := sub.task(id)
	if len(tk.Segments) != 2 || tk.Segments[0].Machine != node || tk.Segments[0].Outcome != ledger.OutcomePreempted ||
		tk.Segments[1].Machine != "ck-far/z1" || tk.Segments[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", tk.Segments)
	}
	first, second := stdoutOf(t, hpc, id), stdoutOf(t, far, id)
	stopped, resumed := first["stopped"], second["resumed"]
	t.Logf("stopped at %d on the Slurm node, checkpoint %d MFlop, resumed at %d on ck-far", stopped, ck.ProgressMFlop, resumed)
	if stopped < 20 || stopped >= counterTarget || resumed < stopped-counterEvery || resumed > stopped || int64(resumed)*counterWork != ck.ProgressMFlop {
		t.Fatalf("stopped at %d, resumed at %d, checkpoint %d MFlop", stopped, resumed, ck.ProgressMFlop)
	}
	if second["count"] != counterTarget {
		t.Fatalf("second run on ck-far: %v", second)
	}
}

// TestSlurmPeerRestartAdoptsItsJob (issue 18 item 4): the Slurm peer
// dies while its task runs as a Slurm job; the job runs on. Restarted
// within the heartbeat timeout (the ledger still places the task on its
// machine), the peer adopts the job instead of declaring the machine
// lost: the task ends done with the job's output, in one segment, with
// no second job. Then a task cancelled while the peer is down: its job is
// not adopted but cancelled at the restart. A third peer (ad-far) keeps
// the quorum while the Slurm peer is down.
func TestSlurmPeerRestartAdoptsItsJob(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{CPUs: 2, MemoryMiB: 2048, Features: "ssd"})
	if err := os.MkdirAll(filepath.Join(c.Dir, "hpc-tasks"), 0o711); err != nil {
		t.Fatal(err)
	}
	// A heartbeat timeout longer than the restart: the leader does not
	// take the machine back meanwhile.
	slow := func(c *config.Config) { c.Heartbeat.Timeout = 30 * time.Second }
	peers := federation(t, "process", []string{"ad-sub", "ad-hpc", "ad-far"}, map[string]string{
		"ad-sub": processMachine("a1", 1, 200),
		"ad-hpc": slurmMachinesFile(c),
		"ad-far": processMachine("f1", 1, 200),
	}, map[string]func(*config.Config){
		"ad-sub": func(c *config.Config) { slow(c); c.Limit = "system" },
		"ad-hpc": func(c *config.Config) { slow(c); c.Executor.Kind = "slurm" },
		"ad-far": slow,
	})
	sub, hpc := peers[0], peers[1]
	node := "ad-hpc/" + c.Node
	waitFor(t, 20*time.Second, node+" registered", func() bool { return sub.machine(node).ID == node })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	id := submitOne(t, ctx, sub, api.SubmitTask{Argv: []string{"/bin/sh", "-c", `sleep 6; echo "$COOPGRID_SLURM_JOB_ID" > job.txt; echo ok`},
		Outputs: []string{"job.txt"}, SizeMFlop: 10, Requirements: []api.Requirement{{Attribute: "label.ssd", Operator: "is_set"}}})[0]
	job := runningJob(t, c, sub, id, node)
	hpc.crash()
	if st := jobStateOf(c, job); st != "RUNNING" {
		t.Fatalf("job %s %q after the peer died: want it running on", job, st)
	}
	hpc.start()
	sub.waitDone(t, 90*time.Second, id+" done", id)
	tk := sub.task(id)
	if tk.Attempts != 1 || len(tk.Segments) != 1 || tk.Segments[0].Machine != node || tk.Segments[0].Outcome != ledger.OutcomeDone {
		t.Fatalf("task %+v: want one run, one segment on %s, done", tk, node)
	}
	if m := sub.machine(node); m.State != ledger.MachineUp {
		t.Errorf("machine %+v: want it up, never declared lost", m)
	}
	b, err := os.ReadFile(filepath.Join(sub.dir, config.OutputsDir, id, "job.txt"))
	if err != nil || strings.TrimSpace(string(b)) != job {
		t.Fatalf("output job.txt %q, %v: want the adopted job's ID %s", b, err, job)
	}
	if logs, err := sub.n.Logs(ctx, id, "stdout"); err != nil || string(logs) != "ok\n" {
		t.Errorf("stdout %q, %v", logs, err)
	}
	recs, err := slurm.ReadJobJournal(filepath.Join(hpc.dir, slurm.JobJournalFile))
	if err != nil {
		t.Fatal(err)
	}
	var evs []string
	for _, r := range recs {
		if r.Task == id {
			evs = append(evs, r.Event)
		}
	}
	if !slices.Equal(evs, []string{slurm.EventSubmit, slurm.EventJob, slurm.EventAdopted, slurm.EventEnd}) {
		t.Errorf("job journal of %s: %v: want one job, adopted, ended", id, evs)
	}

	// Cancelled while the peer is down: the ledger no longer places the
	// task there, so the restarted peer cancels its job.
	id2 := submitOne(t, ctx, sub, api.SubmitTask{Argv: []string{"/bin/sh", "-c", "sleep 300"}, SizeMFlop: 10,
		Requirements: []api.Requirement{{Attribute: "label.ssd", Operator: "is_set"}}})[0]
	job2 := runningJob(t, c, sub, id2, node)
	hpc.crash()
	if err := sub.n.Cancel(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if st := jobStateOf(c, job2); st != "RUNNING" {
		t.Fatalf("job %s %q after the peer died: want it running on", job2, st)
	}
	hpc.start()
	waitFor(t, 60*time.Second, "job "+job2+" cancelled", func() bool { return jobStateOf(c, job2) == "" })
	waitFor(t, 30*time.Second, id2+" cancelled", func() bool { return sub.task(id2).State == ledger.TaskCancelled })
	recs, err = slurm.ReadJobJournal(filepath.Join(hpc.dir, slurm.JobJournalFile))
	if err != nil {
		t.Fatal(err)
	}
	evs = nil
	for _, r := range recs {
		if r.Task == id2 {
			evs = append(evs, r.Event)
			if r.Event == slurm.EventAbandoned && r.State != "CANCELLED" {
				t.Errorf("abandoned record %+v: want the job cancelled", r)
			}
		}
	}
	if !slices.Equal(evs, []string{slurm.EventSubmit, slurm.EventJob, slurm.EventAbandoned}) {
		t.Errorf("job journal of %s: %v: want one job, abandoned", id2, evs)
	}
}

// jobStateOf is the job's state in squeue ("" when gone).
func jobStateOf(c *slurmtest.Cluster, job string) string {
	for _, j := range c.Jobs() {
		if f := strings.Split(j, "|"); len(f) == 3 && f[0] == job {
			return f[1]
		}
	}
	return ""
}

// TestSlurmSectionNeedsSlurmKind: the machines file's slurm section and
// executor.kind go together; either alone is refused, naming the file.
func TestSlurmSectionNeedsSlurmKind(t *testing.T) {
	withSlurm := "slurm:\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\npolicy:\n  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n"
	cases := []struct{ name, kind, file, want string }{
		{"slurm section, process kind", "process", withSlurm, `has a slurm section, but executor.kind in config.yaml is "process"`},
		{"slurm kind, machines list", "slurm", processMachine("a1", 1, 10), "m.yaml: slurm: missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.yaml")
			if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			mf, err := executor.LoadMachinesFile(p)
			if err != nil {
				t.Fatal(err)
			}
			err = slurmMachines(tc.kind, p, mf, testLogger("x"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one containing %q", err, tc.want)
			}
		})
	}
}
