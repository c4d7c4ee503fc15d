package consensus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// refusedLimit is the limit the admission hook of TestProposeRules refuses:
// a stand-in for the leader's rules (package leader tests the real ones).
const refusedLimit = 13

func TestProposeRules(t *testing.T) {
	var admitted sync.Map // "proposer command-peer" → true, as Admit saw them
	c := newCluster(t, 3, 2, func(cfg *Config) {
		self := cfg.DataDir
		cfg.Admit = func(proposer peer.ID, cmd ledger.Command, state *ledger.Ledger) error {
			admitted.Store(self+" "+proposer.String()+" "+cmd.Peer, true)
			if cmd.SetLimit == nil {
				return nil
			}
			if _, ok := state.Org(cmd.Org); !ok {
				return errors.New("admission saw no state")
			}
			switch cmd.SetLimit.LimitMilliW {
			case refusedLimit:
				return p2p.Errorf(CodeForbidden, "limit %d refused", refusedLimit)
			case refusedLimit + 1:
				return errors.New("an uncoded refusal")
			}
			return nil
		}
	})
	leader := c.waitLeader()
	var f, other *tpeer
	for _, p := range c.peers {
		switch {
		case p == leader:
		case f == nil:
			f = p
		default:
			other = p
		}
	}
	submit(t, f, 1)
	c.converge()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// An outsider holds the secret but never joined.
	outsider := startPeer(t, "outsider", c.psk, nil)
	if _, err := outsider.host.ConnectAddr(ctx, leader.addr()); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		// send returns the error of one attempt.
		send     func() error
		wantCode string
	}{
		{"garbage", func() error {
			_, err := f.node.Propose(ctx, []byte("{not a command"))
			return err
		}, CodeBadCommand},
		{"acting as another peer, locally", func() error {
			_, err := f.node.Propose(ctx, command(f, ledger.Command{Peer: other.node.ID().String(), Org: other.org, SetLimit: &ledger.SetLimit{LimitMilliW: 1}}))
			return err
		}, CodeForbidden},
		{"refused by admission, on a follower", func() error {
			_, err := f.node.Propose(ctx, command(f, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: refusedLimit}}))
			return err
		}, CodeForbidden},
		{"refused by admission, on the leader", func() error {
			_, err := leader.node.Propose(ctx, command(leader, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: refusedLimit}}))
			return err
		}, CodeForbidden},
		{"refused by admission without a code", func() error {
			_, err := leader.node.Propose(ctx, command(leader, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: refusedLimit + 1}}))
			return err
		}, CodeForbidden},
		{"forwarded, refused by the leader's admission", func() error {
			_, err := f.host.Request(ctx, leader.node.ID(), ProtoPropose, command(f, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: refusedLimit}}))
			return err
		}, CodeForbidden},
		{"forwarded, acting as another member", func() error {
			_, err := f.host.Request(ctx, leader.node.ID(), ProtoPropose, command(f, ledger.Command{Peer: other.node.ID().String(), Org: other.org, SetLimit: &ledger.SetLimit{LimitMilliW: 1}}))
			return err
		}, CodeForbidden},
		{"forwarded to a follower", func() error {
			_, err := other.host.Request(ctx, f.node.ID(), ProtoPropose, command(other, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 1}}))
			return err
		}, CodeNotLeader},
		{"forwarded by a non-member", func() error {
			cmd := ledger.Command{V: ledger.CommandVersion, Org: "outsider", Peer: outsider.host.ID().String(), AtMs: 1, RegisterOrg: &ledger.RegisterOrg{LimitMilliW: 1}}
			b, err := ledger.EncodeCommand(cmd)
			if err != nil {
				t.Fatal(err)
			}
			_, err = outsider.host.Request(ctx, leader.node.ID(), ProtoPropose, b)
			return err
		}, CodeNotMember},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeIdx := leader.node.Hash()
			err := tc.send()
			if got := p2p.Code(err); got != tc.wantCode {
				t.Fatalf("code %q (%v), want %q", got, err, tc.wantCode)
			}
			if after, afterIdx := leader.node.Hash(); after != before || afterIdx != beforeIdx {
				t.Fatal("a refused command changed the state")
			}
		})
	}

	// The ledger's own rejections come back in the result, not as errors,
	// and leave the state hash unchanged.
	before, _ := leader.node.Hash()
	res := mustPropose(t, f, ledger.Command{CancelTask: &ledger.CancelTask{Task: "org1-999"}})
	if res.Err == nil || res.Err.Code != ledger.CodeUnknownTask || res.Index == 0 {
		t.Fatalf("cancel of an unknown task: %+v", res)
	}
	c.converge()
	if after, _ := leader.node.Hash(); after != before {
		t.Fatal("a command the ledger rejected changed the state hash")
	}
	// A follower's own machine declared lost; the result comes back
	// through the forwarding stream intact.
	res = mustPropose(t, f, ledger.Command{MachineLost: &ledger.MachineLostCmd{Machine: f.org + "/m1"}})
	if !res.Applied() || res.Kind != ledger.KindMachineLost {
		t.Fatalf("own machine lost: %+v", res)
	}
	c.converge()
	// Admission ran on the follower for its own command (proposer: itself)
	// and on the leader for the forwarded one (proposer: the sender).
	for _, on := range []*tpeer{f, leader} {
		key := filepath.Join(on.dir, "raft") + " " + f.node.ID().String() + " " + f.node.ID().String()
		if _, ok := admitted.Load(key); !ok {
			t.Errorf("admission did not see %s's command on %s", f.name, on.name)
		}
	}
}

