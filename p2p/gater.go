package p2p

import (
	"errors"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Gater is a libp2p connection gater holding a set of blocked peer IDs. It
// exists for fault injection (the chaos harness partitions a federation
// by blocking, on both sides, the peers across the cut): a host built with
// a Gater neither dials a blocked peer nor keeps a connection from one,
// whoever asks for it — Raft's transport, gossipsub, the known-peers
// redial, the file protocols. Every dial and every accepted connection
// goes through the swarm, so no path around it exists (the host has no
// mDNS, relay or hole punching).
//
// The zero value is not usable: NewGater makes one with nothing blocked.
type Gater struct {
	mu      sync.RWMutex
	blocked map[peer.ID]bool
}

// NewGater returns a gater that blocks nobody.
func NewGater() *Gater { return &Gater{blocked: map[peer.ID]bool{}} }

// IsBlocked reports whether p is blocked.
func (g *Gater) IsBlocked(p peer.ID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.blocked[p]
}

// Blocked lists the blocked peers, sorted.
func (g *Gater) Blocked() []peer.ID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]peer.ID, 0, len(g.blocked))
	for p := range g.blocked {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// set replaces the blocked set with ids and returns the peers that were
// not blocked before (their existing connections must be closed).
func (g *Gater) set(ids []peer.ID) (added []peer.ID) {
	next := make(map[peer.ID]bool, len(ids))
	for _, id := range ids {
		next[id] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range next {
		if !g.blocked[id] {
			added = append(added, id)
		}
	}
	g.blocked = next
	slices.Sort(added)
	return added
}

// InterceptPeerDial refuses to dial a blocked peer.
func (g *Gater) InterceptPeerDial(p peer.ID) bool { return !g.IsBlocked(p) }

// InterceptAddrDial refuses every address of a blocked peer.
func (g *Gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !g.IsBlocked(p) }

// InterceptAccept lets every inbound connection reach the handshake: the
// remote peer's ID is not known before it.
func (g *Gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured refuses a connection, inbound or outbound, once the
// handshake has named a blocked peer.
func (g *Gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.IsBlocked(p)
}

// InterceptUpgraded refuses a connection to a peer blocked while it was
// being upgraded.
func (g *Gater) InterceptUpgraded(c network.Conn) (bool, control.DisconnectReason) {
	return !g.IsBlocked(c.RemotePeer()), 0
}

var _ connmgr.ConnectionGater = (*Gater)(nil)

// ErrNoGater is returned by Host.SetBlocked on a host built without a
// Gater (fault injection off).
var ErrNoGater = errors.New("p2p: this host has no connection gater (fault injection is off)")

// SetBlocked replaces the set of blocked peers and closes every existing
// connection to a newly blocked one (the gater only sees new
// connections). Unblocked peers are not redialled here: whoever needs
// them (Raft's heartbeats, the known-peers dial) reconnects.
func (h *Host) SetBlocked(ids []peer.ID) error {
	if h.cfg.Gater == nil {
		return ErrNoGater
	}
	for _, id := range h.cfg.Gater.set(ids) {
		if err := h.Network().ClosePeer(id); err != nil {
			h.log.Debug("p2p: close connections to a blocked peer", "peer", id, "err", err)
		}
	}
	return nil
}

// Blocked lists the peers the host's gater blocks (nil without a gater).
func (h *Host) Blocked() []peer.ID {
	if h.cfg.Gater == nil {
		return nil
	}
	return h.cfg.Gater.Blocked()
}

// gaterNotifee closes any connection that completes to a blocked peer: a
// connection whose upgrade passed the gater just before the peer was
// blocked, and was not yet registered when SetBlocked closed the rest.
type gaterNotifee struct {
	network.NoopNotifiee
	g *Gater
}

func (n *gaterNotifee) Connected(_ network.Network, c network.Conn) {
	if n.g.IsBlocked(c.RemotePeer()) {
		// Not inline: the swarm calls notifiees while registering c.
		go c.Close()
	}
}
