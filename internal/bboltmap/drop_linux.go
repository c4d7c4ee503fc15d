package bboltmap

import "syscall"

// dropMapping is madvise(MADV_DONTNEED) over size bytes of the map at
// addr: on a shared file mapping it only unmaps the pages from this
// process (the page cache keeps them, and the next read maps them again).
func dropMapping(addr uintptr, size int64) error {
	if addr == 0 || size <= 0 {
		return nil
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, addr, uintptr(size), syscall.MADV_DONTNEED); errno != 0 {
		return errno
	}
	return nil
}
