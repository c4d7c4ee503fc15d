package consensus

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestHeartbeatGuardClosesAfterTheOneInFlight: close waits for a heartbeat
// that Raft is handling, and a heartbeat that arrives after close never
// reaches Raft's handler (which would write the term to a closed store) and
// is answered ErrRaftShutdown.
func TestHeartbeatGuardClosesAfterTheOneInFlight(t *testing.T) {
	var g heartbeatGuard
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	handler := g.guard(func(rpc raft.RPC) {
		calls++
		close(entered)
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	})

	inFlightResp := make(chan raft.RPCResponse, 1)
	inFlight := raft.RPC{RespChan: inFlightResp}
	go handler(inFlight)
	<-entered
	closed := make(chan struct{})
	go func() { g.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close returned while a heartbeat was in Raft's handler")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if r := <-inFlightResp; r.Error != nil {
		t.Fatalf("the heartbeat in flight was answered %v", r.Error)
	}

	lateResp := make(chan raft.RPCResponse, 1)
	late := raft.RPC{RespChan: lateResp}
	handler(late)
	if r := <-lateResp; !errors.Is(r.Error, raft.ErrRaftShutdown) {
		t.Fatalf("a heartbeat after close was answered %v, want %v", r.Error, raft.ErrRaftShutdown)
	}
	if calls != 1 {
		t.Fatalf("Raft's handler ran %d times, want 1 (not for the heartbeat after close)", calls)
	}
}
