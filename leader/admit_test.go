package leader

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// TestAdmission: decisions proposed by anyone (forwarded, on a follower,
// on the leader's own API) and a declaration that another organisation's
// machine is lost forwarded to the leader are refused with
// consensus.CodeForbidden and never reach the log; a peer's own machine,
// and the leader's declarations, pass. (The decisions and machine-lost
// rows of consensus' TestProposeRules, moved with the rules.)
func TestAdmission(t *testing.T) {
	c := newCluster(t, 3, 2, func(_ *consensus.Config, l *Config) { l.DisableScheduler = true })
	leader := c.waitLeader()
	f := c.other(leader)
	other := c.other(leader, f)
	tasks := submit(t, f, 1)
	c.converge()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	decisions := func(p *tpeer) []byte {
		return command(p, ledger.Command{Decisions: &ledger.Decisions{Decisions: []ledger.Decision{{Kind: ledger.DecideAllocate, Task: tasks[0], Machine: f.org + "/m0"}}}})
	}
	othersMachineLost := command(f, ledger.Command{MachineLost: &ledger.MachineLostCmd{Machine: other.org + "/m0"}})
	tests := []struct {
		name string
		send func() error
	}{
		{"decisions forwarded to the leader", func() error {
			_, err := f.host.Request(ctx, leader.node.ID(), consensus.ProtoPropose, decisions(f))
			return err
		}},
		{"decisions from a follower", func() error {
			_, err := f.node.Propose(ctx, decisions(f))
			return err
		}},
		{"decisions on the leader's API", func() error {
			_, err := leader.node.Propose(ctx, decisions(leader))
			return err
		}},
		{"another organisation's machine declared lost", func() error {
			_, err := f.node.Propose(ctx, othersMachineLost)
			return err
		}},
		{"another organisation's machine declared lost, forwarded", func() error {
			_, err := f.host.Request(ctx, leader.node.ID(), consensus.ProtoPropose, othersMachineLost)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeIdx := leader.node.Hash()
			lastIdx := leader.node.Raft().LastIndex()
			err := tc.send()
			if got := p2p.Code(err); got != consensus.CodeForbidden {
				t.Fatalf("code %q (%v), want %q", got, err, consensus.CodeForbidden)
			}
			if after, afterIdx := leader.node.Hash(); after != before || afterIdx != beforeIdx {
				t.Fatal("a refused command changed the state")
			}
			if got := leader.node.Raft().LastIndex(); got != lastIdx {
				t.Fatalf("a refused command reached the log (last index %d, then %d)", lastIdx, got)
			}
		})
	}

	// A follower may declare its own machine lost, through the leader.
	if res := mustPropose(t, f, ledger.Command{MachineLost: &ledger.MachineLostCmd{Machine: f.org + "/m1"}}); !res.Applied() {
		t.Fatalf("own machine lost: %+v", res)
	}
	// The leader may declare another organisation's machine lost (its
	// lost-machine detection does).
	if res := mustPropose(t, leader, ledger.Command{MachineLost: &ledger.MachineLostCmd{Machine: other.org + "/m0"}}); !res.Applied() {
		t.Fatalf("the leader declaring %s/m0 lost: %+v", other.org, res)
	}
	c.converge()
}

func TestConfigValidation(t *testing.T) {
	good := DefaultConfig()
	good.Self = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
	if _, err := New(good, nil); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"unknown policy": func(c *Config) { c.Policy = "fifo" },
		"no self":        func(c *Config) { c.Self = "" },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := good
			mut(&cfg)
			if _, err := New(cfg, nil); err == nil {
				t.Fatal("New accepted a bad config")
			}
		})
	}
}
