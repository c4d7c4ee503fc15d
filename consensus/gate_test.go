package consensus

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/hashicorp/raft"
	libp2praft "github.com/libp2p/go-libp2p-raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// forger sends hand-made Raft RPCs from a host that holds the federation
// secret, through the same client transport members use (test only).
type forger struct {
	tb    testing.TB
	id    peer.ID
	trans *raft.NetworkTransport
}

func newForger(tb testing.TB, h *p2p.Host) *forger {
	tb.Helper()
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		ServerAddressProvider: peerIDAddrs{},
		Stream:                dialOnly{h: h, closed: make(chan struct{})},
		Timeout:               2 * time.Second,
	})
	tb.Cleanup(func() { tr.Close() })
	return &forger{tb: tb, id: h.ID(), trans: tr}
}

// dialOnly is a client-side stream layer: it dials Raft streams and
// accepts none (it must not take over the host's Raft protocol handler).
type dialOnly struct {
	h      *p2p.Host
	closed chan struct{}
}

func (d dialOnly) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id, err := peer.Decode(string(address))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := d.h.NewStream(ctx, id, libp2praft.RaftProtocol)
	if err != nil {
		return nil, err
	}
	return streamConn{st}, nil
}

func (d dialOnly) Accept() (net.Conn, error) { <-d.closed; return nil, net.ErrClosed }
func (d dialOnly) Close() error {
	select {
	case <-d.closed:
	default:
		close(d.closed)
	}
	return nil
}
func (d dialOnly) Addr() net.Addr { return peerAddr(d.h.ID()) }

// header names claimed as the sender (the forger itself unless told).
func (f *forger) header(claimed peer.ID) raft.RPCHeader {
	if claimed == "" {
		claimed = f.id
	}
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(claimed.String()), Addr: []byte(claimed.String())}
}

// raftState is what a forged RPC must not move on a peer.
type raftState struct {
	term, lastIndex, lastTerm uint64
	hash                      string
}

func stateOf(tb testing.TB, p *tpeer) raftState {
	tb.Helper()
	st := p.node.Raft().Stats()
	num := func(k string) uint64 {
		v, err := strconv.ParseUint(st[k], 10, 64)
		if err != nil {
			tb.Fatalf("%s: stat %s=%q", p.name, k, st[k])
		}
		return v
	}
	h, _ := p.node.Hash()
	return raftState{term: num("term"), lastIndex: num("last_log_index"), lastTerm: num("last_log_term"), hash: h}
}

// forgedEntries are commands a secret holder would like committed: the
// cancellation of victim's task in victim's name, and its limit lowered to
// 1 mW.
func forgedEntries(tb testing.TB, victim *tpeer, task string, after raftState) []*raft.Log {
	tb.Helper()
	cmds := []ledger.Command{
		{CancelTask: &ledger.CancelTask{Task: task}},
		{SetLimit: &ledger.SetLimit{LimitMilliW: 1}},
	}
	var out []*raft.Log
	for i, c := range cmds {
		out = append(out, &raft.Log{Index: after.lastIndex + uint64(i) + 1, Term: after.term + 1, Type: raft.LogCommand, Data: command(victim, c)})
	}
	return out
}

// attack sends target every kind of Raft RPC a secret holder could forge,
// each claiming to come from claimed (the forger itself when empty), and
// returns the errors of the calls.
func (f *forger) attack(target *tpeer, victim *tpeer, task string, claimed peer.ID) map[string]error {
	f.tb.Helper()
	st := stateOf(f.tb, target)
	id, addr := raft.ServerID(target.node.ID().String()), raft.ServerAddress(target.node.ID().String())
	errs := map[string]error{}
	var ae raft.AppendEntriesResponse
	errs["AppendEntries"] = f.trans.AppendEntries(id, addr, &raft.AppendEntriesRequest{
		RPCHeader: f.header(claimed), Term: st.term + 1,
		PrevLogEntry: st.lastIndex, PrevLogTerm: st.lastTerm,
		Entries: forgedEntries(f.tb, victim, task, st), LeaderCommitIndex: st.lastIndex + 2,
	}, &ae)
	var rv raft.RequestVoteResponse
	errs["RequestVote"] = f.trans.RequestVote(id, addr, &raft.RequestVoteRequest{
		RPCHeader: f.header(claimed), Term: st.term + 10, LastLogIndex: st.lastIndex + 1000, LastLogTerm: st.term + 9,
		LeadershipTransfer: true,
	}, &rv)
	var tn raft.TimeoutNowResponse
	errs["TimeoutNow"] = f.trans.TimeoutNow(id, addr, &raft.TimeoutNowRequest{RPCHeader: f.header(claimed)}, &tn)
	var is raft.InstallSnapshotResponse
	snap := []byte("{}")
	errs["InstallSnapshot"] = f.trans.InstallSnapshot(id, addr, &raft.InstallSnapshotRequest{
		RPCHeader: f.header(claimed), SnapshotVersion: raft.SnapshotVersionMax, Term: st.term + 20,
		LastLogIndex: st.lastIndex + 5000, LastLogTerm: st.term + 20, Size: int64(len(snap)),
	}, &is, strings.NewReader(string(snap)))
	return errs
}

