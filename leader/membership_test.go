package leader

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestRemovedPeerMachinesLostAtOnce: when the organisations vote a member
// out, the leader declares its machines lost at once and their tasks go
// back to the queue (and elsewhere), without waiting for a heartbeat
// timeout; its own heartbeats and commands can no longer bring them back.
// Before, a removed peer's machines stayed up and its tasks sat assigned.
func TestRemovedPeerMachinesLostAtOnce(t *testing.T) {
	c := newCluster(t, 3, 2, func(_ *consensus.Config, l *Config) { l.LostTimeout = time.Hour })
	c.waitLeader()
	victim := c.peers[2]
	submit(t, c.peers[0], 6)
	eventually(t, 20*time.Second, func() error {
		for _, m := range placement(c.peers[0]) {
			if strings.HasPrefix(m, victim.org+"/") {
				return nil
			}
		}
		return fmt.Errorf("no task on %s's machines yet", victim.org)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, p := range c.peers[:2] {
		if _, err := p.node.RemovePeer(ctx, victim.node.ID()); err != nil {
			t.Fatalf("%s votes: %v", p.name, err)
		}
	}
	start := time.Now()
	eventually(t, 5*time.Second, func() error {
		p := c.peers[0]
		for id, st := range machineStates(p) {
			if strings.HasPrefix(id, victim.org+"/") && st != ledger.MachineLost {
				return fmt.Errorf("machine %s is %s", id, st)
			}
		}
		for task, m := range placement(p) {
			if strings.HasPrefix(m, victim.org+"/") {
				return fmt.Errorf("task %s still on %s", task, m)
			}
		}
		return nil
	})
	t.Logf("machines lost and tasks re-queued %s after the deciding vote", time.Since(start).Round(10*time.Millisecond))
}
