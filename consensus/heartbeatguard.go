package consensus

import (
	"sync"

	"github.com/hashicorp/raft"
)

// heartbeatGuard keeps Raft's heartbeat handler from running once the node
// shuts down. hashicorp/raft runs a heartbeat on the transport's
// connection goroutine, outside what raft.Shutdown waits for: it checks
// for shutdown first, but a heartbeat past that check and then delayed (a
// loaded host) may raise the term after the stores are closed, and Raft
// panics ("failed to save current term: database not open",
// hashicorp/raft#717; seen once in make test, session 11, although the
// transport is closed first). Shutdown calls close after raft.Shutdown
// and before closing the stores: close waits for a heartbeat in flight,
// and any later one is answered ErrRaftShutdown without reaching Raft.
type heartbeatGuard struct {
	*pacedTransport
	mu     sync.RWMutex
	closed bool
}

// SetHeartbeatHandler is the transport's, with fn guarded.
func (g *heartbeatGuard) SetHeartbeatHandler(fn func(rpc raft.RPC)) {
	g.pacedTransport.SetHeartbeatHandler(g.guard(fn))
}

// guard is fn, run only until close.
func (g *heartbeatGuard) guard(fn func(rpc raft.RPC)) func(rpc raft.RPC) {
	if fn == nil {
		return nil
	}
	return func(rpc raft.RPC) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.closed {
			rpc.Respond(nil, raft.ErrRaftShutdown)
			return
		}
		fn(rpc)
	}
}

// close waits for the heartbeat in flight, if any, and refuses the next.
func (g *heartbeatGuard) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
