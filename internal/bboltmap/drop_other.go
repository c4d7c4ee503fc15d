//go:build !linux

package bboltmap

// dropMapping does nothing where madvise is not used.
func dropMapping(uintptr, int64) error { return nil }
