package consensus

import (
	"context"
	"errors"
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
