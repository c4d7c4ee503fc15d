package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNextBoot: the boot stamp is the clock, unless the clock is behind
// the recorded one; it is recorded; a damaged record is ignored.
func TestNextBoot(t *testing.T) {
	const now = 1_795_000_000_000
	tests := []struct {
		name     string
		recorded string // "" for no file
		want     int64
	}{
		{name: "first start", want: now},
		{name: "clock ahead of the last start", recorded: "1794000000000\n", want: now},
		{name: "clock behind the last start (stepped back)", recorded: strconv.Itoa(now+3_600_000) + "\n", want: now + 3_600_001},
		{name: "clock equal to the last start", recorded: strconv.Itoa(now), want: now + 1},
		{name: "damaged record", recorded: "yesterday", want: now},
		{name: "negative record", recorded: "-5", want: now},
		{name: "record past the ledger's time range", recorded: strconv.FormatInt(1<<50, 10), want: now},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.recorded != "" {
				if err := os.WriteFile(filepath.Join(dir, BootFile), []byte(tc.recorded), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got := nextBoot(dir, now, testLogger("boot"))
			if got != tc.want {
				t.Fatalf("nextBoot = %d, want %d", got, tc.want)
			}
			b, err := os.ReadFile(filepath.Join(dir, BootFile))
			if err != nil || strings.TrimSpace(string(b)) != strconv.FormatInt(tc.want, 10) {
				t.Fatalf("recorded %q (%v), want %d", b, err, tc.want)
			}
		})
	}
	// A directory it cannot write: the stamp is still given.
	if got := nextBoot(filepath.Join(t.TempDir(), "missing"), now, testLogger("boot")); got != now {
		t.Fatalf("unwritable: %d", got)
	}
}

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
