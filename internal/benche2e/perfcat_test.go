package main

import (
	"strings"
	"testing"
)

// A sample of `perf script -F comm,pid,tid,ip,sym` output: a peer's fsync
// under bolt under raft, a peer's mkdir in the executor, a peer's policy
// pass, a task, and idle.
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

            true 300/300 
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
	if b.Total != 6 || b.Peers != 3 {
		t.Fatalf("total %d peers %d, want 6 and 3", b.Total, b.Peers)
	}
	want := map[string]int{
		"fsync (Raft log in bolt, run journal, files)":  1,
		"executor: directories, logs, journal, reaping": 1,
		"policy pass": 1,
	}
	for k, v := range want {
		if b.ByCat[k] != v {
			t.Errorf("%s: %d samples, want %d (all: %v)", k, b.ByCat[k], v, b.ByCat)
		}
	}
	if b.ByCommand["true"] != 1 || b.ByCommand["swapper"] != 1 || b.ByCommand["peer"] != 1 {
		t.Errorf("by command %v, want true, swapper and the other peer once each", b.ByCommand)
	}
}
