// Package checkpoint packs, stores, replicates and restores task
// checkpoints (issue 5), so that a preempted task resumes on another
// organisation's machine and a checkpoint survives the loss of the peer
// that took it.
//
// A checkpointable task writes its state under $CHECKPOINT_DIR (see
// docs/EXECUTOR.md). After the executor stops it, the daemon:
//
//  1. packs the directory into the peer's Store (Store.PackDir): a
//     deterministic gzip-compressed tar of regular files and directories,
//     named by the sha256 of its bytes ("sha256:<hex>", the form the
//     ledger's checkpoint hash accepts);
//  2. pushes it to other peers until the replication factor is met
//     (Service.Replicate over ProtocolID), and records the hash, size,
//     progress (ReadProgress) and holders in the log;
//  3. when the task is placed elsewhere, that machine's peer calls Restore:
//     fetch from the holders in order (Service.Fetch), verify, unpack into
//     the new $CHECKPOINT_DIR, or fail with a *RestoreError and leave the
//     directory untouched, so that the task restarts from an older
//     checkpoint or from zero, never from corrupted state;
//  4. garbage-collects archives of finished or cancelled tasks (Store.GC).
//
// # Trust
//
// Archives are input from other peers. Unpack hashes the whole file before
// extracting anything, refuses every entry that is not a regular file or a
// directory with a relative, canonical name (no "..", no absolute path, no
// links, no devices), enforces limits on the archive, each file, the
// total content, the decompressed stream and the number of entries,
// extracts into a temporary directory through an os.Root, and renames it
// into place only when complete. Store.Put applies the same checks to
// everything it receives, so a replica never keeps a bad archive.
//
// Errors caused by an archive's bytes are *ArchiveError and match
// ErrBadArchive with errors.Is, plus one kind (ErrHashMismatch, ErrCorrupt,
// ErrUnsafePath, ErrUnsupportedEntry, ErrTooLarge, ErrTooManyEntries).
//
// docs/CHECKPOINTS.md describes the format, the limits, the protocol and
// how the daemon integrates the package.
package checkpoint
