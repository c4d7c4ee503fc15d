package consensus

import (
	"sync"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// memberSet answers "is this peer in the configuration, and does it vote"
// by its binary peer ID, without the base58 text form Raft's server IDs
// use: encoding a peer ID costs microseconds, and the question is asked on
// every Raft RPC received (gate.allows), every gossip message and direct
// heartbeat (IsMember), every starvation tick (isVoter) and, on the
// leader, for every organisation each second (leader.expelMachines). The
// set is rebuilt (one decode per server) only when Raft stores a new
// latest configuration: Raft keeps each one as a fresh copy
// (setLatestConfiguration clones it), so a new configuration is a new
// backing array of Servers.
type memberSet struct {
	mu sync.Mutex
	// of and n identify the configuration the set was built from: its
	// first server and its length.
	of  *raft.Server
	n   int
	set map[peer.ID]raft.ServerSuffrage
}

// suffrage returns id's suffrage in cfg and whether cfg names id at all.
func (m *memberSet) suffrage(cfg raft.Configuration, id peer.ID) (raft.ServerSuffrage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first *raft.Server
	if len(cfg.Servers) > 0 {
		first = &cfg.Servers[0]
	}
	if m.set == nil || first != m.of || len(cfg.Servers) != m.n {
		m.set = make(map[peer.ID]raft.ServerSuffrage, len(cfg.Servers))
		for _, s := range cfg.Servers {
			// A server ID that is no peer ID (none is written so)
			// names no peer.
			if p, err := peer.Decode(string(s.ID)); err == nil {
				m.set[p] = s.Suffrage
			}
		}
		m.of, m.n = first, len(cfg.Servers)
	}
	s, ok := m.set[id]
	return s, ok
}
