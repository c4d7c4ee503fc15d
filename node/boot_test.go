package node

import (
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/gossip"
)

// TestRestartWithClockBehindKeepsBootOrder: a peer restarted with its
// clock an hour behind still stamps a later boot than its previous run,
// so the other peers' replay guard accepts its heartbeats.
func TestRestartWithClockBehindKeepsBootOrder(t *testing.T) {
	tn := newTNode(t, "f-boot", "", simMachine("m1", 10, 100), testConfig("sim"))
	startFaulty(t, tn, 0)
	first := tn.n.boot
	tn.close()
	startFaulty(t, tn, -time.Hour)
	if tn.n.boot <= first {
		t.Fatalf("boot %d after a restart an hour behind, previous %d: heartbeats would be dropped as replays", tn.n.boot, first)
	}
	var guard gossip.ReplayGuard
	if !guard.Accept(tn.n.self, first, 7) || !guard.Accept(tn.n.self, tn.n.boot, 1) {
		t.Fatal("the replay guard refused the restarted peer's first heartbeat")
	}
}
