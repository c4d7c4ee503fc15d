package supervise

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock hides a directory (the peer's data directory) from the task,
// except the directories it is given (its attempt and checkpoint
// directories): the sandbox of a peer that cannot switch users. It is
// applied to the supervisor's forking thread just before the fork, and
// the task inherits it; it cannot be lifted.
type Landlock struct {
	Hide  string   `json:"hide"`
	Allow []string `json:"allow"`
}

// LandlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func LandlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

const fileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE

// handledRights are the file system rights the ruleset governs at abi.
func handledRights(abi int) (all, file uint64) {
	all = fileRights | unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	file = fileRights
	if abi >= 2 {
		all |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		all |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
		file |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	return all, file
}

// RestrictThread applies l to the calling thread, which must be locked to
// its goroutine (runtime.LockOSThread), never unlocked (the thread then
// ends with its goroutine), and have no_new_privs set: what it forks
// inherits the sandbox (the peer starts the output copier so).
func (l *Landlock) RestrictThread() error { return l.apply() }

// apply restricts the calling thread: everything but l.Hide keeps every
// right (each entry beside each directory on the way from / to l.Hide is
// granted), listing directories stays allowed everywhere, and under
// l.Hide only l.Allow is reachable. Symbolic links met on the way are not
// granted: what they point to is, by its own path.
func (l *Landlock) apply() error {
	abi := LandlockABI()
	if abi < 1 {
		return errors.New("landlock is not available")
	}
	all, file := handledRights(abi)
	attr := unix.LandlockRulesetAttr{Access_fs: all}
	if abi >= 6 {
		// Nor may the task signal the peer or reach its abstract sockets.
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	size := unsafe.Sizeof(attr)
	if abi < 6 {
		size = unsafe.Offsetof(attr.Scoped)
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer unix.Close(int(fd))
	hide := filepath.Clean(l.Hide)
	if !filepath.IsAbs(hide) || hide == "/" {
		return fmt.Errorf("landlock: cannot hide %q", l.Hide)
	}
	if err := addRule(int(fd), "/", unix.LANDLOCK_ACCESS_FS_READ_DIR, file); err != nil {
		return err
	}
	for p := hide; p != "/"; p = filepath.Dir(p) {
		parent := filepath.Dir(p)
		ents, err := os.ReadDir(parent)
		if err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
		for _, ent := range ents {
			if ent.Name() == filepath.Base(p) || ent.Type()&os.ModeSymlink != 0 {
				continue
			}
			// One that became a link since it was listed is skipped, as
			// the links listed are.
			if err := addRule(int(fd), filepath.Join(parent, ent.Name()), all, file); err != nil && !errors.Is(err, errSymlink) {
				return err
			}
		}
	}
	for _, a := range l.Allow {
		if err := addRule(int(fd), a, all, file); err != nil {
			return err
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}

// errSymlink: a path to grant is a symbolic link.
var errSymlink = errors.New("a symbolic link, not granted")

// addRule grants rights beneath path (file rights only, for a file).
func addRule(ruleset int, path string, rights, file uint64) error {
	// Not followed: a directory the task could replace with a link (the
	// output copier's work directory) must not grant the link's target.
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
			return nil // gone, or not ours to grant
		}
		return fmt.Errorf("landlock: %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("landlock: %s: %w", path, errSymlink)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= file
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd2(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0); e != 0 {
		return fmt.Errorf("landlock_add_rule %s: %w", path, e)
	}
	return nil
}

func fd2(fd int) uintptr { return uintptr(fd) }
