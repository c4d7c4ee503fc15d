package consensus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestRecoverAfterLosingTheMajority: five voters commit tasks; three die
// for good, and the two left cannot elect a leader. Recover on each
// survivor, stopped, with the list of survivors, then started again: they
// elect a leader between them, every task committed before is there, the
// configuration is the two survivors, and the federation commits again.
// Recover refuses a running peer, a list without the peer itself and an
// ID that was never a member, and leaves the data as it was.
func TestRecoverAfterLosingTheMajority(t *testing.T) {
	c := newCluster(t, 5, 1, func(cfg *Config) { cfg.DeadServerTimeout = time.Minute })
	leader := c.waitLeader()
	var committed []string
	for i := 0; i < 3; i++ {
		committed = append(committed, submit(t, c.peers[i], 2)...)
	}
	var survivors, dead []*tpeer
	for _, p := range c.peers {
		if p != leader && len(survivors) < 2 {
			survivors = append(survivors, p)
		} else {
			dead = append(dead, p)
		}
	}
	c.converge()
	// One survivor recovers from a snapshot and the log after it, the
	// other from its log alone.
	if err := survivors[0].node.Snapshot(); err != nil {
		t.Fatal(err)
	}
	committed = append(committed, submit(t, survivors[1], 2)...)
	hash := c.converge()
	ids := []peer.ID{survivors[0].node.ID(), survivors[1].node.ID()}

	raftDir := func(p *tpeer) string { return p.dir + "/raft" }
	if _, err := Recover(raftDir(survivors[0]), ids[0], ids, RecoverOptions{}); err == nil || !strings.Contains(err.Error(), "stop the peer first") {
		t.Fatalf("recover of a running peer: %v", err)
	}
	for _, p := range dead {
		p.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	if _, err := survivors[0].node.Propose(ctx, command(survivors[0], ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1}}}})); err == nil {
		t.Fatal("two of five voters committed")
	}
	cancel()
	for _, p := range survivors {
		p.stop()
	}

	stranger := startPeer(t, "stranger", c.psk, nil).node.ID()
	for _, bad := range []struct {
		name string
		list []peer.ID
		want string
	}{
		{"without itself", []peer.ID{ids[1]}, "not among the survivors"},
		{"a stranger", []peer.ID{ids[0], stranger}, "not a member"},
		{"twice", []peer.ID{ids[0], ids[0]}, "named twice"},
		{"nobody", nil, "name the surviving peers"},
	} {
		if _, err := Recover(raftDir(survivors[0]), ids[0], bad.list, RecoverOptions{}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("%s: %v, want %q", bad.name, err, bad.want)
		}
	}

	var index uint64
	for i, p := range survivors {
		dry, err := Recover(raftDir(p), ids[i], nil, RecoverOptions{DryRun: true})
		if err != nil || len(dry.Before) != 5 || dry.LastIndex == 0 {
			t.Fatalf("dry run on %s: %+v, %v", p.name, dry, err)
		}
		res, err := Recover(raftDir(p), ids[i], ids, RecoverOptions{Logger: testLogger(p.name)})
		if err != nil {
			t.Fatalf("recover %s: %v", p.name, err)
		}
		if len(res.Before) != 5 || len(res.After) != 2 || res.Hash != hash {
			t.Fatalf("recover %s: %d members before, %d after, hash %.12s (want 5, 2, %.12s)", p.name, len(res.Before), len(res.After), res.Hash, hash)
		}
		if res.LastIndex < dry.LastIndex {
			t.Fatalf("%s recovered at %d, its log reached %d", p.name, res.LastIndex, dry.LastIndex)
		}
		if i > 0 && res.LastIndex != index {
			t.Fatalf("survivors recovered at %d and %d", index, res.LastIndex)
		}
		index = res.LastIndex
	}
	for _, p := range survivors {
		p.start()
	}
	// The test's peers listen on new ports after a restart: tell one where
	// the other is now (a real peer listens where its config says).
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := survivors[1].host.ConnectAddr(ctx, survivors[0].addr()); err != nil {
		t.Fatal(err)
	}
	leader = c.waitLeader()
	for _, p := range survivors {
		ms, err := p.node.Members()
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 2 || !ms[0].Voter || !ms[1].Voter {
			t.Fatalf("%s's configuration after recovery: %+v", p.name, ms)
		}
	}
	after := submit(t, leader, 1)
	c.converge()
	for _, p := range survivors {
		p.node.View(func(l *ledger.Ledger) {
			for _, id := range append(committed, after...) {
				if _, ok := l.Task(id); !ok {
					t.Errorf("%s: task %s lost", p.name, id)
				}
			}
		})
	}
}
