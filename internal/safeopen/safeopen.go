// Package safeopen opens a file under a directory without following any
// symbolic link, so that whoever can write the directory (a task, in its
// work directory) cannot redirect the open elsewhere, even between the
// moment the file was listed and the moment it is read.
package safeopen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular: the path names something other than a regular file with
// a single link.
var ErrNotRegular = errors.New("not a regular file")

// ErrOwner: the file is not owned by the user OpenOwned expects.
var ErrOwner = errors.New("not owned by the expected user")

// OwnerOfRoot, as OpenOwned's uid, expects the owner of root itself.
const OwnerOfRoot = -1

// anyOwner, as open's uid, checks no owner.
const anyOwner = -2

// OpenRegular opens root/rel for reading, refusing a symbolic link in any
// component of rel (and root itself being one), a path that leaves root,
// and anything but a regular file with one hard link (a hard link could be
// another file of the host the task could not read itself but the reader
// can). It uses openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), or, on a
// kernel without it, a walk of openat(O_NOFOLLOW) per component.
func OpenRegular(root, rel string) (*os.File, error) {
	return open(root, rel, anyOwner)
}

// OpenOwned is OpenRegular that also refuses a file not owned by uid, or,
// with OwnerOfRoot, by the owner of root (read from the same handle the
// file is opened under, so it cannot change in between). Whoever reads
// the file may hold privileges its writer lacks: a file the writer could
// not have made itself (given to root by a set-user-ID helper, or planted
// by another user) must not be read on its behalf.
func OpenOwned(root, rel string, uid int) (*os.File, error) {
	if uid < OwnerOfRoot {
		return nil, fmt.Errorf("open %s beneath %s: bad uid %d", rel, root, uid)
	}
	return open(root, rel, uid)
}

func open(root, rel string, uid int) (*os.File, error) {
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%q: not a local path", rel)
	}
	rel = filepath.Clean(rel)
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(dir)
	if uid == OwnerOfRoot {
		var st unix.Stat_t
		if err := unix.Fstat(dir, &st); err != nil {
			return nil, fmt.Errorf("stat %s: %w", root, err)
		}
		uid = int(st.Uid)
	}
	fd, err := openat2(dir, rel)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = walk(dir, rel)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s beneath %s: %w", rel, root, err)
	}
	if err := checkRegular(fd, uid); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s beneath %s: %w", rel, root, err)
	}
	// O_NONBLOCK kept a FIFO from blocking the open; a regular file does
	// not need it.
	_ = unix.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}

const fileFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

func openat2(dir int, rel string) (int, error) {
	return unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   fileFlags,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
}

// walk opens each directory of rel with O_NOFOLLOW, then the file.
func walk(dir int, rel string) (int, error) {
	parts := strings.Split(rel, string(filepath.Separator))
	cur, err := unix.Dup(dir)
	if err != nil {
		return -1, err
	}
	for _, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	defer unix.Close(cur)
	return unix.Openat(cur, parts[len(parts)-1], fileFlags, 0)
}

// checkRegular checks the open file: a regular file with one link, owned
// by uid unless uid is anyOwner.
func checkRegular(fd, uid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ErrNotRegular
	}
	if st.Nlink != 1 {
		return fmt.Errorf("%w: it has %d hard links", ErrNotRegular, st.Nlink)
	}
	if uid != anyOwner && int(st.Uid) != uid {
		return fmt.Errorf("%w: owned by uid %d, want uid %d", ErrOwner, st.Uid, uid)
	}
	return nil
}
