package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Config configures a peer's gossip.
type Config struct {
	// Org is the organisation this peer's heartbeats speak for.
	Org string
	// Boot is this start's boot stamp (Heartbeat.Boot): never at or below
	// the previous start's.
	Boot int64
	// Interval paces this peer's heartbeats (default 1s) in a small
	// federation. With Leader set, each goes to the leader only
	// (ProtocolHeartbeat), whose cost grows with the members: with
	// MaxInterval set, the interval grows with them (PublishInterval) up to
	// MaxInterval. The topic, which every peer receives, checks and relays,
	// carries one heartbeat in AnnounceInterval.
	Interval time.Duration
	// MaxInterval bounds the grown interval; at most Interval (the
	// default) keeps Interval whatever the size. The node sets a third of
	// the leader's heartbeat timeout, so that a machine is declared lost
	// only after three heartbeats in a row went missing.
	MaxInterval time.Duration
	// Now stamps the heartbeats (default time.Now).
	Now func() time.Time
	// IsMember, when set, says whether a peer is in the federation's Raft
	// configuration: a heartbeat signed by any other peer is dropped, so
	// that a removed or departed peer's heartbeats keep nothing up.
	IsMember func(peer.ID) bool
	// Leader, when set, names the peer that leads as this peer knows it:
	// heartbeats go to it directly, and on the topic only once in
	// AnnounceInterval, or when the leader did not get them (none known,
	// unreachable, not leading any more). Unset, every heartbeat goes on
	// the topic.
	Leader func() (peer.ID, bool)
	// Members, when set, is the federation's size (its Raft
	// configuration's members), which sizes the intervals below; unset,
	// the peers this peer sees on the topic do. A non-voter keeps
	// connections to a few members only (consensus/mesh.go), so it sees
	// far fewer on the topic than there are.
	Members func() int
	// AnnounceMin, when longer, is the interval between this peer's
	// announcements on the topic instead of AnnounceInterval's.
	AnnounceMin time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Source is what this peer's heartbeats say, read at every publication.
type Source interface {
	// Telemetry returns this peer's machines, each with the task running
	// there, and the host's measured draw (0 when not measured); ok false
	// keeps the peer silent this time (it is stopping, or crashed).
	Telemetry() (machines []MachineTelemetry, hostPowerMilliW int64, ok bool)
	// Published runs after each heartbeat this peer published, on the
	// publishing goroutine (the node brings its lost machines back up).
	Published(ctx context.Context)
}

// Gossip is one peer's part of the heartbeat topic: once joined, it
// validates and records the heartbeats it receives, and it publishes its
// own once StartPublishing is called (from then on, what Source says). It implements leader.Liveness from
// New on (nothing is heard of before Join).
type Gossip struct {
	cfg   Config
	log   *slog.Logger
	host  *p2p.Host
	state StateViewer

	ps    *pubsub.PubSub
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	seen  *tracker
	guard ReplayGuard
	// directGuard is the replay guard of direct heartbeats: a heartbeat
	// sent both ways must be accepted on the topic too, or this peer
	// would not relay it.
	directGuard ReplayGuard
	limits      directLimits
	// direct is this peer's heartbeat stream to the leader (publishing
	// loop only; set by Join).
	direct *p2p.Session
	seq    atomic.Uint64
	// now asks the publishing loop for a heartbeat before its timer, and
	// on the topic.
	now chan struct{}
	// lastTopic and lastAddrs (the publishing loop's) are when this peer
	// last published on the topic, and the addresses it announced.
	lastTopic time.Time
	lastAddrs string
	// self is this peer's ID (set by Join): its own heartbeats are
	// checked without the ledger.
	self peer.ID

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New returns a peer's gossip, not joined yet.
func New(cfg Config) *Gossip {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gossip{cfg: cfg, log: cfg.Logger, seen: newTracker(), now: make(chan struct{}, 1),
		limits: directLimits{every: cfg.Interval / 2}}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// Join joins the heartbeat topic on h, with the validator that checks
// every message against state, and starts recording the heartbeats
// received. Call it once.
func (g *Gossip) Join(h *p2p.Host, state StateViewer) error {
	g.host, g.state, g.self = h, state, h.ID()
	if err := g.join(); err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	g.serveDirectProtocols()
	g.wg.Add(1)
	go g.consume()
	return nil
}

func (g *Gossip) join() error {
	ps, err := pubsub.NewGossipSub(g.ctx, g.host, pubsub.WithMaxMessageSize(MaxHeartbeatBytes+4096),
		pubsub.WithGossipSubParams(gossipSubParams()),
		pubsub.WithValidateQueueSize(topicQueue), pubsub.WithPeerOutboundQueueSize(topicQueue))
	if err != nil {
		return err
	}
	g.ps = ps
	if err := ps.RegisterTopicValidator(TopicHeartbeat, g.validate); err != nil {
		return err
	}
	if g.topic, err = ps.Join(TopicHeartbeat); err != nil {
		return err
	}
	if g.sub, err = g.topic.Subscribe(pubsub.WithBufferSize(topicQueue)); err != nil {
		return err
	}
	return nil
}

// topicQueue is the length of gossipsub's queues on this topic (messages
// waiting for validation, for each peer they go to, for the consumer),
// 32 by default. The members send their heartbeats on the same points of
// the wall clock (sendStep), so while no leader is known, when every
// heartbeat goes on the topic, up to members × step / interval of them
// arrive at once: 40 at 40 or 80 members with the default settings
// (every member in one 2 s step), more past 200. A full queue drops
// messages, so the queues hold four times that.
const topicQueue = 128

// gossipSubParams are gossipsub's defaults with less redundancy, which
// every peer pays for every message: a publisher floods its own messages
// to every peer on the topic it is connected to (gossipsub's flood
// publishing): every voter keeps a connection to every member and every
// non-voter to every voter and a few others (consensus/mesh.go), so the
// voters receive every message from its publisher and the mesh relays it
// to the non-voters. A mesh of 2 (not 6) peers, each a source of a
// duplicate of every message (a random graph of degree 2 to 4 still
// links every peer to the others through relays); gossip (IHAVE) to 1
// peer per heartbeat rather than to a quarter of all peers outside the
// mesh (at 100 peers about 24 IHAVE messages sent and received by every
// peer each second while any message was recent); and gossipsub's own
// heartbeat (mesh upkeep, IHAVE) every 2 s (p2p.IdleGrid) rather than
// every second.
// The topic carries about one announcement a second whatever the size
// (AnnounceInterval), and at 20 peers its traffic was still most of an
// idle follower's system calls (docs/BENCHMARKS.md).
func gossipSubParams() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.D, p.Dlo, p.Dhi, p.Dout, p.Dscore = 2, 1, 4, 0, 1
	p.Dlazy, p.GossipFactor = 1, 0
	p.HeartbeatInterval = p2p.IdleGrid
	// Its ticker starts after the first heartbeat: on the next point of
	// the wall-clock grid where the peer's other chores run
	// (p2p.UntilGrid), so that they share their wake-ups.
	p.HeartbeatInitialDelay = p2p.UntilGrid(time.Now(), p.HeartbeatInterval)
	return p
}

// Close stops publishing and consuming and leaves the topic. Safe to call
// twice.
func (g *Gossip) Close() {
	g.closeOnce.Do(func() {
		if g.host != nil {
			g.host.RemoveStreamHandler(ProtocolHeartbeat)
			g.host.RemoveStreamHandler(ProtocolHeartbeatStream)
		}
		g.cancel()
		g.wg.Wait()
		if g.direct != nil {
			g.direct.Close()
		}
		if g.sub != nil {
			g.sub.Cancel()
		}
		if g.topic != nil {
			_ = g.topic.Close()
		}
	})
}

// LastSeen is the local time machine id was last heard of
// (leader.Liveness).
func (g *Gossip) LastSeen(id string) (time.Time, bool) { return g.seen.LastSeen(id) }

// OwnerClockMs estimates the wall clock of machine id's peer at local time
// now from its last heartbeat (leader.Liveness).
func (g *Gossip) OwnerClockMs(id string, now time.Time) (int64, bool) {
	return g.seen.OwnerClockMs(id, now)
}

// PeerLastHeard is the local time the last heartbeat signed by peer id
// arrived (this peer's own count as heard when published); false when
// none did since this peer started.
func (g *Gossip) PeerLastHeard(id peer.ID) (time.Time, bool) {
	c, ok := g.seen.peerContact(id)
	return c.last(), ok
}

// PeerReachable reports whether peer id was heard of recently enough at
// now to count as up, given the silence timeout after which the leader
// declares a machine lost: a direct heartbeat within timeout (the leader
// receives them), or an announcement on the topic within three
// announcement intervals (at least timeout), all that other peers
// receive.
func (g *Gossip) PeerReachable(id peer.ID, now time.Time, timeout time.Duration) bool {
	c, ok := g.seen.peerContact(id)
	if !ok {
		return false
	}
	topicTimeout := timeout
	if g.cfg.Leader != nil {
		topicTimeout = max(timeout, 3*g.announceInterval())
	}
	return now.Sub(c.direct) <= timeout || now.Sub(c.topic) <= topicTimeout
}

// LastHeartbeatMs is the sender's time of machine id's latest heartbeat (0
// when none was heard).
func (g *Gossip) LastHeartbeatMs(id string) int64 { return g.seen.lastHeartbeatMs(id) }

// validate is the topic validator: malformed, oversized and unauthorised
// messages are rejected (and count against the forwarding peer in
// gossipsub); messages from an organisation this peer does not know yet,
// and replays, are ignored.
func (g *Gossip) validate(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	var hb *Heartbeat
	var err error
	own := g.self != "" && msg.GetFrom() == g.self
	if own {
		// This peer's own heartbeat, checked before it is sent: its
		// replica may not know its organisation yet (restarted, not caught
		// up), and ignoring it would keep its new addresses from the
		// leader that must reach it (node.startGossip).
		hb, err = Decode(msg.GetData())
	} else if hb, err = Decode(msg.GetData()); err == nil {
		err = authorise(g.state, msg.GetFrom(), hb)
	}
	member := g.cfg.IsMember != nil && g.cfg.IsMember(msg.GetFrom())
	if err == nil && !own && g.cfg.IsMember != nil && !member {
		err = fmt.Errorf("%w: %s is not in the configuration", ErrNotMember, msg.GetFrom())
	}
	if errors.Is(err, ErrUnknownOrg) && member {
		g.rememberJoiner(msg.GetFrom(), hb)
	}
	switch {
	case errors.Is(err, ErrUnknownOrg), errors.Is(err, ErrNotMember):
		// Views lag: a peer that has not applied a join or a removal yet
		// must not be penalised for forwarding; the message just stops.
		g.log.Debug("heartbeat dropped", "from", msg.GetFrom(), "err", err)
		return pubsub.ValidationIgnore
	case err != nil:
		g.log.Debug("heartbeat rejected", "from", msg.GetFrom(), "err", err)
		return pubsub.ValidationReject
	}
	if !g.guard.Accept(msg.GetFrom(), hb.Boot, hb.Seq) {
		return pubsub.ValidationIgnore
	}
	msg.ValidatorData = hb
	return pubsub.ValidationAccept
}

// consume records every accepted heartbeat, and remembers the addresses
// other peers announce in theirs.
func (g *Gossip) consume() {
	defer g.wg.Done()
	for {
		msg, err := g.sub.Next(g.ctx)
		if err != nil {
			return
		}
		hb, ok := msg.ValidatorData.(*Heartbeat)
		if !ok {
			continue
		}
		g.record(msg.GetFrom(), hb, time.Now(), false)
	}
}

// rememberJoiner keeps the addresses in the heartbeat of a member of the
// Raft configuration whose organisation this peer's view does not know:
// a joiner still catching up, which registers its organisation only once
// it has. The heartbeat itself counts for nothing, but a leader elected
// after the one that admitted it has never been connected to it, and
// could not reach it (so it would never catch up) without these
// addresses. Only the author's own addresses, signed by it (or sent on
// its authenticated stream).
func (g *Gossip) rememberJoiner(author peer.ID, hb *Heartbeat) {
	if hb == nil || author == g.self || len(hb.Addrs) == 0 {
		return
	}
	g.rememberAddrs(author, hb.Addrs)
}

// rememberAddrs records addrs as author's, in the peerstore and the
// known-peers file.
func (g *Gossip) rememberAddrs(author peer.ID, addrs []string) {
	if g.host == nil {
		return
	}
	var ms []ma.Multiaddr
	for _, a := range addrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			ms = append(ms, m)
		}
	}
	if err := g.host.Remember(peer.AddrInfo{ID: author, Addrs: ms}); err != nil {
		g.log.Debug("remember peer addresses", "peer", author, "err", err)
	}
}

