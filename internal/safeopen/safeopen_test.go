package safeopen

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenRegular: links anywhere on the path, escapes, FIFOs and hard
// links are refused, with both openat2 and the O_NOFOLLOW walk.
func TestOpenRegular(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(secret, []byte("secret"), 0o600))
	must(os.MkdirAll(filepath.Join(root, "out"), 0o755))
	must(os.WriteFile(filepath.Join(root, "out", "ok.txt"), []byte("ok"), 0o644))
	must(os.Symlink(secret, filepath.Join(root, "link.txt")))
	must(os.Symlink("out", filepath.Join(root, "dirlink")))
	must(os.Symlink(filepath.Dir(secret), filepath.Join(root, "outside")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	must(os.WriteFile(filepath.Join(root, "a"), []byte("a"), 0o644))
	must(os.Link(filepath.Join(root, "a"), filepath.Join(root, "b")))
	for name, open := range map[string]func(int, string) (int, error){"openat2": openat2, "walk": walk} {
		t.Run(name, func(t *testing.T) {
			dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			must(err)
			defer unix.Close(dir)
			fd, err := open(dir, "out/ok.txt")
			if errors.Is(err, unix.ENOSYS) {
				t.Skip("openat2 is not available on this kernel (the walk is the fallback)")
			}
			must(err)
			unix.Close(fd)
			for _, bad := range []string{"link.txt", "dirlink/ok.txt", "outside/secret"} {
				if fd, err := open(dir, bad); err == nil {
					unix.Close(fd)
					t.Errorf("%s opened", bad)
				}
			}
		})
	}
	f, err := OpenRegular(root, "out/ok.txt")
	must(err)
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "ok" {
		t.Fatalf("read %q", b)
	}
	for _, bad := range []string{"link.txt", "dirlink/ok.txt", "outside/secret", "../x", "/etc/passwd", "fifo", "a", "out"} {
		if f, err := OpenRegular(root, bad); err == nil {
			f.Close()
			t.Errorf("OpenRegular(%q) succeeded", bad)
		}
	}
}

// TestOpenOwned: a file of another user is refused, against the owner of
// root and against a given uid; the owner's own file opens.
func TestOpenOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "mine"), []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "theirs"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	const other = 12345
	if err := os.Chown(filepath.Join(root, "theirs"), other, other); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []int{OwnerOfRoot, 0} {
		f, err := OpenOwned(root, "mine", uid)
		if err != nil {
			t.Fatalf("uid %d: mine: %v", uid, err)
		}
		f.Close()
		if f, err := OpenOwned(root, "theirs", uid); !errors.Is(err, ErrOwner) {
			if f != nil {
				f.Close()
			}
			t.Errorf("uid %d: theirs: %v, want ErrOwner", uid, err)
		}
	}
	f, err := OpenOwned(root, "theirs", other)
	if err != nil {
		t.Fatalf("theirs as its owner: %v", err)
	}
	f.Close()
	// OpenRegular checks no owner.
	if f, err := OpenRegular(root, "theirs"); err != nil {
		t.Errorf("OpenRegular: %v", err)
	} else {
		f.Close()
	}
}
