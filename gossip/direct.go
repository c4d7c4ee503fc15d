package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"golang.org/x/time/rate"
)

// ProtocolHeartbeat is the direct heartbeat protocol: a member sends its
// heartbeat (the same message as on the topic) on a stream to the peer
// it believes leads, the only one whose decisions need it (lost-machine
// detection). The stream's remote peer is the author: the libp2p security
// handshake authenticated it, so the message needs no signature of its
// own. Who may use it: a peer in the Raft configuration, for the
// organisation the ledger registers to it; anyone else is refused.
const ProtocolHeartbeat = protocol.ID("/coopgrid/heartbeat/direct/1.0.0")

// ProtocolHeartbeatStream carries the same heartbeats and answers as
// ProtocolHeartbeat, many on one long-lived stream (p2p.HandleSession):
// each member keeps one stream to the leader, re-opened when it fails, is
// refused, or the leader changes. Every heartbeat on it is checked as if
// it came alone (membership, the organisation's registration, the rate
// limit, the size cap), and a refusal ends the stream. A peer sends on it
// and falls back to ProtocolHeartbeat for a leader that does not serve it
// (an older version); both are served.
const ProtocolHeartbeatStream = protocol.ID("/coopgrid/heartbeat/direct-stream/1.0.0")

// Refusal codes of ProtocolHeartbeat (p2p.Error codes).
const (
	// CodeNotMember: the sender is not in the receiver's Raft
	// configuration, or its organisation was removed.
	CodeNotMember = "not_member"
	// CodeUnauthorised: the heartbeat names an organisation the ledger
	// registers to another peer.
	CodeUnauthorised = "unauthorised"
	// CodeUnknownOrg: the receiver's view does not know the organisation
	// (yet): views lag.
	CodeUnknownOrg = "unknown_org"
	// CodeRateLimited: the sender sent more than its share.
	CodeRateLimited = "rate_limited"
)

// directReply is the receiver's answer to an accepted direct heartbeat.
type directReply struct {
	// Leader: the receiver leads now. A sender told otherwise also
	// publishes on the topic, so that the real leader hears it anyway.
	Leader bool `json:"leader"`
}

// Direct heartbeats from one sender are limited to directBurst at once
// and, on average, one per half of the receiver's interval: a sender
// never sends faster than its interval (PublishNow aside), so only a
// misbehaving member meets the limit.
const directBurst = 4

// directLimits is the receiver's per-sender rate limit. Only members get
// an entry, so it is bounded by the federation's size; entries idle for a
// while are dropped.
type directLimits struct {
	mu     sync.Mutex
	every  time.Duration
	byPeer map[peer.ID]*directLimit
	pruned time.Time
}

type directLimit struct {
	lim  *rate.Limiter
	used time.Time
}

// allow reports whether author may send one more heartbeat at now.
func (d *directLimits) allow(author peer.ID, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byPeer == nil {
		d.byPeer = map[peer.ID]*directLimit{}
	}
	if now.Sub(d.pruned) > time.Minute {
		for id, l := range d.byPeer {
			if now.Sub(l.used) > time.Minute {
				delete(d.byPeer, id)
			}
		}
		d.pruned = now
	}
	l, ok := d.byPeer[author]
	if !ok {
		l = &directLimit{lim: rate.NewLimiter(rate.Every(d.every), directBurst)}
		d.byPeer[author] = l
	}
	l.used = now
	return l.lim.AllowN(now, 1)
}

