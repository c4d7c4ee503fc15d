package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// healthOf returns the report's entry for id.
func healthOf(rep MembersReport, id peer.ID) (MemberHealth, bool) {
	for _, m := range rep.Members {
		if m.ID == id {
			return m, true
		}
	}
	return MemberHealth{}, false
}

// TestAutopilotReplacesADeadVoter: five voters and a non-voter; a voter is
// killed. A follower's `members` (asked of the leader) shows it
// unreachable with an ageing last contact while the others are reachable
// and named by organisation; after DeadServerTimeout the leader's
// autopilot demotes it and the healthy non-voter is promoted in its place:
// five voters again, all alive, and the federation commits.
func TestAutopilotReplacesADeadVoter(t *testing.T) {
	c := newCluster(t, 5, 1, func(cfg *Config) { cfg.DeadServerTimeout = 2 * time.Second })
	spare := c.add()
	if res := c.join(spare, c.peers[0]); res.Voter {
		t.Fatal("the sixth peer joined as a voter")
	}
	c.register(spare, 1)
	leader := c.waitLeader()
	var victim, asker *tpeer
	for _, p := range c.peers[:5] {
		switch {
		case p == leader:
		case victim == nil:
			victim = p
		case asker == nil:
			asker = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Every member answered the leader's stats at least once.
	eventually(t, 20*time.Second, func() error {
		rep, err := asker.node.MembersHealth(ctx)
		if err != nil {
			return err
		}
		if rep.Observer != leader.node.ID() || rep.Note != "" {
			return fmt.Errorf("observer %s (note %q), want the leader", rep.Observer, rep.Note)
		}
		for _, p := range c.peers {
			m, ok := healthOf(rep, p.node.ID())
			if !ok || !m.Reachable || m.LastContact < 0 || m.Org != p.org {
				return fmt.Errorf("%s: %+v (found %v)", p.name, m, ok)
			}
		}
		return nil
	})

	victim.stop()
	eventually(t, 20*time.Second, func() error {
		rep, err := asker.node.MembersHealth(ctx)
		if err != nil {
			return err
		}
		m, _ := healthOf(rep, victim.node.ID())
		if m.Reachable || m.LastContact < time.Second {
			return fmt.Errorf("the killed voter: %+v", m)
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		ms, err := c.waitLeader().node.Members()
		if err != nil {
			return err
		}
		voters := map[peer.ID]bool{}
		for _, m := range ms {
			if m.Voter {
				voters[m.ID] = true
			}
		}
		if len(voters) != 5 || voters[victim.node.ID()] || !voters[spare.node.ID()] {
			return fmt.Errorf("voters %v: want five, the spare in, the killed one out", voters)
		}
		return nil
	})
	submit(t, asker, 1)
	c.converge()
	if !memberIDs(t, c.waitLeader())[victim.node.ID()] {
		t.Fatal("the dead voter is no longer a member: it should stay, demoted")
	}
}

// TestMembersHealthIsForMembers: the leader's health view is asked over
// the membership protocol; a peer that holds the federation secret but is
// not a member is refused.
func TestMembersHealthIsForMembers(t *testing.T) {
	c := newCluster(t, 2, 1, nil)
	leader := c.waitLeader()
	outsider := startPeer(t, "outsider", c.psk, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := outsider.host.ConnectAddr(ctx, leader.addr()); err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(memberRequest{Op: opHealth})
	if _, err := outsider.host.Request(ctx, leader.node.ID(), ProtoMembership, req); p2p.Code(err) != CodeNotMember {
		t.Fatalf("a non-member asked the leader's health view: %v, want %s", err, CodeNotMember)
	}
	member := c.peers[0]
	if member == leader {
		member = c.peers[1]
	}
	b, err := member.host.Request(ctx, leader.node.ID(), ProtoMembership, req)
	if err != nil {
		t.Fatalf("a member asked: %v", err)
	}
	var resp healthResponse
	if err := json.Unmarshal(b, &resp); err != nil || len(resp.Members) != 2 || resp.Leader != leader.node.ID().String() {
		t.Fatalf("health response %+v, %v", resp, err)
	}
}

// TestDeadMemberRemovedAndRejoins: with RemoveDeadAfter set, a killed
// voter is first demoted (never below three voters), then, silent for
// RemoveDeadAfter, taken out of the configuration; the quorum is the three
// live voters throughout. The peer comes back as the documented way says:
// its Raft data deleted, its identity kept, an invitation naming it.
func TestDeadMemberRemovedAndRejoins(t *testing.T) {
	c := newCluster(t, 4, 1, func(cfg *Config) {
		cfg.DeadServerTimeout = 2 * time.Second
		cfg.RemoveDeadAfter = 4 * time.Second
		cfg.LeaderWaitTimeout = 2 * time.Second
	})
	leader := c.waitLeader()
	victim := c.peers[0]
	if victim == leader {
		victim = c.peers[1]
	}
	victim.stop()
	eventually(t, 30*time.Second, func() error {
		ms, err := c.waitLeader().node.Members()
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.ID == victim.node.ID() {
				return fmt.Errorf("the dead peer is still a member (voter %v)", m.Voter)
			}
			if !m.Voter {
				return fmt.Errorf("%s is a non-voter", m.ID)
			}
		}
		if len(ms) != 3 {
			return fmt.Errorf("%d members, want the three alive", len(ms))
		}
		return nil
	})
	submit(t, c.waitLeader(), 1)

	// Started again with its old data, it finds no leader and learns from
	// a member that it was taken out: its writes say so.
	victim.start()
	if _, err := victim.host.ConnectAddr(context.Background(), c.waitLeader().addr()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := victim.node.Propose(ctx, command(victim, ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1}}}}))
		if p2p.Code(err) != CodeNoQuorum || !strings.Contains(err.Error(), "no longer a member") {
			return fmt.Errorf("write on the taken-out peer: %v", err)
		}
		return nil
	})
	victim.stop()

	if err := os.RemoveAll(filepath.Join(victim.dir, "raft")); err != nil {
		t.Fatal(err)
	}
	victim.start()
	c.join(victim, c.waitLeader())
	if !memberIDs(t, c.waitLeader())[victim.node.ID()] {
		t.Fatal("the peer did not come back")
	}
	submit(t, victim, 1)
	c.converge()
}