// record notes an accepted heartbeat of author, received at now (on the
// topic or directly), and remembers the addresses it announces.
func (g *Gossip) record(author peer.ID, hb *Heartbeat, now time.Time, direct bool) {
	g.seen.observe(hb, now)
	g.seen.heardFrom(author, now, direct)
	if author == g.host.ID() || len(hb.Addrs) == 0 {
		return
	}
	g.rememberAddrs(author, hb.Addrs)
}

// StartPublishing publishes this peer's heartbeat from src now and every
// interval until Close. Call it once.
func (g *Gossip) StartPublishing(src Source) {
	g.wg.Add(1)
	go g.publishLoop(src)
}

// PublishNow asks for this peer's next heartbeat now rather than at the
// end of the interval, on the topic too (the node calls it once ready, so
// that its machines are heard of at once). It never blocks.
func (g *Gossip) PublishNow() {
	select {
	case g.now <- struct{}{}:
	default:
	}
}

// perPeer is the share of one peer in the publication interval: with
// PublishInterval, the leader (or, without a leader, every peer) receives
// at most 1/perPeer (20) heartbeats a second, until the interval reaches
// its cap.
const perPeer = 50 * time.Millisecond

// PublishInterval is the interval between two heartbeats of a peer when
// peers (this one included) are in the federation: peers × 50 ms, at least
// base, at most limit (base when limit is below it).
func PublishInterval(peers int, base, limit time.Duration) time.Duration {
	return min(max(time.Duration(peers)*perPeer, base), max(limit, base))
}

