package node

import (
	"testing"
	"time"
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
	tr := newTracker()
	if !tr.accept(tn.n.self, first, 7) || !tr.accept(tn.n.self, tn.n.boot, 1) {
		t.Fatal("the replay guard refused the restarted peer's first heartbeat")
	}
}

// TestOwnerClockEstimate: the owner's clock is its last heartbeat's stamp
// plus the local time since it arrived, whatever this peer's clock says.
func TestOwnerClockEstimate(t *testing.T) {
	tr := newTracker()
	local := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	owner := local.Add(-time.Hour).UnixMilli() // the owner's clock is an hour behind
	tr.observe(&Heartbeat{Org: "o", AtMs: owner, Machines: []MachineTelemetry{{Name: "m"}}}, local)
	// A later heartbeat with an older stamp (its clock stepped back) is
	// the reference from then on, not the largest stamp.
	tr.observe(&Heartbeat{Org: "o", AtMs: owner - 500, Machines: []MachineTelemetry{{Name: "m"}}}, local.Add(time.Second))
	tr.mu.Lock()
	got, ok := tr.ownerClockMsLocked("o/m", local.Add(6*time.Second))
	_, unknown := tr.ownerClockMsLocked("o/other", local)
	tr.mu.Unlock()
	if !ok || got != owner-500+5000 {
		t.Fatalf("owner clock %d (%v), want %d", got, ok, owner+4500)
	}
	if unknown {
		t.Fatal("an estimate for a machine never heard of")
	}
}
