package consensus

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// votingLog records what Config.OnVoting told one peer.
type votingLog struct {
	mu   sync.Mutex
	told []bool
}

func (l *votingLog) record(v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.told = append(l.told, v)
}

func (l *votingLog) get() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.told)
}

// TestOnVotingFollowsSuffrage: OnVoting is told once at start and again
// at each change of the peer's suffrage, never twice the same thing in a
// row. With two voters at most, the founder and the second peer are told
// they do not vote (before the bootstrap or the join, they are in no
// configuration), then that they do; the third, a non-voter, is told once
// that it does not. The peer's process sets its GOMAXPROCS
// from this (cmd/peer/procs.go).
func TestOnVotingFollowsSuffrage(t *testing.T) {
	var (
		mu   sync.Mutex
		logs []*votingLog
	)
	c := newCluster(t, 3, 1, func(cfg *Config) {
		cfg.MaxVoters = 2
		l := &votingLog{}
		mu.Lock()
		logs = append(logs, l) // one per peer, in the order they start
		mu.Unlock()
		cfg.OnVoting = l.record
	})
	c.converge()
	want := [][]bool{{false, true}, {false, true}, {false}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got [][]bool
		mu.Lock()
		for _, l := range logs {
			got = append(got, l.get())
		}
		mu.Unlock()
		ok := len(got) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = slices.Equal(got[i], want[i])
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("OnVoting told %v, want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOnLeadingFollowsLeadership: OnLeading tells each peer true when it
// becomes leader and false when it stops, alternating from true, so that
// what it was told last is whether it leads; a leadership transfer tells
// the old leader false and the new one true. The peer's process sets its
// GOMAXPROCS from this (cmd/peer/procs.go).
func TestOnLeadingFollowsLeadership(t *testing.T) {
	var (
		mu   sync.Mutex
		logs []*votingLog
	)
	c := newCluster(t, 3, 1, func(cfg *Config) {
		l := &votingLog{}
		mu.Lock()
		logs = append(logs, l) // one per peer, in the order of c.peers
		mu.Unlock()
		cfg.OnLeading = l.record
	})
	// told checks every peer's log against its present role: leader
	// leads, the others do not.
	told := func(leader *tpeer) error {
		mu.Lock()
		defer mu.Unlock()
		for i, p := range c.peers {
			got := logs[i].get()
			for k, v := range got {
				if v != (k%2 == 0) {
					return fmt.Errorf("%s told %v: not alternating from true", p.name, got)
				}
			}
			leads := p == leader
			if last := len(got) > 0 && got[len(got)-1]; last != leads {
				return fmt.Errorf("%s told %v, leads %v", p.name, got, leads)
			}
		}
		return nil
	}
	old := c.waitLeader()
	eventually(t, 20*time.Second, func() error { return told(old) })

	if err := old.node.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	eventually(t, 20*time.Second, func() error {
		next := c.waitLeader()
		if next == old {
			return fmt.Errorf("%s still leads", old.name)
		}
		return told(next)
	})
}