// checkRefused asserts that every RPC failed in the transport and that no
// peer moved: same term, same log, same state.
func checkRefused(t *testing.T, errs map[string]error, c *cluster, before map[*tpeer]raftState, refusalsBefore map[*tpeer]uint64, target *tpeer) {
	t.Helper()
	for rpc, err := range errs {
		t.Logf("forged %s to %s: %v", rpc, target.name, err)
		if err == nil {
			t.Errorf("forged %s was answered: it reached Raft", rpc)
		}
	}
	// Give a wrongly accepted entry the time to commit before looking.
	time.Sleep(500 * time.Millisecond)
	for p, st := range before {
		if got := stateOf(t, p); got != st {
			t.Errorf("%s moved: %+v, was %+v", p.name, got, st)
		}
	}
	if n := target.node.gate.refusals.Load() - refusalsBefore[target]; n < uint64(len(errs)) {
		t.Errorf("%s's gate counted %d refusals for %d forged RPCs", target.name, n, len(errs))
	}
}

func snapshotStates(t *testing.T, c *cluster) (map[*tpeer]raftState, map[*tpeer]uint64) {
	t.Helper()
	c.converge()
	// Configuration entries do not change the hash: wait for equal logs.
	eventually(t, 10*time.Second, func() error {
		var first raftState
		for i, p := range c.running() {
			st := stateOf(t, p)
			if i == 0 {
				first = st
			} else if st.lastIndex != first.lastIndex || st.term != first.term {
				return fmt.Errorf("%s at %d (term %d), %s at %d (term %d)", c.running()[0].name, first.lastIndex, first.term, p.name, st.lastIndex, st.term)
			}
		}
		return nil
	})
	st, ref := map[*tpeer]raftState{}, map[*tpeer]uint64{}
	for _, p := range c.running() {
		st[p] = stateOf(t, p)
		ref[p] = p.node.gate.refusals.Load()
	}
	return st, ref
}

// TestOnlyMembersReplicate: a host with the federation secret that never
// joined sends each peer forged Raft RPCs (entries that cancel a task and
// lower a limit in another organisation's name, votes and a snapshot with
// higher terms, a TimeoutNow), honestly named or claiming to be the
// leader. Every RPC is refused in the transport: no term, log or state
// moves on any peer. A member whose RPC header names another member is
// refused too.
func TestOnlyMembersReplicate(t *testing.T) {
	c := newCluster(t, 3, 1, nil)
	leader := c.waitLeader()
	var victim *tpeer
	for _, p := range c.peers {
		if p != leader {
			victim = p
			break
		}
	}
	task := submit(t, victim, 1)[0]
	outsider := startPeer(t, "outsider", c.psk, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range c.peers {
		if _, err := outsider.host.ConnectAddr(ctx, p.addr()); err != nil {
			t.Fatal(err)
		}
	}
	f := newForger(t, outsider.host)
	for _, target := range c.peers {
		for _, claimed := range []peer.ID{"", leader.node.ID()} {
			t.Run(fmt.Sprintf("%s claiming %q", target.name, shortID(claimed)), func(t *testing.T) {
				before, refusals := snapshotStates(t, c)
				checkRefused(t, f.attack(target, victim, task, claimed), c, before, refusals, target)
			})
		}
	}
	t.Run("member naming another", func(t *testing.T) {
		before, refusals := snapshotStates(t, c)
		mf := newForger(t, victim.host)
		checkRefused(t, mf.attack(leader, victim, task, c.peers[2].node.ID()), c, before, refusals, leader)
	})
	// The task is still queued and replication still works.
	victim.node.View(func(l *ledger.Ledger) {
		if tk, _ := l.Task(task); tk.State != ledger.TaskQueued {
			t.Errorf("task %s is %s", task, tk.State)
		}
	})
	submit(t, victim, 1)
	c.converge()
}

// TestRemovedPeerRefused: a peer removed from the configuration is refused
// by every remaining member from the moment the removal is in their logs,
// though it holds the secret, an open connection and a recent log.
func TestRemovedPeerRefused(t *testing.T) {
	c := newCluster(t, 4, 1, nil)
	leader := c.waitLeader()
	var removed, victim *tpeer
	for _, p := range c.peers {
		switch {
		case p == leader:
		case removed == nil:
			removed = p
		case victim == nil:
			victim = p
		}
	}
	task := submit(t, victim, 1)[0]
	c.converge()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Removing another member takes the votes of more than half of the
	// organisations: every other running peer votes until it is out.
	for _, p := range c.running() {
		if p == removed {
			continue
		}
		res, err := p.node.RemovePeer(ctx, removed.node.ID())
		if err != nil {
			t.Fatalf("vote by %s: %v", p.name, err)
		}
		if res.Removed {
			break
		}
	}
	eventually(t, 10*time.Second, func() error {
		ms, err := leader.node.Members()
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.ID == removed.node.ID() {
				return fmt.Errorf("%s is still in the configuration", removed.name)
			}
		}
		return nil
	})
	// The removed peer's Raft shuts down (ShutdownOnRemove); its host,
	// and its connections, stay.
	removedHost := removed.host
	removed.running = false
	defer func() { removed.node.Shutdown(); removedHost.Close() }()
	f := newForger(t, removedHost)
	for _, target := range c.running() {
		if _, err := removedHost.ConnectAddr(ctx, target.addr()); err != nil {
			t.Fatal(err)
		}
		t.Run(target.name, func(t *testing.T) {
			before, refusals := snapshotStates(t, c)
			checkRefused(t, f.attack(target, victim, task, ""), c, before, refusals, target)
		})
	}
}
