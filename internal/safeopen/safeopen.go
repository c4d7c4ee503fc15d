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

// OpenRegular opens root/rel for reading, refusing a symbolic link in any
// component of rel (and root itself being one), a path that leaves root,
// and anything but a regular file with one hard link (a hard link could be
// another file of the host the task could not read itself but the reader
// can). It uses openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), or, on a
// kernel without it, a walk of openat(O_NOFOLLOW) per component.
func OpenRegular(root, rel string) (*os.File, error) {
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%q: not a local path", rel)
	}
	rel = filepath.Clean(rel)
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(dir)
	fd, err := openat2(dir, rel)
	if errors.Is(err, unix.ENOSYS) {
		fd, err = walk(dir, rel)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s beneath %s: %w", rel, root, err)
	}
	if err := checkRegular(fd); err != nil {
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

func checkRegular(fd int) error {
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
	return nil
}
