package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/config"
)

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a stopped peer's data directory, or restore one",
		Long: `Back up a stopped peer's data directory to one file, or restore a data
directory from such a file (docs/CONFIG.md, "Backup and restore").

The backup holds the identity key: keep it as safe as the key itself. A
peer's identity cannot be replaced: its peer ID is its name in Raft and in
the ledger, and the key signs its organisation's commands. Without the key
(and without a backup of it) the organisation cannot act through a new peer.`,
	}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotRestoreCmd())
	return cmd
}

func newSnapshotSaveCmd() *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "save FILE --data DIR",
		Short: "Write a backup of a stopped peer's data directory to FILE",
		Long: `Write a backup of a stopped peer's data directory to FILE (gzip'd tar, mode
0600): the configuration, identity and federation keys, API token, Raft log
and snapshots, checkpoint archives, run journal, blobs and outputs. The
executor's work directories (tasks/) are left out. The peer must be stopped:
a running peer holds raft.db's lock, and the backup must be one consistent
state. FILE must not exist.`,
		Example: `  peer snapshot save /backup/uni-a-2026-11-26.tar.gz --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return usageErr("--data is required (or set " + envData + ")")
			}
			m, err := saveBackup(data, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved %s: organisation %s, peer %s (keep it safe: it holds the peer's identity key)\n", args[0], m.Org, m.Peer)
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the stopped peer's data directory (required)")
	return cmd
}

// saveBackup writes the backup to a temporary file beside out, then
// renames it: out never holds half a backup.
func saveBackup(data, out string) (config.BackupManifest, error) {
	var m config.BackupManifest
	if _, err := os.Stat(out); err == nil {
		return m, fmt.Errorf("%s exists: choose another name", out)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return m, err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return m, err
	}
	m, err = config.SaveBackup(data, f, time.Now())
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return m, err
	}
	if err := os.Link(f.Name(), out); err != nil {
		return m, fmt.Errorf("write %s: %w", out, err)
	}
	return m, nil
}

func newSnapshotRestoreCmd() *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "restore FILE --data DIR",
		Short: "Restore a data directory from a backup",
		Long: `Restore a data directory from a backup written by peer snapshot save. DIR
must not exist or be empty (move a damaged one aside first). The backup is
unpacked beside DIR and moved into place only once it is complete and its
configuration and identity check out. Then start the peer as usual: it
catches up with the federation from the state of the backup.

Restore a peer only as a replacement for its lost data directory, with the
rest of the federation running and holding a majority of the voters
without it: a voter restored to an older log has forgotten entries it had
acknowledged (docs/CONFIG.md, "Backup and restore").`,
		Example: `  peer snapshot restore /backup/uni-a-2026-11-26.tar.gz --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return usageErr("--data is required (or set " + envData + ")")
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := config.RestoreBackup(f, data)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s: organisation %s, peer %s, backed up %s\n", args[0], data, m.Org, m.Peer,
				time.UnixMilli(m.CreatedMs).UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the data directory to restore into (required; empty or absent)")
	return cmd
}