// perPeerAnnounce is the share of one peer in the topic's announcement
// interval: every peer receives at most one announcement a second however
// many peers there are.
const perPeerAnnounce = time.Second

// AnnounceInterval is the interval between two heartbeats of a peer on the
// topic, once the leader receives them directly: peers × 1 s, at least
// the publication interval iv. They carry what every peer needs (the
// addresses, which also go out at once when they change; the telemetry
// of other peers' machines that a peer's own API shows), not the leader's
// lost-machine detection, so no cap: with 100 peers, 100 s.
func AnnounceInterval(peers int, iv time.Duration) time.Duration {
	return max(time.Duration(peers)*perPeerAnnounce, iv)
}

// announceInterval is AnnounceInterval for the peers this peer sees on
// the topic now, at least Config.AnnounceMin.
func (g *Gossip) announceInterval() time.Duration {
	return max(AnnounceInterval(g.topicPeers(), g.publishInterval()), g.cfg.AnnounceMin)
}

// needsTopic reports whether a heartbeat goes on the topic too: when the
// leader did not get it (delivered false: none known, unreachable, not
// leading any more), so that the leader hears it through the relays; when
// forced (PublishNow); when this peer's addresses changed (every peer
// needs them); and once in announce (the last went out sinceLast ago).
func needsTopic(delivered, forced, addrsChanged bool, sinceLast, announce time.Duration) bool {
	return !delivered || forced || addrsChanged || sinceLast >= announce
}

