package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/history"
)

// Backup implements api.BackupBackend: an online backup of this running
// peer (POST /v1/backup, `peer snapshot save` on a running peer). It takes
// a Raft snapshot of the state now and a consistent copy of the history
// store, after the snapshot so that the copy covers every task the
// snapshot no longer holds, stages them in the data directory, and writes
// the archive to w (config.SaveLiveBackup). Nothing is written to w unless
// both copies were taken. One backup at a time (conflict).
func (n *Node) Backup(ctx context.Context, w io.Writer) error {
	if err := n.requireReady(); err != nil {
		return err
	}
	if !n.backupBusy.TryLock() {
		return api.Errorf(api.CodeConflict, "a backup of this peer is already being taken")
	}
	defer n.backupBusy.Unlock()
	staged, err := os.MkdirTemp(n.dir, config.LiveBackupStagePrefix)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(staged)
	idx, err := n.cons.CopySnapshot(filepath.Join(staged, config.RaftDir))
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := n.history.CopyTo(filepath.Join(staged, history.FileName)); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m, err := config.SaveLiveBackup(n.dir, staged, w, time.Now())
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	n.log.Info("backup taken", "index", idx, "org", m.Org)
	return nil
}
