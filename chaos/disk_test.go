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
)

// faultDiskFull moves one peer's data directory onto a size-limited tmpfs
// (a clean stop, a copy, a restart), fills that file system while the
// workload runs, holds, frees the space, restarts the peer if it exited,
// and waits until it has caught up.
const faultDiskFull = "disk-full"

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

// diskFull runs the faultDiskFull fault on a peer drawn from the seed
// (the leader or a follower).
func (c *cluster) diskFull(f fault, rng *rand.Rand, h *history, leader *peer, hold time.Duration) {
	t := c.t
	t.Helper()
	victim := c.peers[rng.Intn(len(c.peers))]
	role := "follower"
	if victim == leader {
		role = "leader"
	}
	t.Logf("%s: %s on %s (%s) for %v", stamp(), f.kind, victim.name, role, hold)
	if !onOwnFS(victim.data) {
		from := h.now()
		c.onTmpfs(victim)
		c.waitCaughtUp(victim, h, from)
		c.waitFormed()
	}

	filler := filepath.Join(victim.data, "chaos-fill")
	n, err := fill(filler)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s's file system full (%d KiB written)", stamp(), victim.name, n>>10)
	time.Sleep(hold)
	exited := victim.proc.Exited()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	from := h.now()
	if exited {
		t.Logf("%s: space freed; %s had exited (%v), restarting it", stamp(), victim.name, victim.proc.Err())
		c.start(victim)
	} else {
		t.Logf("%s: space freed; %s still runs", stamp(), victim.name)
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
