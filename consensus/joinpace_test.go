package consensus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestAdmissionsArePaced: ten peers on loopback ask to join at once while
// each catches up slowly (a slow disk: every Raft write waits 150 ms).
// The leader admits at most MaxCatchingUp (2) of them at a time: at no
// moment does its configuration hold more than two peers whose own log
// does not yet hold the entry that admitted them. The others are answered
// CodeAdmissionPaced, ask again, and every one of them is a member in the
// end.
func TestAdmissionsArePaced(t *testing.T) {
	const joiners, limit = 10, 2
	c := newCluster(t, 1, 1, func(cfg *Config) {
		cfg.MaxVoters = 1 // every joiner a non-voter: the leader alone commits
		cfg.MaxCatchingUp = limit
	})
	leader := c.peers[0]
	// The disk is fast again before the peers stop: a write delayed past
	// Shutdown would meet a closed store.
	var slow atomic.Bool
	slow.Store(true)
	defer slow.Store(false) // deferred calls run before the cleanups that stop the peers
	slowDisk := func(cfg *Config) {
		cfg.MaxVoters = 1
		cfg.MaxCatchingUp = limit
		cfg.StoreDelay = func() time.Duration {
			if slow.Load() {
				return 150 * time.Millisecond
			}
			return 0
		}
	}
	var js []*tpeer
	for i := range joiners {
		p := startPeer(t, fmt.Sprintf("joiner%d", i), c.psk, slowDisk)
		c.peers = append(c.peers, p)
		js = append(js, p)
	}
	tokens := make([]string, len(js))
	for i, p := range js {
		tokens[i] = c.invite(p)
	}

	// Watch: a joiner is catching up while the leader's configuration
	// holds it and its own does not.
	var maxSeen atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			in := map[peer.ID]bool{}
			ms, err := leader.node.Members()
			if err != nil {
				continue
			}
			for _, m := range ms {
				in[m.ID] = true
			}
			catching := 0
			for _, p := range js {
				if in[p.node.ID()] && !selfListed(p) {
					catching++
				}
			}
			if int64(catching) > maxSeen.Load() {
				maxSeen.Store(int64(catching))
			}
		}
	}()

	var pacedAnswers atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(js))
	for i, p := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			_, errs[i] = backoff.Retry(ctx, func() (JoinResult, error) {
				res, err := p.node.Join(ctx, tokens[i], leader.addr())
				if paced(err) {
					pacedAnswers.Add(1)
				} else if err != nil && !Retryable(err) {
					return res, backoff.Permanent(err)
				}
				return res, err
			}, backoff.WithBackOff(backoff.NewConstantBackOff(50*time.Millisecond)), backoff.WithMaxElapsedTime(0))
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: join: %v", js[i].name, err)
		}
	}
	members := memberIDs(t, leader)
	for _, p := range js {
		if !members[p.node.ID()] {
			t.Errorf("%s is not a member", p.name)
		}
	}
	if got := maxSeen.Load(); got > limit {
		t.Errorf("%d peers caught up at once, want at most %d", got, limit)
	}
	if pacedAnswers.Load() == 0 {
		t.Error("no join was paced: ten joiners on a slow disk all admitted at once")
	}
	t.Logf("at most %d peers catching up at once; %d paced answers", maxSeen.Load(), pacedAnswers.Load())
}

// selfListed says whether p's own configuration names it: its log holds
// the entry that admitted it.
func selfListed(p *tpeer) bool {
	ms, err := p.node.Members()
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.ID == p.node.ID() {
			return true
		}
	}
	return false
}

// TestCatchingUpForgets: the leader's record of the peers catching up
// drops a peer that left the configuration and one that waited longer
// than the timeout, and asks the others at most every catchUpRecheck.
func TestCatchingUpForgets(t *testing.T) {
	ids := []peer.ID{"a", "b", "c"}
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name       string
		member     func(peer.ID) bool
		now        time.Time
		wantAsk    []peer.ID
		wantLeft   int
		wantExpire int
	}{
		{"all members, fresh", func(peer.ID) bool { return true }, t0.Add(catchUpRecheck), ids, 3, 0},
		{"b left", func(id peer.ID) bool { return id != "b" }, t0.Add(catchUpRecheck), []peer.ID{"a", "c"}, 2, 0},
		{"too soon to ask again", func(peer.ID) bool { return true }, t0, nil, 3, 0},
		{"timed out", func(peer.ID) bool { return true }, t0.Add(2 * time.Minute), nil, 0, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c catchingUp
			for _, id := range ids {
				c.add(id, 7, t0)
				c.pending[id].checked = t0
			}
			ask, expired := c.due(tc.member, time.Minute, tc.now)
			if len(ask) != len(tc.wantAsk) {
				t.Fatalf("asked %v, want %v", ask, tc.wantAsk)
			}
			for _, id := range tc.wantAsk {
				if ask[id] != 7 {
					t.Fatalf("asked %v, want %v at index 7", ask, tc.wantAsk)
				}
			}
			if len(expired) != tc.wantExpire || c.count() != tc.wantLeft {
				t.Fatalf("expired %v, %d left; want %d expired, %d left", expired, c.count(), tc.wantExpire, tc.wantLeft)
			}
		})
	}
}

// TestPacedLeaderRefusesBadInvitationsFirst: while the leader paces
// admissions (a peer it admitted has not caught up: it died right after
// joining, and holds the only catch-up slot), a joiner with a good
// invitation is answered CodeAdmissionPaced, but one with no invitation
// or a bad one gets its refusal, not "ask again shortly": admitPeer checks
// the invitation before the pace (an invalid invitation must not be told
// to wait for a turn it will never get).
func TestPacedLeaderRefusesBadInvitationsFirst(t *testing.T) {
	oneSlot := func(cfg *Config) {
		cfg.MaxVoters = 1 // every joiner a non-voter
		cfg.MaxCatchingUp = 1
		cfg.CatchUpTimeout = 5 * time.Minute // the dead joiner keeps its slot for the whole test
	}
	c := newCluster(t, 1, 1, oneSlot)
	leader := c.peers[0]
	join := func(p *tpeer, token string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := p.node.Join(ctx, token, leader.addr())
		return err
	}
	dead := startPeer(t, "dead", c.psk, oneSlot)
	c.peers = append(c.peers, dead)
	if err := join(dead, c.invite(dead)); err != nil {
		t.Fatalf("first joiner: %v", err)
	}
	dead.stop() // admitted, never reports its catch-up

	waiting := startPeer(t, "waiting", c.psk, oneSlot)
	c.peers = append(c.peers, waiting)
	good := c.invite(waiting)
	if err := join(waiting, good); p2p.Code(err) != CodeAdmissionPaced {
		t.Fatalf("a good invitation while the slot is held: %v, want %s (the leader is not pacing: the test proves nothing)", err, CodeAdmissionPaced)
	}

	bad := startPeer(t, "bad", c.psk, oneSlot)
	c.peers = append(c.peers, bad)
	cases := []struct {
		name, token, want string
	}{
		{"none", "", CodeInvitationRequired},
		{"garbage", "not-an-invitation", CodeInvitation},
		{"another peer's", good, CodeInvitation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := join(bad, tc.token); p2p.Code(err) != tc.want {
				t.Fatalf("join: %v, want %s", err, tc.want)
			}
		})
	}
	if memberIDs(t, leader)[bad.node.ID()] {
		t.Fatal("the peer with a bad invitation is a member")
	}
}
