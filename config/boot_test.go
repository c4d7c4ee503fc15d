package config

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
			got := NextBoot(dir, now, quietLogger())
			if got != tc.want {
				t.Fatalf("NextBoot = %d, want %d", got, tc.want)
			}
			b, err := os.ReadFile(filepath.Join(dir, BootFile))
			if err != nil || strings.TrimSpace(string(b)) != strconv.FormatInt(tc.want, 10) {
				t.Fatalf("recorded %q (%v), want %d", b, err, tc.want)
			}
		})
	}
	// A directory it cannot write: the stamp is still given.
	if got := NextBoot(filepath.Join(t.TempDir(), "missing"), now, quietLogger()); got != now {
		t.Fatalf("unwritable: %d", got)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
