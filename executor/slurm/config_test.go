package slurm

import (
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
)

func TestParseSettings(t *testing.T) {
	const good = `slurm:
  partition: grid
  account: physics
  qos: federation
  nodes: [cn01, cn02]
  share: 50%
  gflops_per_cpu: 10
  busy_watts_per_cpu: 12
  idle_watts_per_cpu: 4
  tasks_dir: /shared/coopgrid/tasks
  poll_interval: 1s
policy:
  allow: [sh]
  run_as: nobody
`
	mf, err := executor.ParseMachinesFile("m.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSettings("m.yaml", mf)
	if err != nil {
		t.Fatal(err)
	}
	if s.Partition != "grid" || s.Account != "physics" || s.QoS != "federation" || len(s.Nodes) != 2 || s.Share != 0.5 ||
		s.GFLOPSPerCPU != 10 || s.BusyWattsPerCPU != 12 || s.IdleWattsPerCPU != 4 || s.TasksDir != "/shared/coopgrid/tasks" || s.PollInterval != time.Second {
		t.Errorf("settings %+v", s)
	}
	if mf.Policy.RunAs != "nobody" {
		t.Errorf("policy %+v", mf.Policy)
	}

	bad := []struct{ name, file, want string }{
		{"machines and slurm", "machines: [{name: a, busy_watts: 1}]\nslurm: {gflops_per_cpu: 1, busy_watts_per_cpu: 1}\n", "m.yaml:1: machines: a file with a slurm section"},
		{"no gflops", "slurm:\n  busy_watts_per_cpu: 1\n", "slurm.gflops_per_cpu: missing"},
		{"no watts", "slurm:\n  gflops_per_cpu: 1\n", "slurm.busy_watts_per_cpu: missing"},
		{"share over 100%", "slurm:\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n  share: 150%\n", "m.yaml:4: slurm.share"},
		{"share zero", "slurm:\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n  share: 0\n", "slurm.share"},
		{"partition with a space", "slurm:\n  partition: 'a b'\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n", "m.yaml:2: slurm.partition"},
		{"option smuggled in account", "slurm:\n  account: '--uid=0'\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n", "slurm.account"},
		{"relative tasks_dir", "slurm:\n  tasks_dir: tasks\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n", "slurm.tasks_dir"},
		{"idle over busy", "slurm:\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n  idle_watts_per_cpu: 2\n", "slurm.idle_watts_per_cpu"},
		{"unknown key", "slurm:\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n  user: root\n", "m.yaml:4: slurm.user: unknown key"},
		{"poll too fast", "slurm:\n  gflops_per_cpu: 1\n  busy_watts_per_cpu: 1\n  poll_interval: 1ms\n", "slurm.poll_interval"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			mf, err := executor.ParseMachinesFile("m.yaml", []byte(tc.file))
			if err == nil {
				_, err = ParseSettings("m.yaml", mf)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one containing %q", err, tc.want)
			}
		})
	}
	mf, err = executor.ParseMachinesFile("m.yaml", []byte("machines: [{name: a, busy_watts: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseSettings("m.yaml", mf); err == nil || !strings.Contains(err.Error(), "slurm: missing") {
		t.Errorf("a file without a slurm section: %v", err)
	}
}

func TestParseNodesAndMachines(t *testing.T) {
	out := `NodeName=cn01 Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.1 AvailableFeatures=ssd,avx512 ActiveFeatures=ssd,avx512 Gres=gpu:a100:2(S:0-1),shard:8 NodeAddr=cn01 RealMemory=64000 State=IDLE Partitions=grid,batch Reason=None
NodeName=cn02 CPUTot=8 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) RealMemory=32000 State=IDLE+DRAIN Partitions=grid Reason=maintenance [root@2026-01-01T00:00:00]
NodeName=cn03 CPUTot=8 Gres=(null) RealMemory=1 State=DOWN* Partitions=batch Reason=Not_responding
NodeName=bad/name CPUTot=8 Gres=(null) RealMemory=1 State=IDLE Partitions=grid
`
	nodes, err := parseNodes(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 4 {
		t.Fatalf("%d nodes", len(nodes))
	}
	avail := map[string]bool{}
	for _, n := range nodes {
		avail[n.Name] = n.Available()
	}
	if !avail["cn01"] || avail["cn02"] || avail["cn03"] {
		t.Errorf("availability %v: want only cn01 (cn02 drained, cn03 down)", avail)
	}
	ms, skipped, err := Machines(nodes, Settings{Partition: "grid", Share: 0.5, GFLOPSPerCPU: 10, BusyWattsPerCPU: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Name != "cn01" || ms[0].CPUs != 8 || ms[0].GPUs != 2 || ms[0].MemoryBytes != 32000<<20 || ms[0].GFLOPS != 80 ||
		strings.Join(ms[0].Labels, ",") != "ssd,avx512" {
		t.Errorf("machines %+v", ms)
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "bad/name") {
		t.Errorf("skipped %v", skipped)
	}
	if _, _, err := Machines(nodes, Settings{Partition: "grid", Nodes: []string{"cn09"}, Share: 1, GFLOPSPerCPU: 1, BusyWattsPerCPU: 1}); err == nil {
		t.Error("a node the cluster does not have was accepted")
	}
	if _, _, err := Machines(nodes, Settings{Partition: "grid", Nodes: []string{"cn03"}, Share: 1, GFLOPSPerCPU: 1, BusyWattsPerCPU: 1}); err == nil {
		t.Error("a node outside the partition was accepted")
	}
}

func TestParseShowJob(t *testing.T) {
	cases := []struct {
		line       string
		state      string
		code, sig  int
		startValid bool
	}{
		{"JobId=7 JobName=x JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 StartTime=2026-11-26T00:14:52 EndTime=2026-11-26T00:14:53", "FAILED", 3, 0, true},
		{"JobId=8 JobState=CANCELLED Reason=None ExitCode=0:15 StartTime=Unknown", "CANCELLED", -1, 15, false},
		{"JobId=9 JobState=COMPLETED ExitCode=0:0 Comment=coopgrid task t-1 StartTime=2026-11-26T00:14:52", "COMPLETED", 0, 0, true},
	}
	for _, c := range cases {
		ji, err := parseShowJob(c.line)
		if err != nil {
			t.Fatal(err)
		}
		if ji.state != c.state || ji.exitCode != c.code || ji.signal != c.sig || ji.start.IsZero() == c.startValid {
			t.Errorf("%q: %+v", c.line, ji)
		}
	}
	if _, err := parseShowJob("garbage"); err == nil {
		t.Error("a line without JobState was accepted")
	}
}

// timeoutLine is `scontrol show job -o` of a job the test Slurm
// (slurmtest, Slurm 22.05) ended at its one-minute limit, as captured
// by TestSlurmExecutor -v.
const timeoutLine = "JobId=1 JobName=coopgrid-t-timeout-1-r1 UserId=coopgrid-task(999) GroupId=coopgrid-task(995) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:28 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-11-26T01:35:23 EligibleTime=2026-11-26T01:35:25 AccrueTime=2026-11-26T01:35:25 StartTime=2026-11-26T01:35:25 EndTime=2026-11-26T01:36:53 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-26T01:35:25 Scheduler=Main Partition=grid AllocNode:Sid=localhost:2240 ReqNodeList=vm ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=256M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryCPU=256M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp/coopgrid-slurmtest-4078487171/peer-timeout/tasks/t-timeout/attempt-1/work Comment=coopgrid task t-timeout  StdErr=/tmp/coopgrid-slurmtest-4078487171/peer-timeout/tasks/t-timeout/attempt-1/stderr StdIn=/dev/null StdOut=/tmp/coopgrid-slurmtest-4078487171/peer-timeout/tasks/t-timeout/attempt-1/stdout Power= "

// TestOutcome: what each end of a job means. The TIMEOUT line is real;
// the test Slurm cannot kill a job for its memory (no cgroup task plugin,
// no accounting gather), so the OUT_OF_MEMORY line is the same line with
// the state, reason and exit field an OOM kill leaves (Slurm's
// JOB_OOM: reason OutOfMemory, exit 0:125).
func TestOutcome(t *testing.T) {
	oom := strings.NewReplacer("JobState=TIMEOUT Reason=TimeLimit", "JobState=OUT_OF_MEMORY Reason=OutOfMemory", "ExitCode=0:15", "ExitCode=0:125").Replace(timeoutLine)
	cases := []struct {
		name, line, reason string
		machineFailed      bool
	}{
		{"timeout", timeoutLine, executor.ReasonTimeout, false},
		{"out of memory", oom, executor.ReasonSignaled, false},
		{"completed", "JobId=9 JobState=COMPLETED Reason=None ExitCode=0:0", executor.ReasonOK, false},
		{"failed", "JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0", executor.ReasonExitNonzero, false},
		{"node failure", "JobId=5 JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0", executor.ReasonStopped, true},
		{"cancelled by the cluster", "JobId=6 JobState=CANCELLED Reason=None ExitCode=0:15", executor.ReasonStopped, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ji, err := parseShowJob(c.line)
			if err != nil {
				t.Fatal(err)
			}
			reason, detail, mf := outcome("1", ji)
			if reason != c.reason || mf != c.machineFailed {
				t.Fatalf("%s (%+v): %s %q machine failure %v, want %s, %v", c.name, ji, reason, detail, mf, c.reason, c.machineFailed)
			}
		})
	}
	ji, _ := parseShowJob(timeoutLine)
	if ji.end.Sub(ji.start) != 88*time.Second {
		t.Errorf("timeout job ran %v, want its 1m28s", ji.end.Sub(ji.start))
	}
	if _, detail, _ := outcome("1", mustParse(t, oom)); !strings.Contains(detail, "out of memory") {
		t.Errorf("OOM detail %q", detail)
	}
}

func mustParse(t *testing.T, line string) jobInfo {
	t.Helper()
	ji, err := parseShowJob(line)
	if err != nil {
		t.Fatal(err)
	}
	return ji
}

func TestHelpers(t *testing.T) {
	if got := slurmDuration(90*time.Minute + 500*time.Millisecond); got != "0-01:30:01" {
		t.Errorf("slurmDuration = %q", got)
	}
	if got := slurmDuration(49 * time.Hour); got != "2-01:00:00" {
		t.Errorf("slurmDuration = %q", got)
	}
	if j, ok := parseEnergy("12345\n"); !ok || j != 12345 {
		t.Errorf("parseEnergy = %d %v", j, ok)
	}
	for _, out := range []string{"", "0\n", "n/a\n"} {
		if _, ok := parseEnergy(out); ok {
			t.Errorf("parseEnergy(%q) said measured", out)
		}
	}
	if id, err := jobIDOf("1234;cluster\n"); err != nil || id != "1234" {
		t.Errorf("jobIDOf = %q %v", id, err)
	}
	if _, err := jobIDOf("sbatch: error\n"); err == nil {
		t.Error("jobIDOf accepted an error message")
	}
	if q := shellQuote("it's"); q != `'it'\''s'` {
		t.Errorf("shellQuote = %s", q)
	}
}
