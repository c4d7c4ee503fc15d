package consensus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestNewerCommandHaltsReplicas: an entry of a command version above this
// build's, committed by a (newer) leader, stops every replica of this
// build at the entry before it: the state and applied index stay those
// before it, later entries are not applied (not skipped either), no
// snapshot is taken, waits for later indexes fail with CodeHalted and a
// message that says to upgrade; a restart replays to the same halt.
func TestNewerCommandHaltsReplicas(t *testing.T) {
	c := newCluster(t, 3, 1, nil)
	leader := c.waitLeader()
	submit(t, leader, 2)
	hash := c.converge()
	_, before := leader.node.Hash()

	newer := ledger.MaxCommandVersion() + 1
	entry := `{"v":` + strconv.Itoa(newer) + `,"org":"` + leader.org + `","peer":"` + leader.node.ID().String() +
		`","at_ms":1,"set_limit":{"limit_mw":1},"retention_of_the_future":{"days":30}}`
	// What a newer leader does: append without this build's admission.
	if err := leader.node.Raft().Apply([]byte(entry), 10*time.Second).Error(); err != nil {
		t.Fatalf("append: %v", err)
	}
	// A valid entry behind it must not be applied either.
	after := command(leader, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 1_000_000_000}})
	if err := leader.node.Raft().Apply(after, 10*time.Second).Error(); err != nil {
		t.Fatalf("append: %v", err)
	}
	for _, p := range c.peers {
		eventually(t, 20*time.Second, func() error {
			if p.node.Halted() == nil {
				return errors.New(p.name + " has not halted")
			}
			return nil
		})
		err := p.node.Halted()
		for _, want := range []string{"command version " + strconv.Itoa(newer), "upgrade"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: halt error %q does not say %q", p.name, err, want)
			}
		}
		if h, at := p.node.Hash(); h != hash || at != before {
			t.Errorf("%s: at %d %.12s after the halt, want the state before the entry (%d %.12s)", p.name, at, h, before, hash)
		}
		if err := p.node.Snapshot(); err == nil {
			t.Errorf("%s: a halted replica took a snapshot", p.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		werr := p.node.WaitApplied(ctx, before+2)
		cancel()
		if p2p.Code(werr) != CodeHalted {
			t.Errorf("%s: wait for a later index: %v, want %s", p.name, werr, CodeHalted)
		}
	}
	// A restart replays the log and stops at the same entry again.
	p := c.peers[1]
	p.restart()
	eventually(t, 20*time.Second, func() error {
		if p.node.Halted() == nil {
			return errors.New("not halted after the restart")
		}
		return nil
	})
	if h, at := p.node.Hash(); h != hash || at != before {
		t.Errorf("after a restart: at %d %.12s, want %d %.12s", at, h, before, hash)
	}
}

// TestLateJoinerOfAnOlderBuildHalts (issue 17, item 4): a peer of this
// build that comes to the log late, after an entry of a newer command
// version was committed by (newer) members, replays that entry as a fresh
// replica — from the log's start, or after installing a snapshot taken
// before it — and stops there: the state and applied index before the
// entry (the same as the members'), the entry behind it not applied
// either, waits for a later index failing with CodeHalted, and a halt
// error that says to upgrade. It never skips the entry.
//
// The members here are of this build too, so they halt as well; a halted
// leader still replicates its log, which is all a late joiner needs of a
// newer one. The joiner is made late by joining it (a non-voter, so the
// leader keeps its quorum), stopping it and emptying its Raft store: it
// comes back as a fresh replica the leader must bring up from nothing,
// after the first step of a join (asking a member whom to accept Raft
// from).
func TestLateJoinerOfAnOlderBuildHalts(t *testing.T) {
	for _, c := range []struct {
		name     string
		snapshot bool
	}{
		{"replays the log from the start", false},
		{"installs a snapshot, then replays", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newCluster(t, 1, 1, func(cfg *Config) {
				cfg.MaxVoters = 1
				// Compact the log at a snapshot, so that a joiner must
				// install it.
				cfg.TrailingLogs = 1
			})
			leader := cl.waitLeader()
			submit(t, leader, 2)
			p := cl.add()
			if res := cl.join(p, leader); res.Voter {
				t.Fatal("the joiner is a voter; want a non-voter")
			}
			cl.converge()
			p.stop()
			if err := os.RemoveAll(filepath.Join(p.dir, "raft")); err != nil {
				t.Fatal(err)
			}
			if c.snapshot {
				if err := leader.node.Snapshot(); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
			}
			newer := ledger.MaxCommandVersion() + 1
			entry := `{"v":` + strconv.Itoa(newer) + `,"org":"` + leader.org + `","peer":"` + leader.node.ID().String() +
				`","at_ms":1,"set_limit":{"limit_mw":1},"retention_of_the_future":{"days":30}}`
			if err := leader.node.Raft().Apply([]byte(entry), 10*time.Second).Error(); err != nil {
				t.Fatalf("append: %v", err)
			}
			after := command(leader, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 1_000_000_000}})
			if err := leader.node.Raft().Apply(after, 10*time.Second).Error(); err != nil {
				t.Fatalf("append: %v", err)
			}
			eventually(t, 20*time.Second, func() error {
				if leader.node.Halted() == nil {
					return errors.New("the leader has not halted")
				}
				return nil
			})
			hash, before := leader.node.Hash()

			// The fresh replica's join: what Join does before its request,
			// which a newer leader would then grant (this halted one
			// refuses to commit it, and already has the peer as a member).
			p.start()
			jctx, jcancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer jcancel()
			via, err := p.node.host.ConnectAddr(jctx, leader.addr())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.node.askMembers(jctx, via, true); err != nil {
				t.Fatalf("ask the members: %v", err)
			}
			eventually(t, 30*time.Second, func() error {
				if p.node.Halted() == nil {
					_, at := p.node.Hash()
					return fmt.Errorf("the late joiner has not halted (applied %d)", at)
				}
				return nil
			})
			if snaps, _ := os.ReadDir(filepath.Join(p.dir, "raft", "snapshots")); c.snapshot != (len(snaps) > 0) {
				t.Errorf("the late joiner holds %d snapshots; want one only when the leader compacted its log", len(snaps))
			}
			herr := p.node.Halted()
			for _, want := range []string{"command version " + strconv.Itoa(newer), "upgrade"} {
				if !strings.Contains(herr.Error(), want) {
					t.Errorf("halt error %q does not say %q", herr, want)
				}
			}
			if h, at := p.node.Hash(); h != hash || at != before {
				t.Errorf("the late joiner halted at %d %.12s, want the members' state before the entry (%d %.12s)", at, h, before, hash)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if werr := p.node.WaitApplied(ctx, before+2); p2p.Code(werr) != CodeHalted {
				t.Errorf("wait for a later index: %v, want %s", werr, CodeHalted)
			}
		})
	}
}
