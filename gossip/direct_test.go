package gossip

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// newHosts starts n real libp2p hosts on loopback sharing one network
// secret, each connected to every other.
func newHosts(t *testing.T, n int) []*p2p.Host {
	t.Helper()
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	hosts := make([]*p2p.Host, n)
	for i := range hosts {
		h, err := p2p.New(p2p.Config{DataDir: filepath.Join(t.TempDir(), "p2p"), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hosts[i] = h
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, h := range hosts {
		for _, to := range hosts[:i] {
			if _, err := h.ConnectAddr(ctx, to.FullAddrs()[0].String()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return hosts
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline (a loaded machine is slow; nothing here measures speed).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heardDirectly reports whether g received a direct heartbeat from id.
func heardDirectly(g *Gossip, id peer.ID) bool {
	c, ok := g.seen.peerContact(id)
	return ok && !c.direct.IsZero()
}

// TestDirectHeartbeatRefusals: a direct heartbeat is accepted only from a
// member, for the organisation the ledger registers to it, and within the
// sender's rate; each refusal has its stable code and records nothing.
// Real hosts: the receiver's handler sees the author the security
// handshake authenticated, whatever the message claims.
func TestDirectHeartbeatRefusals(t *testing.T) {
	var memberIn atomic.Bool
	memberIn.Store(true)
	g, ctx, recv, member, stranger, hb := directReceiver(t, &memberIn)
	send := func(from *p2p.Host, data []byte) error {
		_, err := p2p.Request(ctx, from.Host, recv.ID(), ProtocolHeartbeat, data, p2p.StreamOptions{MaxMessageSize: MaxHeartbeatBytes})
		return err
	}
	tests := []struct {
		name    string
		from    *p2p.Host
		data    []byte
		code    string // "" when accepted
		records string // the machine the receiver hears of afterwards, "" for none
	}{
		{"non-member claiming a member's organisation", stranger, hb("mem"), CodeNotMember, ""},
		{"non-member naming an unknown organisation", stranger, hb("outsiders"), CodeNotMember, ""},
		{"member claiming another member's organisation", member, hb("lead"), CodeUnauthorised, ""},
		{"member naming an unknown organisation", member, hb("outsiders"), CodeUnknownOrg, ""},
		{"member, malformed", member, []byte(`{"v":1,"org":"mem"`), p2p.CodeBadRequest, ""},
		{"member, oversized", member, make([]byte, MaxHeartbeatBytes+1), p2p.CodeTooLarge, ""},
		{"member, its own organisation", member, hb("mem"), "", "mem/m1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := send(tc.from, tc.data)
			if got := p2p.Code(err); tc.code != "" && got != tc.code || tc.code == "" && err != nil {
				t.Fatalf("error %v (code %q), want code %q", err, got, tc.code)
			}
			for _, id := range []string{"mem/m1", "lead/m1", "outsiders/m1"} {
				if _, heard := g.LastSeen(id); heard != (id == tc.records) {
					t.Fatalf("after this message, %s heard: %v", id, heard)
				}
			}
		})
	}
	if heardDirectly(g, stranger.ID()) {
		t.Fatal("the non-member counts as heard")
	}
	if !heardDirectly(g, member.ID()) || !g.PeerReachable(member.ID(), time.Now(), time.Minute) {
		t.Fatal("the member's accepted heartbeat did not count as contact")
	}

	// The limit: a burst of directBurst, then one per half interval (an
	// hour here), so the next one is refused. The member starts with a
	// fresh budget (the cases above spent some).
	g.limits.mu.Lock()
	delete(g.limits.byPeer, member.ID())
	g.limits.mu.Unlock()
	for i := 0; ; i++ {
		err := send(member, hb("mem"))
		if p2p.Code(err) == CodeRateLimited {
			if i+1 < directBurst {
				t.Fatalf("rate limited after %d heartbeats, before the burst of %d", i+1, directBurst)
			}
			break
		}
		if err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
		if i > directBurst {
			t.Fatalf("%d heartbeats accepted at once: no rate limit", i+1)
		}
	}
}

// leaderVar is a federation's leader as some test peers see it.
type leaderVar struct{ id atomic.Value }

func (l *leaderVar) set(id peer.ID) { l.id.Store(id) }
func (l *leaderVar) get() (peer.ID, bool) {
	id, _ := l.id.Load().(peer.ID)
	return id, id != ""
}

// lastSeq is the sequence of the last heartbeat of id that guard accepted.
func lastSeq(guard *ReplayGuard, id peer.ID) int64 {
	guard.mu.Lock()
	defer guard.mu.Unlock()
	return guard.last[id][1]
}

// startThree starts gossip on three connected peers a, b, c (one
// organisation each, named so), all members; c publishes, believing
// cLeader leads, while a and b believe othersLeader does. Announcements
// are an hour apart unless forced, so the topic carries only what the
// fallback rules send.
func startThree(t *testing.T, cLeader, othersLeader func() (peer.ID, bool)) (map[string]*Gossip, []*p2p.Host) {
	t.Helper()
	hosts := newHosts(t, 3)
	ids := map[string]peer.ID{"a": hosts[0].ID(), "b": hosts[1].ID(), "c": hosts[2].ID()}
	view := newLedgerView(t, ids)
	members := func(id peer.ID) bool { return id == ids["a"] || id == ids["b"] || id == ids["c"] }
	gs := map[string]*Gossip{}
	for i, org := range []string{"a", "b", "c"} {
		lv := othersLeader
		if org == "c" {
			lv = cLeader
		}
		g := New(Config{Org: org, Boot: time.Now().UnixMilli(), Interval: 50 * time.Millisecond, AnnounceMin: time.Hour,
			Logger: testLogger(), IsMember: members, Leader: lv})
		t.Cleanup(g.Close)
		if err := g.Join(hosts[i], view); err != nil {
			t.Fatal(err)
		}
		gs[org] = g
	}
	return gs, hosts
}

// TestDirectHeartbeatsFollowTheLeader: a member's heartbeats reach the
// leader directly, with the owner's clock (OwnerClockMs) and its machines,
// and go on the topic only when an announcement is due (forced here): the
// peer that does not lead hears of the member from that announcement
// only. After a leader change, the new leader receives them directly.
func TestDirectHeartbeatsFollowTheLeader(t *testing.T) {
	var leader leaderVar
	gs, hosts := startThree(t, leader.get, leader.get)
	a, b, c := hosts[0].ID(), hosts[1].ID(), hosts[2].ID()
	leader.set(a)
	// c's first heartbeat goes on the topic (an announcement is due at
	// start), and so does each forced one: b hears of c from those.
	// (Gossipsub may drop the first messages of a peer that just joined,
	// so the test forces them until one arrives.)
	waitFor(t, "c to see a and b on the topic", func() bool { return len(gs["c"].topic.ListPeers()) == 2 })
	var src fixedSource
	gs["c"].StartPublishing(&src)
	waitFor(t, "the leader a to hear c directly", func() bool { return heardDirectly(gs["a"], c) })
	waitFor(t, "b to hear c's announcement on the topic", func() bool {
		gs["c"].PublishNow()
		_, ok := gs["b"].LastSeen("c/m1")
		return ok
	})
	if ms, ok := gs["a"].OwnerClockMs("c/m1", time.Now()); !ok || ms <= 0 {
		t.Fatalf("no owner clock for c/m1 on the leader: %d %v", ms, ok)
	}
	// Ten heartbeats later, none of them reached b on the topic (one
	// forced heartbeat may have been pending still).
	// The ten travel on one long-lived stream (forced heartbeats above,
	// faster than the rate limit, may have been refused, which ends a
	// stream; and on a loaded machine an exchange may outlast this test's
	// 50 ms interval, which also ends it: a few more at most, where a
	// stream per heartbeat would be ten).
	heard := lastSeq(&gs["b"].guard, c)
	opened := gs["c"].direct.Opened()
	waitFor(t, "ten more heartbeats of c at the leader", func() bool { return lastSeq(&gs["a"].directGuard, c) >= heard+10 })
	if n := gs["c"].direct.Opened() - opened; n > 3 {
		t.Fatalf("c opened %d heartbeat streams to the leader for ten heartbeats, want one long-lived stream", n)
	}
	if heardDirectly(gs["b"], c) {
		t.Fatal("b, not the leader, received a direct heartbeat")
	}
	if seq := lastSeq(&gs["b"].guard, c); seq > heard+2 {
		t.Fatalf("b heard c's heartbeat %d on the topic, beyond the announcement %d", seq, heard)
	}

	leader.set(b)
	waitFor(t, "the new leader b to hear c directly", func() bool { return heardDirectly(gs["b"], c) })
	opened = gs["c"].direct.Opened()
	from := lastSeq(&gs["b"].directGuard, c)
	waitFor(t, "ten more heartbeats of c at the new leader", func() bool { return lastSeq(&gs["b"].directGuard, c) >= from+10 })
	if n := gs["c"].direct.Opened() - opened; n > 3 {
		t.Fatalf("c opened %d heartbeat streams to the new leader for ten heartbeats, want one long-lived stream", n)
	}
	if ms, ok := gs["b"].OwnerClockMs("c/m1", time.Now()); !ok || ms <= 0 {
		t.Fatalf("no owner clock for c/m1 on the new leader: %d %v", ms, ok)
	}
}

// TestHeartbeatsFallBackToTheTopic: when the peer a member believes leads
// says it does not (views lag during an election), or no leader is known,
// every heartbeat also goes on the topic, so that whoever leads hears it
// through the relays.
func TestHeartbeatsFallBackToTheTopic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cLeader string // whom c believes leads ("" none)
	}{{"the believed leader does not lead", "a"}, {"no leader known", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			var cView, othersView leaderVar
			gs, hosts := startThree(t, cView.get, othersView.get)
			b, c := hosts[1].ID(), hosts[2].ID()
			if tc.cLeader == "a" {
				cView.set(hosts[0].ID())
			}
			othersView.set(b)
			waitFor(t, "c to see a and b on the topic", func() bool { return len(gs["c"].topic.ListPeers()) == 2 })
			var src fixedSource
			gs["c"].StartPublishing(&src)
			// Announcements are an hour apart: b, the leader, hears c's
			// later heartbeats only because each one falls back to the
			// topic.
			waitFor(t, "b to hear c's fifth heartbeat on the topic", func() bool { return lastSeq(&gs["b"].guard, c) >= 5 })
			if heardDirectly(gs["b"], c) {
				t.Fatal("b received a direct heartbeat from a peer that does not believe it leads")
			}
		})
	}
}

// TestTopicOnlyWhenNeeded: once the leader has a heartbeat, the topic
// carries it only when forced, when the addresses changed, or once in the
// announcement interval.
func TestTopicOnlyWhenNeeded(t *testing.T) {
	const announce = time.Minute
	tests := []struct {
		name              string
		delivered, forced bool
		addrsChanged      bool
		sinceLast         time.Duration
		want              bool
	}{
		{"delivered, nothing new", true, false, false, time.Second, false},
		{"not delivered", false, false, false, time.Second, true},
		{"forced", true, true, false, time.Second, true},
		{"addresses changed", true, false, true, time.Second, true},
		{"announcement due", true, false, false, announce, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := needsTopic(tc.delivered, tc.forced, tc.addrsChanged, tc.sinceLast, announce); got != tc.want {
				t.Fatalf("needsTopic = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestJoinersAddressesAreRemembered: a member of the Raft configuration
// whose organisation this peer's view does not know yet (a joiner still
// catching up) gets its heartbeat refused, directly or on the topic, but
// its addresses are kept: a leader elected after the one that admitted it
// could not reach it otherwise. A non-member's addresses are not kept.
func TestJoinersAddressesAreRemembered(t *testing.T) {
	hosts := newHosts(t, 3)
	recv, joiner, stranger := hosts[0], hosts[1], hosts[2]
	view := newLedgerView(t, map[string]peer.ID{"lead": recv.ID()})
	g := New(Config{Org: "lead", Boot: 1, Interval: time.Hour, Logger: testLogger(),
		IsMember: func(id peer.ID) bool { return id == recv.ID() || id == joiner.ID() }})
	defer g.Close()
	if err := g.Join(recv, view); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hasAddr := func(id peer.ID, addr string) bool {
		for _, a := range recv.Peerstore().Addrs(id) {
			if a.String() == addr {
				return true
			}
		}
		return false
	}
	hb := func(addr string) []byte {
		return encode(t, Heartbeat{V: 1, Org: "newbie", AtMs: time.Now().UnixMilli(), Boot: 1, Seq: 1, Addrs: []string{addr}})
	}
	tests := []struct {
		name   string
		from   *p2p.Host
		direct bool
		code   string
		kept   bool
	}{
		{"joiner, direct", joiner, true, CodeUnknownOrg, true},
		{"joiner, on the topic", joiner, false, "", true},
		{"non-member, direct", stranger, true, CodeNotMember, false},
		{"non-member, on the topic", stranger, false, "", false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := fmt.Sprintf("/ip4/10.9.8.%d/tcp/4001", i+1)
			if tc.direct {
				_, err := p2p.Request(ctx, tc.from.Host, recv.ID(), ProtocolHeartbeat, hb(addr), p2p.StreamOptions{MaxMessageSize: MaxHeartbeatBytes})
				if got := p2p.Code(err); got != tc.code {
					t.Fatalf("error %v (code %q), want %q", err, got, tc.code)
				}
			} else {
				msg := &pubsub.Message{Message: &pb.Message{From: []byte(tc.from.ID()), Data: hb(addr)}}
				if got := g.validate(ctx, tc.from.ID(), msg); got != pubsub.ValidationIgnore {
					t.Fatalf("verdict %v, want ignore", got)
				}
			}
			if got := hasAddr(tc.from.ID(), addr); got != tc.kept {
				t.Fatalf("address %s kept: %v, want %v", addr, got, tc.kept)
			}
			if _, heard := g.seen.peerContact(tc.from.ID()); heard {
				t.Fatal("a refused heartbeat counts as contact")
			}
		})
	}
}

// TestDirectStreamChecksEveryHeartbeat: on a long-lived heartbeat stream
// every heartbeat is checked as if it came alone: a member's stream,
// established by an accepted heartbeat, carries a heartbeat for another
// member's organisation (refused, unauthorised), and, once the member has
// left the configuration, its own (refused, not a member); a refusal ends
// the stream. A non-member is refused on its first heartbeat, oversized
// ones are refused with their code, and the rate limit holds on one
// stream as across many. Real hosts, the server the gossip registers.
func TestDirectStreamChecksEveryHeartbeat(t *testing.T) {
	var memberIn atomic.Bool
	memberIn.Store(true)
	g, ctx, recv, member, stranger, hb := directReceiver(t, &memberIn)
	opts := p2p.StreamOptions{MaxMessageSize: 2 * MaxHeartbeatBytes}
	mem := p2p.NewSession(member.Host, ProtocolHeartbeatStream, "", opts)
	defer mem.Close()
	out := p2p.NewSession(stranger.Host, ProtocolHeartbeatStream, "", opts)
	defer out.Close()
	send := func(s *p2p.Session, data []byte) error {
		_, err := s.Request(ctx, recv.ID(), data)
		return err
	}
	reset := func() { // a fresh rate budget for the member
		g.limits.mu.Lock()
		delete(g.limits.byPeer, member.ID())
		g.limits.mu.Unlock()
	}
	steps := []struct {
		name    string
		s       *p2p.Session
		data    func() []byte
		out     bool // the member is out of the configuration
		code    string
		opened  int    // streams the session opened so far, after this step
		records string // the machine the receiver hears of afterwards, "" for none
	}{
		{"member, its own organisation", mem, func() []byte { return hb("mem") }, false, "", 1, "mem/m1"},
		{"member, again on the same stream", mem, func() []byte { return hb("mem") }, false, "", 1, "mem/m1"},
		{"member claiming another member's organisation on its stream", mem, func() []byte { return hb("lead") }, false, CodeUnauthorised, 1, "mem/m1"},
		{"member, after the refusal: a new stream", mem, func() []byte { return hb("mem") }, false, "", 2, "mem/m1"},
		{"member, oversized on its stream", mem, func() []byte { return make([]byte, MaxHeartbeatBytes+1) }, false, p2p.CodeTooLarge, 2, "mem/m1"},
		{"member, a new stream", mem, func() []byte { return hb("mem") }, false, "", 3, "mem/m1"},
		{"member out of the configuration, on its stream", mem, func() []byte { return hb("mem") }, true, CodeNotMember, 3, "mem/m1"},
		{"non-member claiming a member's organisation", out, func() []byte { return hb("mem") }, false, CodeNotMember, 1, "mem/m1"},
		{"non-member, its own organisation", out, func() []byte { return hb("outsiders") }, false, CodeNotMember, 2, "mem/m1"},
	}
	for _, st := range steps {
		memberIn.Store(!st.out)
		reset()
		before := lastSeq(&g.directGuard, member.ID())
		err := send(st.s, st.data())
		if got := p2p.Code(err); got != st.code {
			t.Fatalf("%s: error %v (code %q), want %q", st.name, err, got, st.code)
		}
		if n := st.s.Opened(); n != st.opened {
			t.Fatalf("%s: %d streams opened, want %d", st.name, n, st.opened)
		}
		if after := lastSeq(&g.directGuard, member.ID()); st.code != "" && after != before {
			t.Fatalf("%s: refused, yet the member's heartbeat %d was accepted", st.name, after)
		}
		for _, id := range []string{"mem/m1", "lead/m1", "outsiders/m1"} {
			if _, heard := g.LastSeen(id); heard != (id == st.records) {
				t.Fatalf("%s: afterwards %s heard: %v", st.name, id, heard)
			}
		}
	}
	if heardDirectly(g, stranger.ID()) {
		t.Fatal("the non-member counts as heard")
	}

	// The rate limit on one stream: a burst, then refused (which ends
	// the stream).
	memberIn.Store(true)
	reset()
	opened := mem.Opened()
	for i := 0; ; i++ {
		err := send(mem, hb("mem"))
		if p2p.Code(err) == CodeRateLimited {
			if i+1 < directBurst {
				t.Fatalf("rate limited after %d heartbeats, before the burst of %d", i+1, directBurst)
			}
			break
		}
		if err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
		if i > directBurst {
			t.Fatalf("%d heartbeats accepted on one stream: no rate limit", i+1)
		}
	}
	if n := mem.Opened(); n != opened+1 {
		t.Fatalf("the burst opened %d streams, want one", n-opened)
	}
}

// directReceiver starts g, the direct-heartbeat receiver both refusal
// tests use: recv leads organisation "lead", member is organisation "mem"'s peer
// and a Raft member while memberIn holds, stranger is connected but never a
// member. hb encodes the next heartbeat of org (a fresh sequence number).
func directReceiver(t *testing.T, memberIn *atomic.Bool) (g *Gossip, ctx context.Context, recv, member, stranger *p2p.Host, hb func(org string) []byte) {
	t.Helper()
	hosts := newHosts(t, 3)
	recv, member, stranger = hosts[0], hosts[1], hosts[2]
	view := newLedgerView(t, map[string]peer.ID{"lead": recv.ID(), "mem": member.ID()})
	g = New(Config{Org: "lead", Boot: 1, Interval: time.Hour, Logger: testLogger(),
		IsMember: func(id peer.ID) bool { return id == recv.ID() || id == member.ID() && memberIn.Load() }})
	t.Cleanup(func() { g.Close() })
	if err := g.Join(recv, view); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if _, err := stranger.ConnectAddr(ctx, recv.FullAddrs()[0].String()); err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	hb = func(org string) []byte {
		seq++
		return encode(t, Heartbeat{V: 1, Org: org, AtMs: time.Now().UnixMilli(), Boot: 1, Seq: seq, Machines: []MachineTelemetry{{Name: "m1", PowerMilliW: 5}}})
	}
	return g, ctx, recv, member, stranger, hb
}