func TestSubscriptionDeliversOwnMachines(t *testing.T) {
	c := newCluster(t, 3, 2, nil)
	owner := c.peers[1]
	own := owner.node.Subscribe(owner.org)
	all := c.peers[2].node.Subscribe("")
	ownEvents, allEvents := collect(own), collect(all)
	defer own.Close()
	defer all.Close()

	ids := submit(t, c.peers[0], 6) // as many tasks as machines
	allocate(t, c.waitLeader(), ids)
	eventually(t, 20*time.Second, func() error {
		if n := len(allEvents.list()); n != len(ids) {
			return fmt.Errorf("%d start events, want %d", n, len(ids))
		}
		return nil
	})
	c.converge()
	var allocs []ledger.Allocation
	owner.node.View(func(l *ledger.Ledger) { allocs = l.Allocations(owner.org) })
	eventually(t, 5*time.Second, func() error {
		if n := len(ownEvents.list()); n != len(allocs) {
			return fmt.Errorf("%d events for %s, want %d", n, owner.org, len(allocs))
		}
		return nil
	})
	got := map[string]string{}
	for _, ev := range ownEvents.list() {
		if ev.MachineOrg != owner.org || ev.Action != ledger.ActionStart || ev.Index == 0 {
			t.Fatalf("unexpected event for %s: %+v", owner.org, ev)
		}
		got[ev.Machine] = ev.Task
	}
	for _, a := range allocs {
		if got[a.Machine.ID] != a.Task.ID {
			t.Fatalf("machine %s: event says %q, ledger says %q", a.Machine.ID, got[a.Machine.ID], a.Task.ID)
		}
	}

	// Cancelling a task on the owner's machine tells the owner to stop it.
	victim := allocs[0]
	mustPropose(t, c.peers[0], ledger.Command{CancelTask: &ledger.CancelTask{Task: victim.Task.ID}})
	eventually(t, 10*time.Second, func() error {
		for _, ev := range ownEvents.list() {
			if ev.Action == ledger.ActionStop && ev.Task == victim.Task.ID && ev.Machine == victim.Machine.ID && ev.Reason == "cancelled" {
				return nil
			}
		}
		return fmt.Errorf("no stop event for %s", victim.Task.ID)
	})

	own.Close()
	own.Close() // idempotent
	if _, open := <-own.C(); open {
		// Drain what was buffered; the channel must end closed.
		for range own.C() {
		}
	}
	if own.Err() != nil {
		t.Fatalf("closed subscription reports %v", own.Err())
	}
}

func TestSubscriptionOverflowEnds(t *testing.T) {
	h := newHub()
	s := h.subscribe("")
	// Nobody reads: push more than the bound in one go.
	res := &ledger.Result{Index: 1}
	for i := 0; i < 1000; i++ {
		res.Changes = append(res.Changes, ledger.Change{Machine: "a/m", MachineOrg: "a", Action: ledger.ActionStart, Task: "a-1"})
	}
	for i := 0; i < MaxPendingEvents/1000+2; i++ {
		h.publish(res)
	}
	if s.Err() != ErrSubscriberTooSlow {
		t.Fatalf("err %v, want ErrSubscriberTooSlow", s.Err())
	}
	for range s.C() {
	}
	if len(h.list()) != 0 {
		t.Fatal("ended subscription still in the hub")
	}
}

func TestConfigValidation(t *testing.T) {
	psk, _ := p2p.GenerateSecret()
	h, err := p2p.New(p2p.Config{DataDir: t.TempDir(), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk, Logger: testLogger("v")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tests := []struct {
		name string
		mut  func(*Config)
	}{
		{"no data dir", func(c *Config) { c.DataDir = "" }},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = time.Second; c.HeartbeatTimeout = 500 * time.Millisecond }},
		{"election below heartbeat", func(c *Config) {
			c.ElectionTimeout = 100 * time.Millisecond
			c.HeartbeatTimeout = 500 * time.Millisecond
		}},
		{"too many entries per RPC", func(c *Config) { c.MaxAppendEntries = 5000 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(filepath.Join(t.TempDir(), "raft"))
			cfg.Logger = testLogger("v")
			tc.mut(&cfg)
			if n, err := New(cfg, h); err == nil {
				n.Shutdown()
				t.Fatal("New accepted a bad config")
			}
		})
	}
	// The WAN preset is valid and slower than the LAN one.
	w, l := WANConfig("x"), DefaultConfig("x")
	if w.HeartbeatTimeout <= l.HeartbeatTimeout || w.ElectionTimeout <= l.ElectionTimeout {
		t.Fatal("WAN timeouts are not above LAN ones")
	}
	if err := w.withDefaults().validate(); err != nil {
		t.Fatalf("WAN config invalid: %v", err)
	}
}

// TestResultSurvivesForwarding checks the JSON round trip the forwarding
// relies on for every part of a Result.
func TestResultSurvivesForwarding(t *testing.T) {
	in := ledger.Result{
		Index: 7, Kind: ledger.KindDecisions,
		Err:       nil,
		TaskIDs:   []string{"a-1"},
		Decisions: []ledger.DecisionResult{{Decision: ledger.Decision{Kind: ledger.DecideAllocate, Task: "a-1", Machine: "a/m"}, Err: &ledger.Error{Code: ledger.CodeStale, Msg: "x"}}},
		Changes:   []ledger.Change{{Machine: "a/m", MachineOrg: "a", Action: ledger.ActionStart, Task: "a-1", Reason: "allocated"}},
		Notes:     []string{"n"},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out ledger.Result
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(out)
	if string(b) != string(b2) || out.AcceptedDecisions() != 0 || out.Decisions[0].Err.Code != ledger.CodeStale {
		t.Fatalf("round trip changed the result: %s vs %s", b, b2)
	}
}
