package consensus

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// CopySnapshot takes a snapshot of the state now (or, with nothing applied
// since the last one, uses that one) and copies it into a new file
// snapshot store at dir, the layout of DataDir (dir/snapshots/… and an
// empty dir/raft.db): a data directory whose Raft store holds only it
// starts from that state. It is
// the Raft half of an online backup (node.Node.Backup); it returns the
// snapshot's index.
func (n *Node) CopySnapshot(dir string) (uint64, error) {
	if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return 0, fmt.Errorf("copy snapshot: %w", err)
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		return 0, fmt.Errorf("copy snapshot: no snapshot to copy (%v)", err)
	}
	meta, rc, err := n.snaps.Open(metas[0].ID)
	if err != nil {
		return 0, fmt.Errorf("copy snapshot %s: %w", metas[0].ID, err)
	}
	defer rc.Close()
	dst, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		return 0, fmt.Errorf("copy snapshot: %w", err)
	}
	sink, err := dst.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, n.paced)
	if err != nil {
		return 0, fmt.Errorf("copy snapshot: %w", err)
	}
	if _, err := io.Copy(sink, rc); err != nil {
		sink.Cancel()
		return 0, fmt.Errorf("copy snapshot %s: %w", meta.ID, err)
	}
	if err := sink.Close(); err != nil {
		return 0, fmt.Errorf("copy snapshot %s: %w", meta.ID, err)
	}
	// An empty Raft store beside it, as in a data directory: the log
	// starts after the snapshot.
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, RaftDBFile)})
	if err != nil {
		return 0, fmt.Errorf("copy snapshot: an empty Raft store: %w", err)
	}
	if err := store.Close(); err != nil {
		return 0, fmt.Errorf("copy snapshot: an empty Raft store: %w", err)
	}
	return meta.Index, nil
}
