package main

import (
	"strings"
	"testing"
)

// A sample of `perf script --show-task-events -F comm,pid,tid,ip,sym`
// output: a peer's fsync under bolt under raft, a peer's mkdir in the
// executor, a peer's policy pass, a fork, a task, a process no peer forked,
// idle, another program's peer.
const perfScript = `            peer 100/101 
	ffffffff81 ext4_sync_file
	ffffffff82 do_fsync
	          93 go.etcd.io/bbolt.(*Tx).Commit
	          94 github.com/hashicorp/raft.(*Raft).run

            peer 100/102 
	ffffffff83 ext4_mkdir
	          95 github.com/coopgrid/coopgrid/executor.(*ProcessExecutor).prepareDirs
	          96 runtime.goexit.abi0

            peer 200/201 
	          97 github.com/coopgrid/coopgrid/policy.(*ehosep).Schedule
	          98 github.com/coopgrid/coopgrid/consensus.(*Node).plan

            peer 100/105     PERF_RECORD_FORK(300:300):(100:105)
            peer 100/100     PERF_RECORD_FORK(100:107):(100:100)
            true 300/300 
	ffffffff84 do_execveat_common

            true 301/301 
	ffffffff84 do_execveat_common

         swapper     0/0 
	ffffffff85 default_idle

            peer 999/999 
	ffffffff86 __x64_sys_execve
`

func TestCategorize(t *testing.T) {
	b, err := categorize(strings.NewReader(perfScript), map[int]bool{100: true, 200: true})
	if err != nil {
		t.Fatal(err)
	}
	if b.Total != 7 || b.Peers != 3 || b.Tasks != 1 {
		t.Fatalf("total %d peers %d tasks %d, want 7, 3 and 1", b.Total, b.Peers, b.Tasks)
	}
	want := map[string]int{
		"fsync (Raft log in bolt, run journal, files)": 1,
		"executor: task directories (prepareDirs)":     1,
		"policy pass": 1,
	}
	for k, v := range want {
		if b.ByCat[k] != v {
			t.Errorf("%s: %d samples, want %d (all: %v)", k, b.ByCat[k], v, b.ByCat)
		}
	}
	// 300 was forked by a peer (its thread 105); 301 was not; the thread
	// 107 of peer 100 is no process of its own.
	if b.ByTask["true"] != 1 || len(b.ByTask) != 1 {
		t.Errorf("tasks by command %v, want true once", b.ByTask)
	}
	if b.ByCommand["true"] != 1 || b.ByCommand["swapper"] != 1 || b.ByCommand["peer"] != 1 {
		t.Errorf("by command %v, want true, swapper and the other peer once each", b.ByCommand)
	}
}

// Each cpu-clock sample is 1/499 s of one CPU.
func TestPerfBreakdownPerTask(t *testing.T) {
	b := &perfBreakdown{Total: 4990, Peers: 998, Tasks: 499, ByCat: map[string]int{"policy pass": 998}, ByTask: map[string]int{"true": 499}, ByCommand: map[string]int{"swapper": 3493}}
	var out strings.Builder
	b.write(&out, 100)
	for _, want := range []string{
		"CPU time per task: 20.00 ms in the peers, 10.00 ms in the processes they forked (fork, gate shell, `true`), 30.00 ms together.",
		"| policy pass | 100.0 % | 20.0 % |",
		"| true (the task) | 10.0 % |",
		"| swapper | 70.0 % |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("breakdown lacks %q:\n%s", want, out.String())
		}
	}
}
