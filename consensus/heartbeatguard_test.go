package consensus

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

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
	var returned atomic.Bool
	handler := g.guard(func(rpc raft.RPC) {
		calls++
		close(entered)
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
		returned.Store(true)
	})

	inFlightResp := make(chan raft.RPCResponse, 1)
	inFlight := raft.RPC{RespChan: inFlightResp}
	go handler(inFlight)
	<-entered
	closed := make(chan bool, 1) // whether the handler had returned
	go func() { g.close(); closed <- returned.Load() }()
	// close is waiting once its write lock is pending: new readers are
	// then refused (sync.RWMutex), with no sleep to guess how long. A
	// close that does not wait returns meanwhile.
	for g.mu.TryRLock() {
		g.mu.RUnlock()
		select {
		case <-closed:
			t.Fatal("close returned while a heartbeat was in Raft's handler")
		default:
		}
		runtime.Gosched()
	}
	close(release)
	if !<-closed {
		t.Fatal("close returned while a heartbeat was in Raft's handler")
	}
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