// topicPeers is the number of peers on the topic, this one included: the
// federation's size as far as this peer can tell (Config.Members when
// set).
func (g *Gossip) topicPeers() int {
	if g.cfg.Members != nil {
		if k := g.cfg.Members(); k > 0 {
			return k
		}
	}
	if g.topic == nil {
		return 1
	}
	return len(g.topic.ListPeers()) + 1
}

// publishInterval is PublishInterval for the peers this peer sees on the
// topic now.
func (g *Gossip) publishInterval() time.Duration {
	if g.cfg.MaxInterval <= g.cfg.Interval || g.topic == nil {
		return g.cfg.Interval
	}
	return PublishInterval(g.topicPeers(), g.cfg.Interval, g.cfg.MaxInterval)
}

// nextSend is how long after now this peer's next heartbeat goes: the
// interval iv, ended on the next point of a grid of the given step on the
// wall clock (sendGrid). Every member sends on the same grid, so the
// heartbeats reach the leader together, in bursts, instead of one by one
// (on one host of 20 peers, 20 separate wake-ups of the leader a second):
// an idle leader pays more per wake-up than per heartbeat. A timer that
// fires late by less than a quarter step keeps its point, so an interval
// that is a multiple of the step stays exact; any other is rounded to the
// grid: between two heartbeats of a peer there are iv - step/4 to iv +
// 3step/4. The members' clocks need not agree (a skew only spreads the
// bursts).
func nextSend(now time.Time, iv, step time.Duration) time.Duration {
	if step <= 0 {
		return iv
	}
	target := now.Add(iv - step/4).UnixNano()
	at := target - target%int64(step)
	if at < target {
		at += int64(step)
	}
	return max(time.Duration(at-now.UnixNano()), step/2)
}

