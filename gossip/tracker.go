package gossip

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// tracker remembers, in memory, when each machine was last heard of
// (local clock, for the leader's timeout) and the sender's stamps. It
// implements leader.Liveness.
type tracker struct {
	mu   sync.Mutex
	seen map[string]time.Time // machine ID → local time
	atMs map[string]int64     // machine ID → sender's time, the latest
	// lastAt is the sender's time of the heartbeat received at seen (not
	// the largest seen): with seen, it maps the local clock to the
	// sender's (ownerClockMs).
	lastAt map[string]int64
	// peers is when each peer's (author's) last heartbeat arrived, local
	// clock, directly and on the topic: a peer without machines is heard of
	// too.
	peers map[peer.ID]contact
}

// contact is when a peer's last heartbeats arrived, by channel.
type contact struct{ direct, topic time.Time }

// last is the later of the two.
func (c contact) last() time.Time {
	if c.direct.After(c.topic) {
		return c.direct
	}
	return c.topic
}

func newTracker() *tracker {
	return &tracker{seen: map[string]time.Time{}, atMs: map[string]int64{}, lastAt: map[string]int64{}, peers: map[peer.ID]contact{}}
}

// heardFrom records that a heartbeat signed by author arrived at now,
// directly or on the topic.
func (t *tracker) heardFrom(author peer.ID, now time.Time, direct bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.peers[author]
	if direct {
		c.direct = now
	} else {
		c.topic = now
	}
	t.peers[author] = c
}

// peerContact is when author's last heartbeats arrived.
func (t *tracker) peerContact(author peer.ID) (contact, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.peers[author]
	return c, ok
}

func (t *tracker) observe(hb *Heartbeat, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range hb.Machines {
		id := hb.Org + "/" + m.Name
		t.seen[id] = now
		t.atMs[id] = max(t.atMs[id], hb.AtMs)
		t.lastAt[id] = hb.AtMs
	}
}

// lastHeartbeatMs is the sender's time of the last heartbeat of machine.
func (t *tracker) lastHeartbeatMs(id string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.atMs[id]
}

// LastSeen is the local time machine id was last heard of
// (leader.Liveness).
func (t *tracker) LastSeen(id string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.seen[id]
	return at, ok
}

// OwnerClockMs estimates the wall clock of machine id's peer at local time
// now (leader.Liveness): the sender's stamp of its last heartbeat plus the
// (monotonic) time since it arrived. ok is false when no heartbeat of id
// was received.
func (t *tracker) OwnerClockMs(id string, now time.Time) (ms int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen, ok := t.seen[id]
	if !ok {
		return 0, false
	}
	return t.lastAt[id] + now.Sub(seen).Milliseconds(), true
}

// ReplayGuard drops a heartbeat that is not after the last one accepted
// from the same author, in (Boot, Seq) order: a replay, or a message
// overtaken by a later one. The zero value is ready to use.
type ReplayGuard struct {
	mu   sync.Mutex
	last map[peer.ID][2]int64 // author → last accepted (Boot, Seq)
}

// Accept reports whether a message of author with boot and seq is new,
// and if so remembers it as the author's last.
func (g *ReplayGuard) Accept(author peer.ID, boot int64, seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	last, ok := g.last[author]
	if ok && (boot < last[0] || boot == last[0] && int64(seq) <= last[1]) {
		return false
	}
	if g.last == nil {
		g.last = map[peer.ID][2]int64{}
	}
	g.last[author] = [2]int64{boot, int64(seq)}
	return true
}
