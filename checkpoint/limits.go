package checkpoint

import "fmt"

// Limits bound one archive. Zero fields take the defaults of DefaultLimits;
// negative fields are an error.
type Limits struct {
	// MaxArchiveBytes bounds the compressed archive (default 1 GiB).
	MaxArchiveBytes int64
	// MaxFileBytes bounds one regular file, uncompressed (default 1 GiB).
	MaxFileBytes int64
	// MaxTotalBytes bounds the sum of the regular files, uncompressed
	// (default 4 GiB). It is also what stops a decompression bomb.
	MaxTotalBytes int64
	// MaxEntries bounds the number of files and directories (default 10,000).
	MaxEntries int
}

// Fixed bounds on names: what Linux itself accepts.
const (
	maxNameBytes      = 4096
	maxComponentBytes = 255
	// perEntryOverhead bounds the tar metadata of one entry in the
	// decompressed stream: a 512-byte header, a PAX header for a name of at
	// most maxNameBytes and the padding of the data.
	perEntryOverhead = 8 << 10
	// trailerBudget bounds the end-of-archive blocks and padding.
	trailerBudget = 1 << 20
)

// DefaultLimits returns the defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxArchiveBytes: 1 << 30,
		MaxFileBytes:    1 << 30,
		MaxTotalBytes:   4 << 30,
		MaxEntries:      10_000,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxArchiveBytes == 0 {
		l.MaxArchiveBytes = d.MaxArchiveBytes
	}
	if l.MaxFileBytes == 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxTotalBytes == 0 {
		l.MaxTotalBytes = d.MaxTotalBytes
	}
	if l.MaxEntries == 0 {
		l.MaxEntries = d.MaxEntries
	}
	return l
}

// validate reports negative limits, which are configuration mistakes.
func (l Limits) validate() error {
	if l.MaxArchiveBytes < 0 || l.MaxFileBytes < 0 || l.MaxTotalBytes < 0 || l.MaxEntries < 0 {
		return fmt.Errorf("checkpoint limits must not be negative: %+v", l)
	}
	return nil
}

// decompressedBudget bounds the whole decompressed tar stream: the file
// content plus the metadata of MaxEntries entries plus the trailer.
func (l Limits) decompressedBudget() int64 {
	return l.MaxTotalBytes + int64(l.MaxEntries+1)*perEntryOverhead + trailerBudget
}
