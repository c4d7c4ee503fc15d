package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Ref is a checkpoint reference as the ledger records it.
type Ref struct {
	// Task is the task's ID; the fetched archive is attributed to it.
	Task string
	// Hash names the archive.
	Hash string
	// Holders are the peer IDs holding a copy, as recorded (strings, as in
	// the ledger's CheckpointRef). Unparsable ones are skipped and logged.
	Holders []string
}

// Fetcher gets an archive into the local store from the peers holding it.
// *Service satisfies it.
type Fetcher interface {
	Fetch(ctx context.Context, task, hash string, holders []peer.ID) (string, error)
}

// RestoreError is what Restore returns. Err wraps the cause:
// errors.Is(err, ErrBadArchive) when the archive's bytes were refused
// (corrupt, hash mismatch, traversal, link, device, over a limit), and
// errors.Is(err, ErrUnavailable) when no holder could deliver it. Either
// way the destination was not touched, and the caller restarts the task
// from an older checkpoint or from zero.
type RestoreError struct {
	Task, Hash string
	Err        error
}

func (e *RestoreError) Error() string {
	return fmt.Sprintf("restore checkpoint %s of task %s: %v", e.Hash, e.Task, e.Err)
}

func (e *RestoreError) Unwrap() error { return e.Err }

// BadArchive reports whether the archive itself was refused.
func (e *RestoreError) BadArchive() bool { return errors.Is(e.Err, ErrBadArchive) }

// Restore puts the checkpoint ref into destDir, the task's new
// $CHECKPOINT_DIR: it fetches the archive if the store does not hold it
// (f may be nil to use only the local store), verifies its hash, and
// unpacks it (see Unpack: destDir is replaced only once the extraction is
// complete, and is left as it was on failure).
//
// If the local copy no longer has its hash (damaged on disk), it is
// deleted and the archive fetched again from the other holders, once.
//
// Every failure is logged (with the store's logger) and returned as *RestoreError; the task must then
// not be started from destDir's content as if restored.
func Restore(ctx context.Context, store *Store, f Fetcher, ref Ref, destDir string) error {
	log := store.log
	err := restore(ctx, store, f, ref, destDir, log)
	if err != nil {
		re := &RestoreError{Task: ref.Task, Hash: ref.Hash, Err: err}
		log.Warn("checkpoint: restore failed, the task must start from an older checkpoint or from zero",
			"task", ref.Task, "hash", ref.Hash, "dest", destDir, "bad_archive", re.BadArchive(), "err", err)
		return re
	}
	log.Info("checkpoint: restored", "task", ref.Task, "hash", ref.Hash, "dest", destDir)
	return nil
}

func restore(ctx context.Context, store *Store, f Fetcher, ref Ref, destDir string, log *slog.Logger) error {
	if err := checkHash(ref.Hash); err != nil {
		return err
	}
	holders := make([]peer.ID, 0, len(ref.Holders))
	for _, h := range ref.Holders {
		id, err := peer.Decode(h)
		if err != nil {
			log.Warn("checkpoint: skipping malformed holder", "task", ref.Task, "hash", ref.Hash, "holder", truncate(h, 80), "err", err)
			continue
		}
		holders = append(holders, id)
	}
	get := func() (string, error) {
		if store.Has(ref.Hash) {
			return store.Path(ref.Hash)
		}
		if f == nil {
			return "", fmt.Errorf("%w: not in the local store and no fetcher", ErrUnavailable)
		}
		return f.Fetch(ctx, ref.Task, ref.Hash, holders)
	}
	path, err := get()
	if err != nil {
		return err
	}
	err = Unpack(ctx, path, ref.Hash, destDir, store.Limits())
	if err == nil || !errors.Is(err, ErrHashMismatch) {
		return err
	}
	// The stored copy was damaged after it was verified: drop it and get
	// a good one from another holder.
	log.Warn("checkpoint: local copy damaged, fetching it again", "task", ref.Task, "hash", ref.Hash, "err", err)
	if derr := store.Delete(ref.Hash); derr != nil {
		return errors.Join(err, derr)
	}
	if path, err = get(); err != nil {
		return err
	}
	return Unpack(ctx, path, ref.Hash, destDir, store.Limits())
}