// sendGrid is the step of nextSend's grid for the publication interval
// iv (sendStep).
func (g *Gossip) sendGrid(iv time.Duration) time.Duration { return sendStep(iv, g.cfg.Interval) }

// sendStep is the step of nextSend's grid: the peer's shared chore grid
// (p2p.IdleGrid) or the largest halving of it that divides the
// publication interval iv exactly, down to a quarter of the configured
// interval; else that quarter. On the shared grid a heartbeat leaves when
// the maintenance loop, the runner and gossipsub wake the process anyway
// (with the default 2 s interval, every heartbeat; at 100 peers, 5 s on a
// 1 s grid, every other one), and the leader receives every member's in
// one burst a step rather than four: an idle peer pays more per wake-up
// than per message (docs/BENCHMARKS.md, "Idle voters' other wake-ups,
// session 12"). The step divides iv, so the interval stays exact (nextSend)
// and the leader hears each member as often as before.
func sendStep(iv, interval time.Duration) time.Duration {
	quarter := interval / 4
	for step := p2p.IdleGrid; step >= quarter && step > 0; step /= 2 {
		if iv%step == 0 {
			return step
		}
	}
	return quarter
}

// untilNextSend is how long from now until this peer's next heartbeat.
func (g *Gossip) untilNextSend() time.Duration {
	iv := g.publishInterval()
	return nextSend(time.Now(), iv, g.sendGrid(iv))
}

func (g *Gossip) publishLoop(src Source) {
	defer g.wg.Done()
	t := time.NewTimer(g.untilNextSend())
	defer t.Stop()
	forced := false
	for {
		// A peer without machines sends heartbeats too: they carry its
		// addresses.
		if machines, power, ok := src.Telemetry(); ok {
			g.publish(machines, power, forced)
			src.Published(g.ctx)
		}
		forced = false
		select {
		case <-g.ctx.Done():
			return
		case <-g.now:
			forced = true
			// Reset discards a pending expiry (Go 1.23 timers).
			t.Reset(g.untilNextSend())
		case <-t.C:
			t.Reset(g.untilNextSend())
		}
	}
}

// publish sends one heartbeat: to the leader, and on the topic when the
// leader did not get it, when forced (PublishNow), when this peer's
// addresses changed, or once in AnnounceInterval.
func (g *Gossip) publish(machines []MachineTelemetry, hostPowerMilliW int64, forced bool) {
	hb := Heartbeat{V: heartbeatVersion, Org: g.cfg.Org, AtMs: g.cfg.Now().UnixMilli(), Boot: g.cfg.Boot, Seq: g.seq.Add(1), Load1: load1(),
		HostPowerMilliW: hostPowerMilliW, Machines: machines}
	for _, a := range g.host.Addrs() {
		if len(hb.Addrs) < maxHeartbeatAddrs {
			hb.Addrs = append(hb.Addrs, a.String())
		}
	}
	data, err := json.Marshal(hb)
	if err != nil {
		g.log.Warn("heartbeat encode", "err", err)
		return
	}
	// Recorded directly too: this peer's own machines must not look silent
	// to itself if the mesh is slow to deliver its own messages.
	now := time.Now()
	g.seen.observe(&hb, now)
	addrs := strings.Join(hb.Addrs, " ")
	delivered := g.sendDirect(data)
	if !needsTopic(delivered, forced, addrs != g.lastAddrs, now.Sub(g.lastTopic), g.announceInterval()) {
		return
	}
	g.lastTopic, g.lastAddrs = now, addrs
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.Interval)
	defer cancel()
	if err := g.topic.Publish(ctx, data); err != nil && g.ctx.Err() == nil {
		g.log.Debug("heartbeat publish", "err", err)
	}
}
