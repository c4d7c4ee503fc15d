package config

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/ledger"
)

// BootFile records the boot stamp of this peer's latest start.
const BootFile = "boot"

// NextBoot returns the boot stamp of this start (Heartbeat.Boot, which
// orders one sender's heartbeats across its restarts in the other peers'
// replay guard): the wall clock in Unix ms, or one more than the stamp
// recorded at the previous start when the clock is behind it. A peer
// restarted with its clock stepped back would otherwise send heartbeats
// that every peer that saw the previous run drops as replays, until the
// clock caught up — and the leader would declare its machines lost, over
// and over, for as long as the step (the chaos harness's
// clock-back-restart found it). The stamp is recorded before it is
// used; if it cannot be (a full disk), the peer warns and goes on with
// it.
func NextBoot(dir string, nowMs int64, log *slog.Logger) int64 {
	path := filepath.Join(dir, BootFile)
	boot := nowMs
	last, err := readBoot(path)
	switch {
	case err != nil:
		log.Warn("boot stamp: ignoring the recorded one", "err", err)
	case last >= boot:
		log.Warn("the wall clock is behind this peer's previous start: heartbeats carry the previous boot stamp + 1", "clock_ms", nowMs, "previous_boot_ms", last)
		boot = last + 1
	}
	if err := writeFileAtomic(path, []byte(strconv.FormatInt(boot, 10)+"\n")); err != nil {
		log.Warn("boot stamp: not recorded; a restart with a clock behind this one may have its heartbeats dropped", "err", err)
	}
	return boot
}

// readBoot reads a recorded boot stamp; a missing file is 0.
func readBoot(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= ledger.MaxTimeMs {
		return 0, fmt.Errorf("%s: not a Unix ms time: %q", path, b)
	}
	return v, nil
}

// writeFileAtomic replaces path with b (mode 0600) through a synced
// temporary file and a rename: a crash leaves the old or the new content.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