// serveDirect is the ProtocolHeartbeat handler: it checks the sender and
// its heartbeat as the topic validator does (membership, the ledger's
// registration of the organisation, bounds, the replay guard), then
// records it.
func (g *Gossip) serveDirect(_ context.Context, remote peer.ID, data []byte) ([]byte, error) {
	if g.cfg.IsMember != nil && !g.cfg.IsMember(remote) {
		g.log.Debug("direct heartbeat refused", "from", remote, "err", "not in the configuration")
		return nil, p2p.Errorf(CodeNotMember, "%s is not in the configuration", remote)
	}
	if !g.limits.allow(remote, time.Now()) {
		g.log.Debug("direct heartbeat refused", "from", remote, "err", "rate limited")
		return nil, p2p.Errorf(CodeRateLimited, "more than one heartbeat per %v", g.limits.every)
	}
	hb, err := Decode(data)
	if err == nil {
		err = authorise(g.state, remote, hb)
		if errors.Is(err, ErrUnknownOrg) {
			g.rememberJoiner(remote, hb)
		}
	}
	if err != nil {
		g.log.Debug("direct heartbeat refused", "from", remote, "err", err)
		code := p2p.CodeBadRequest
		switch {
		case errors.Is(err, ErrNotMember):
			code = CodeNotMember
		case errors.Is(err, ErrUnauthorised):
			code = CodeUnauthorised
		case errors.Is(err, ErrUnknownOrg):
			code = CodeUnknownOrg
		}
		return nil, p2p.Errorf(code, "%v", err)
	}
	if g.directGuard.Accept(remote, hb.Boot, hb.Seq) {
		g.record(remote, hb, time.Now(), true)
	}
	return json.Marshal(directReply{Leader: g.leads()})
}

// leads reports whether this peer is the leader as it knows it.
func (g *Gossip) leads() bool {
	if g.cfg.Leader == nil {
		return false
	}
	id, ok := g.cfg.Leader()
	return ok && id == g.self
}

// sendDirect sends a heartbeat to the leader and reports whether the
// leader has it: true too when this peer leads (it recorded its own), false
// when no leader is known, the leader could not be reached or refused, or
// the receiver says it does not lead.
func (g *Gossip) sendDirect(data []byte) bool {
	if g.cfg.Leader == nil {
		return false
	}
	to, ok := g.cfg.Leader()
	switch {
	case !ok:
		g.direct.Close()
		return false
	case to == g.self:
		g.direct.Close()
		return true
	}
	ctx, cancel := context.WithTimeout(g.ctx, min(g.cfg.Interval, 2*time.Second))
	defer cancel()
	resp, err := g.direct.Request(ctx, to, data)
	if err != nil {
		if g.ctx.Err() == nil {
			g.log.Debug("direct heartbeat", "to", to, "err", err)
		}
		return false
	}
	var r directReply
	if err := json.Unmarshal(resp, &r); err != nil {
		g.log.Debug("direct heartbeat reply", "to", to, "err", fmt.Errorf("decode: %w", err))
		return false
	}
	return r.Leader
}

// directServeTimeout bounds one direct heartbeat's exchange on the
// receiver.
const directServeTimeout = 5 * time.Second

// directIdle ends a heartbeat stream on which nothing arrived for this
// long: a sender's interval is at most a third of the heartbeat timeout,
// well below it, so only a departed sender's stream ends so.
const directIdle = 5 * time.Minute

// serveDirectProtocols registers the direct heartbeat handlers on the
// host: the long-lived stream and the one-shot protocol older peers use.
func (g *Gossip) serveDirectProtocols() {
	p2p.Handle(g.host.Host, ProtocolHeartbeat, g.serveDirect, g.directOptions(directServeTimeout))
	p2p.HandleSession(g.host.Host, ProtocolHeartbeatStream, g.serveDirect,
		p2p.SessionOptions{StreamOptions: g.directOptions(directServeTimeout), Idle: directIdle})
	g.direct = p2p.NewSession(g.host.Host, ProtocolHeartbeatStream, ProtocolHeartbeat,
		g.directOptions(min(g.cfg.Interval, 2*time.Second)))
}

// directOptions bounds a direct heartbeat's frames, and its exchange to
// timeout.
func (g *Gossip) directOptions(timeout time.Duration) p2p.StreamOptions {
	return p2p.StreamOptions{MaxMessageSize: MaxHeartbeatBytes, Timeout: timeout, Logger: g.log}
}
