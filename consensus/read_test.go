package consensus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// TestConsistentReadsWriteNothing: once the leader's first barrier has
// passed, consistent reads on the leader and on followers append no entry
// to the log (a barrier per read cost every member a synced write), and a
// read still sees a command committed through another peer just before.
func TestConsistentReadsWriteNothing(t *testing.T) {
	c := newCluster(t, 3, 1, nil)
	leader := c.waitLeader()
	eventually(t, 10*time.Second, func() error {
		if !leader.node.term.isCaughtUp() {
			return errors.New("the leadership's barrier has not passed")
		}
		return nil
	})
	read := func(p *tpeer, fn func(*ledger.Ledger)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.node.ReadConsistent(ctx, fn); err != nil {
			t.Fatalf("consistent read on %s: %v", p.name, err)
		}
	}
	before := leader.node.Raft().LastIndex()
	for range 5 {
		for _, p := range c.peers {
			read(p, func(*ledger.Ledger) {})
		}
	}
	if after := leader.node.Raft().LastIndex(); after != before {
		t.Fatalf("15 consistent reads moved the leader's last index from %d to %d", before, after)
	}
	for i, p := range c.peers {
		ids := submit(t, p, 1)
		reader := c.peers[(i+1)%len(c.peers)]
		read(reader, func(l *ledger.Ledger) {
			if _, ok := l.Task(ids[0]); !ok {
				t.Errorf("%s: consistent read misses %s submitted on %s", reader.name, ids[0], p.name)
			}
		})
	}
	if after := leader.node.Raft().LastIndex(); after != before+3 {
		t.Fatalf("three submissions and their reads moved the leader's last index from %d to %d, want %d", before, after, before+3)
	}
}
