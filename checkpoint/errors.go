package checkpoint

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test them with errors.Is.
//
// Every error caused by the bytes of an archive (Unpack, Verify, Store.Put,
// a fetch) is an *ArchiveError: errors.Is(err, ErrBadArchive) holds, and so
// does errors.Is(err, <its kind>) for one of ErrHashMismatch, ErrCorrupt,
// ErrUnsafePath, ErrUnsupportedEntry, ErrTooLarge or ErrTooManyEntries. A
// caller that sees ErrBadArchive must not use the archive: it restarts the
// task from an older checkpoint or from zero.
var (
	// ErrBadArchive marks every rejection caused by an archive's content.
	ErrBadArchive = errors.New("bad checkpoint archive")
	// ErrHashMismatch: the bytes do not hash to the expected value.
	ErrHashMismatch = errors.New("hash mismatch")
	// ErrCorrupt: the gzip or tar stream is truncated, damaged, or has
	// trailing data.
	ErrCorrupt = errors.New("corrupt archive")
	// ErrUnsafePath: an entry name is absolute, contains "..", is not in
	// canonical form, or clashes with another entry.
	ErrUnsafePath = errors.New("unsafe entry name")
	// ErrUnsupportedEntry: a symbolic link, hard link, device, FIFO, socket
	// or any entry that is neither a regular file nor a directory.
	ErrUnsupportedEntry = errors.New("unsupported entry type")
	// ErrTooLarge: a file, the content, the decompressed stream or the
	// archive is over its limit. Pack returns it too (not as an
	// *ArchiveError) when a checkpoint directory is over the limits.
	ErrTooLarge = errors.New("over the size limit")
	// ErrTooManyEntries: more entries than Limits.MaxEntries.
	ErrTooManyEntries = errors.New("too many entries")

	// ErrBadHash: a string is not a hash of the form "sha256:<64 hex>".
	ErrBadHash = errors.New("malformed checkpoint hash")
	// ErrNotFound: the store holds no archive with that hash.
	ErrNotFound = errors.New("checkpoint archive not found")
	// ErrStoreFull: storing the archive would put the peer's store over
	// StoreConfig.MaxPeerBytes.
	ErrStoreFull = errors.New("checkpoint store full")
	// ErrTaskQuota: storing the archive would put one task's archives over
	// StoreConfig.MaxTaskBytes.
	ErrTaskQuota = errors.New("task checkpoint quota exceeded")
	// ErrUnavailable: no holder could deliver the archive.
	ErrUnavailable = errors.New("checkpoint archive unavailable")
	// ErrNotEnoughCopies: Replicate reached fewer copies than asked for.
	ErrNotEnoughCopies = errors.New("not enough checkpoint copies")
	// ErrForbidden: the authorisation hook refused a request.
	ErrForbidden = errors.New("forbidden")
)

// ArchiveError is a rejection caused by an archive's bytes. Kind is one of
// the kind sentinels above; errors.Is matches both Kind and ErrBadArchive.
type ArchiveError struct {
	Kind error
	// Msg says what was wrong, for example which entry.
	Msg string
}

func (e *ArchiveError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrBadArchive, e.Kind, e.Msg)
}

// Unwrap returns the kind.
func (e *ArchiveError) Unwrap() error { return e.Kind }

// Is reports ErrBadArchive as matching every ArchiveError.
func (e *ArchiveError) Is(target error) bool { return target == ErrBadArchive }

func badf(kind error, format string, args ...any) error {
	return &ArchiveError{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
