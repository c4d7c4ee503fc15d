package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/gossip"
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
	var guard gossip.ReplayGuard
	if !guard.Accept(tn.n.self, first, 7) || !guard.Accept(tn.n.self, tn.n.boot, 1) {
		t.Fatal("the replay guard refused the restarted peer's first heartbeat")
	}
}
