package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coopgrid/coopgrid/internal/peerproc"
)

// The full-disk faults move every peer's data directory onto its own
// size-limited tmpfs (once per scenario: a clean stop, a copy, a
// restart, one peer at a time), then fill the leader's (or a follower's)
// file system while the workload runs, hold, free the space, restart the
// peer if it exited, and wait until it has caught up.
const (
	faultDiskFullLeader   = "disk-full-leader"
	faultDiskFullFollower = "disk-full-follower"
)

// tmpfsHeadroom is the free space the moved data directory starts with.
const tmpfsHeadroom = 32 << 20

// canMountTmpfs mounts and unmounts a small tmpfs: the full-disk fault
// needs root (or CAP_SYS_ADMIN) and mount(8).
func canMountTmpfs() error {
	dir, err := os.MkdirTemp("", "coopgrid-chaos-mountprobe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := mountTmpfs(dir, 1<<20); err != nil {
		return err
	}
	return umount(dir)
}

func mountTmpfs(dir string, bytes int64) error {
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk,mode=0700", (bytes+1023)/1024), "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount -t tmpfs %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func umount(dir string) error {
	// Lazy: a process still holding a file there does not keep the test
	// from cleaning up.
	out, err := exec.Command("umount", "-l", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// onOwnFS reports whether dir is a mount point (a previous disk-full
// fault moved it onto a tmpfs already).
func onOwnFS(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// fill writes path until the file system has no space left and returns
// how many bytes it wrote.
func fill(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for _, size := range []int{1 << 20, 4096, 1} {
		buf := bytes.Repeat([]byte{0xfa}, size)
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return n, fmt.Errorf("fill %s: %w", path, err)
			}
		}
	}
	return n, nil
}

// onTmpfs moves p's data directory onto a tmpfs of its current size plus
// tmpfsHeadroom: a clean stop, a copy, a mount over the same path, a
// restart. The tmpfs is unmounted when the test ends (after p stops).
func (c *cluster) onTmpfs(p *peer) {
	t := c.t
	t.Helper()
	if err := p.proc.Stop(30 * time.Second); err != nil {
		t.Logf("%s: stop before the move: %v", p.name, err)
	}
	used, err := dirBytes(p.data)
	if err != nil {
		t.Fatal(err)
	}
	old := p.data + ".disk"
	if err := os.Rename(p.data, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p.data, 0o700); err != nil {
		t.Fatal(err)
	}
	size := used + tmpfsHeadroom
	if err := mountTmpfs(p.data, size); err != nil {
		t.Fatal(err)
	}
	// Registered before the restart below, so it runs after that process
	// is stopped (cleanups run last-registered first).
	t.Cleanup(func() {
		if err := umount(p.data); err != nil {
			t.Logf("%v", err)
		}
	})
	if out, err := exec.Command("cp", "-a", old+"/.", p.data+"/").CombinedOutput(); err != nil {
		t.Fatalf("copy %s's data directory onto the tmpfs: %v: %s", p.name, err, out)
	}
	c.start(p)
	t.Logf("%s: %s's data directory (%d KiB) moved onto a %d KiB tmpfs and restarted", stamp(), p.name, used>>10, size>>10)
}

// diskFull runs a full-disk fault on the leader or on a follower drawn
// from the seed.
func (c *cluster) diskFull(f fault, rng *rand.Rand, h *history, hold time.Duration) {
	t := c.t
	for _, p := range c.peers {
		if !onOwnFS(p.data) {
			from := h.now()
			c.onTmpfs(p)
			c.waitCaughtUp(p, h, from)
			c.waitFormed()
		}
	}
	// The moves changed the leader.
	var leader *peer
	c.eventually(60*time.Second, "a leader after the moves", func(ctx context.Context) (bool, string) {
		leader = c.leader(ctx)
		return leader != nil, "no leader"
	})
	victim := leader
	if f.kind == faultDiskFullFollower {
		victim = c.randomFollower(rng, leader)
	}
	t.Logf("%s: %s: %s's file system filled for %v", stamp(), f.kind, victim.name, hold)

	filler := filepath.Join(victim.data, "chaos-fill")
	n, err := fill(filler)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s's file system full (%d KiB written)", stamp(), victim.name, n>>10)
	time.Sleep(hold)
	exited := victim.proc.Exited()
	enospc := strings.Count(peerproc.ReadFile(victim.proc.Stderr), "no space left on device")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	from := h.now()
	if exited {
		t.Logf("%s: space freed; %s had exited (%v) after %d \"no space left on device\" in its log; restarting it", stamp(), victim.name, victim.proc.Err(), enospc)
		c.start(victim)
	} else {
		t.Logf("%s: space freed; %s still runs, %d \"no space left on device\" in its log", stamp(), victim.name, enospc)
	}
	// Whether it stopped or not, it must catch up (and then agree on the
	// state hash in the final checks).
	c.waitCaughtUp(victim, h, from)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if s, err := victim.client.Status(ctx); err == nil {
		t.Logf("%s: %s at index %d after the full disk (%s)", stamp(), victim.name, s.Raft.AppliedIndex, s.Raft.State)
	}
}
