package main

import (
	"log/slog"
	"runtime"
	"testing"

	"github.com/coopgrid/coopgrid/node"
)

// TestFollowVoting: without GOMAXPROCS in the environment, a peer that
// does not vote runs with one P and gets the runtime's default back once
// it votes; with GOMAXPROCS set, the options are left alone.
func TestFollowVoting(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })

	t.Setenv("GOMAXPROCS", "") // empty counts as unset
	var o node.Options
	followVoting(&o, slog.Default())
	if o.OnVoting == nil {
		t.Fatal("GOMAXPROCS unset: OnVoting not set")
	}
	o.OnVoting(false)
	if got := runtime.GOMAXPROCS(0); got != nonVoterProcs {
		t.Fatalf("not voting: GOMAXPROCS %d, want %d", got, nonVoterProcs)
	}
	o.OnVoting(true)
	if got := runtime.GOMAXPROCS(0); got == nonVoterProcs && runtime.NumCPU() > 1 {
		t.Fatalf("voting: GOMAXPROCS still %d on %d CPUs", got, runtime.NumCPU())
	}

	t.Setenv("GOMAXPROCS", "3")
	o = node.Options{}
	followVoting(&o, slog.Default())
	if o.OnVoting != nil {
		t.Fatal("GOMAXPROCS set by the operator: the options were changed")
	}
}
