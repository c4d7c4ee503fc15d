package consensus

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fakeLeader is a leader's log and commit for the pacer's gathering: it
// leads in term, its log holds entries 1..last.
type fakeLeader struct {
	term   uint64
	last   uint64
	commit atomic.Uint64
}

func (f *fakeLeader) log(term, from uint64, max int) []*raft.Log {
	if term != f.term {
		return nil
	}
	var out []*raft.Log
	for i := from; i <= f.last && len(out) < max; i++ {
		out = append(out, &raft.Log{Index: i, Term: f.term, Type: raft.LogCommand})
	}
	return out
}

func (f *fakeLeader) commitIn(term uint64) (uint64, bool) {
	return f.commit.Load(), term == f.term
}

func gatherPacer(f *fakeLeader, maxAppend int) *pacedTransport {
	p := newPacedTransport(noPipeline{}, 400*time.Millisecond, func() raft.Configuration { return configOf(1, 2) })
	p.leaderLog, p.leaderCommit, p.maxAppend = f.log, f.commitIn, maxAppend
	p.gatherWait.Store(int64(time.Hour)) // only the commit (or its absence) ends a wait here
	return p
}

func indexes(logs []*raft.Log) []uint64 {
	var out []uint64
	for _, l := range logs {
		out = append(out, l.Index)
	}
	return out
}

// TestGatherTakesTheLeadersNewerEntries: a request to a non-voter takes
// the entries the leader stored after the ones it carries, up to
// MaxAppendEntries in all, and goes with the commit of its last entry,
// never a higher one; a heartbeat, and a request of a term this peer does
// not lead, go as Raft built them.
func TestGatherTakesTheLeadersNewerEntries(t *testing.T) {
	for _, tc := range []struct {
		name        string
		req         raft.AppendEntriesRequest
		maxAppend   int
		wantEntries []uint64
		wantCommit  uint64
	}{
		{"woken empty request", raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 40, PrevLogTerm: 3, LeaderCommitIndex: 39}, 64, []uint64{41, 42, 43}, 43},
		{"entries and the newer ones", raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 40, PrevLogTerm: 3, LeaderCommitIndex: 39, Entries: []*raft.Log{{Index: 41, Term: 3}}}, 64, []uint64{41, 42, 43}, 43},
		{"up to MaxAppendEntries", raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 40, PrevLogTerm: 3, LeaderCommitIndex: 39, Entries: []*raft.Log{{Index: 41, Term: 3}}}, 2, []uint64{41, 42}, 42},
		{"heartbeat", raft.AppendEntriesRequest{Term: 3}, 64, nil, 0},
		{"another term", raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 40, PrevLogTerm: 2, LeaderCommitIndex: 39}, 64, nil, 39},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLeader{term: 3, last: 43}
			f.commit.Store(43)
			p := gatherPacer(f, tc.maxAppend)
			req := tc.req
			if p.gather("n0", &req) {
				p.refreshCommit(&req)
			}
			if got := indexes(req.Entries); fmt.Sprint(got) != fmt.Sprint(tc.wantEntries) {
				t.Errorf("entries %v, want %v", got, tc.wantEntries)
			}
			if req.LeaderCommitIndex != tc.wantCommit {
				t.Errorf("commit index %d, want %d", req.LeaderCommitIndex, tc.wantCommit)
			}
		})
	}
}

// TestGatherWaitsForTheCommit: a request with entries waits until the
// leader committed its last entry (announced by the leader's applied
// batch) and carries that commit; one holding a configuration entry goes
// at once (its receiver may be a voter the commit needs) and makes the
// pacer read the suffrage again.
func TestGatherWaitsForTheCommit(t *testing.T) {
	f := &fakeLeader{term: 3, last: 41}
	f.commit.Store(40)
	p := gatherPacer(f, 64)
	req := raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 40, PrevLogTerm: 3, LeaderCommitIndex: 40}
	done := make(chan bool)
	go func() { done <- p.gather("n0", &req) }()
	// Nothing but the commit ends the wait (gatherWait is an hour): an
	// announcement without it does not.
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.appliedWaited
	})
	p.announce()
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.appliedWaited
	})
	select {
	case <-done:
		t.Fatal("the request left before its entry was committed")
	default:
	}
	f.commit.Store(41)
	p.announce()
	if !<-done {
		t.Fatal("gather reported the request unchanged")
	}
	p.refreshCommit(&req)
	if got := indexes(req.Entries); fmt.Sprint(got) != "[41]" || req.LeaderCommitIndex != 41 {
		t.Fatalf("entries %v commit %d, want [41] with commit 41", got, req.LeaderCommitIndex)
	}

	// A configuration entry that makes the receiver a voter: no wait
	// though nothing is committed; any configuration entry makes the
	// pacer read the suffrage again.
	f.commit.Store(40)
	promoted := configOf(1, 2)
	promoted.Servers[1].Suffrage = raft.Voter // n0
	p.readSuffrage(time.Now())
	conf := raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 40, PrevLogTerm: 3, LeaderCommitIndex: 40,
		Entries: []*raft.Log{{Index: 41, Term: 3, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(promoted)}}}
	p.gather("n0", &conf)
	p.mu.Lock()
	reread := p.readAt.IsZero()
	p.mu.Unlock()
	if !reread {
		t.Fatal("a configuration entry did not make the pacer read the suffrage again")
	}
	// One that leaves it a non-voter waits for its commit like any other.
	other := raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 40, PrevLogTerm: 3, LeaderCommitIndex: 40,
		Entries: []*raft.Log{{Index: 41, Term: 3, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(configOf(1, 2))}}}
	done = make(chan bool)
	go func() { done <- p.gather("n0", &other) }()
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.appliedWaited
	})
	f.commit.Store(41)
	p.announce()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if !cond() {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

// TestNonVotersReceiveEntriesWithTheirCommit: in a running federation of
// one voter and two non-voters (libp2p on loopback), every request with
// entries the leader sends a non-voter carries the commit of its last
// entry, and the non-voters apply every proposal (including one forwarded
// by a non-voter, which waits for its own entry's apply).
func TestNonVotersReceiveEntriesWithTheirCommit(t *testing.T) {
	c := newCluster(t, 3, 1, func(cfg *Config) { cfg.MaxVoters = 1 })
	leader := c.waitLeader()
	nonVoters := 0
	for _, s := range leader.node.gate.configuration().Servers {
		if s.Suffrage != raft.Voter {
			nonVoters++
		}
	}
	if nonVoters != 2 {
		t.Fatalf("%d non-voters, want 2", nonVoters)
	}
	c.converge()
	p := leader.node.paced
	p.gatherWait.Store(int64(time.Hour)) // a request leaves without its commit only if gathering is broken
	gathered, ungathered := p.gathered.Load(), p.ungathered.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 4 {
		submit(t, c.peers[1+i%2], 1)
		idx := leader.node.AppliedIndex()
		for _, f := range c.peers {
			if err := f.node.WaitApplied(ctx, idx); err != nil {
				t.Fatalf("%s did not apply %d: %v", f.name, idx, err)
			}
		}
	}
	if !leader.node.IsLeader() {
		t.Skip("leadership moved (a loaded machine); the pacer under test is no longer the leader's")
	}
	if n := p.ungathered.Load() - ungathered; n != 0 {
		t.Fatalf("%d requests with entries went to non-voters without their commit", n)
	}
	if n := p.gathered.Load() - gathered; n < uint64(nonVoters) {
		t.Fatalf("%d requests with entries and their commit went to the non-voters, want at least %d", n, nonVoters)
	}
}
