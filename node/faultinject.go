package node

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// faultControl is the test-only fault-injection state of a peer started
// with Options.FaultInjection (`peer run --fault-injection`): the chaos
// harness partitions the federation through the host's connection gater,
// steps this peer's wall clock and slows its Raft store, through POST
// /v1/debug/faults. A peer started without it has no faultControl, no
// gater and no store decorator: nothing of it runs in production.
type faultControl struct {
	gater    *p2p.Gater
	offsetMs atomic.Int64
	delayMs  atomic.Int64
}

func newFaultControl(clockOffset time.Duration) *faultControl {
	f := &faultControl{gater: p2p.NewGater()}
	f.offsetMs.Store(clockOffset.Milliseconds())
	return f
}

// diskDelay is the consensus store decorator's delay.
func (f *faultControl) diskDelay() time.Duration {
	return time.Duration(f.delayMs.Load()) * time.Millisecond
}

// now is this peer's wall clock: the time it stamps on log commands
// (AtMs), heartbeats and the leader's decisions. Under fault injection it
// is offset, as a stepped system clock would be. Durations (timeouts,
// tickers, time.Since) stay on the monotonic clock through time.Now,
// which a real step of the system clock does not move either.
func (n *Node) now() time.Time {
	if n.faults == nil {
		return time.Now()
	}
	return time.Now().Add(time.Duration(n.faults.offsetMs.Load()) * time.Millisecond)
}

// Faults is GET /v1/debug/faults.
func (n *Node) Faults(context.Context) (api.FaultsState, error) {
	if n.faults == nil {
		return api.FaultsState{}, api.ErrFaultsDisabled()
	}
	return n.faultsState(), nil
}

func (n *Node) faultsState() api.FaultsState {
	st := api.FaultsState{BlockPeers: []string{}, ClockOffsetMs: n.faults.offsetMs.Load(), DiskDelayMs: n.faults.delayMs.Load()}
	for _, id := range n.host.Blocked() {
		st.BlockPeers = append(st.BlockPeers, id.String())
	}
	return st
}

// SetFaults is POST /v1/debug/faults: every field is checked before any
// is applied, so a refused request changes nothing.
func (n *Node) SetFaults(_ context.Context, req api.FaultsRequest) (api.FaultsState, error) {
	if n.faults == nil {
		return api.FaultsState{}, api.ErrFaultsDisabled()
	}
	if err := api.ValidateFaults(req); err != nil {
		return api.FaultsState{}, err
	}
	var block []peer.ID
	if req.BlockPeers != nil {
		for i, s := range *req.BlockPeers {
			id, err := peer.Decode(s)
			if err != nil {
				return api.FaultsState{}, api.Errorf(api.CodeBadRequest, "block_peers[%d]: %q is not a peer ID: %v", i, s, err)
			}
			if id == n.self {
				return api.FaultsState{}, api.Errorf(api.CodeBadRequest, "block_peers[%d]: %s is this peer", i, s)
			}
			block = append(block, id)
		}
	}
	if req.BlockPeers != nil {
		if err := n.host.SetBlocked(block); err != nil {
			return api.FaultsState{}, err
		}
	}
	if req.ClockOffsetMs != nil {
		n.faults.offsetMs.Store(*req.ClockOffsetMs)
	}
	if req.DiskDelayMs != nil {
		n.faults.delayMs.Store(*req.DiskDelayMs)
	}
	st := n.faultsState()
	n.log.Warn("fault injection (test only)", "block_peers", len(st.BlockPeers), "clock_offset_ms", st.ClockOffsetMs, "disk_delay_ms", st.DiskDelayMs)
	return st, nil
}

var _ api.FaultInjector = (*Node)(nil)

// gater is the host's connection gater: only under fault injection.
func (n *Node) gater() *p2p.Gater {
	if n.faults == nil {
		return nil
	}
	return n.faults.gater
}
