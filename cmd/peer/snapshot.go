package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
)

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a peer's data directory (stopped, or running: online), or restore one",
		Long: `Back up a peer's data directory to one file, or restore a data
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
	var f clientFlags
	var online bool
	cmd := &cobra.Command{
		Use:   "save FILE --data DIR",
		Short: "Write a backup of a peer's data directory to FILE",
		Long: `Write a backup of a peer's data directory to FILE (gzip'd tar, mode 0600):
the configuration, identity and federation keys, API token, Raft state,
history, checkpoint archives, run journal, blobs and outputs. The
executor's work directories (tasks/) are left out. FILE must not exist.

A stopped peer's directory is copied as it is (its Raft log included). A
running peer (its raft.db is locked) is backed up online through its API
(POST /v1/backup, with the API token of DIR or --token-file): it takes a
Raft snapshot of its state now and a consistent copy of its history, and
the backup holds that snapshot instead of the log. --online (or --api)
always asks the running peer.`,
		Example: `  peer snapshot save /backup/uni-a-2026-11-26.tar.gz --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.data == "" && f.apiURL == "" {
				return usageErr("--data is required (or set " + envData + ")")
			}
			if _, err := os.Stat(args[0]); err == nil {
				return fmt.Errorf("%s exists: choose another name", args[0])
			}
			how := "stopped peer"
			m, err := config.BackupManifest{}, error(nil)
			if !online && f.apiURL == "" {
				m, err = saveBackup(args[0], func(w io.Writer) (config.BackupManifest, error) {
					return config.SaveBackup(f.data, w, time.Now())
				})
			}
			if online || f.apiURL != "" || errors.Is(err, config.ErrPeerRunning) {
				how = "running peer, online"
				m, err = saveOnline(cmd.Context(), &f, args[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved %s (%s): organisation %s, peer %s (keep it safe: it holds the peer's identity key)\n", args[0], how, m.Org, m.Peer)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "", "the peer's data directory (required unless --api and --token-file)")
	fl.BoolVar(&online, "online", false, "back up the running peer through its API even if its directory looks stopped")
	fl.StringVar(&f.apiURL, "api", "", "the running peer's API address, HOST:PORT or URL (default: the api key of DATA/"+configFile+"); implies --online")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the API's bearer token (default DATA/"+api.TokenFile+")")
	return cmd
}

// saveOnline asks the running peer for an online backup (POST /v1/backup).
func saveOnline(ctx context.Context, f *clientFlags, out string) (config.BackupManifest, error) {
	c, err := f.connect()
	if err != nil {
		return config.BackupManifest{}, err
	}
	return saveBackup(out, func(w io.Writer) (config.BackupManifest, error) {
		if err := c.Backup(ctx, w); err != nil {
			return config.BackupManifest{}, c.fail("online backup", err)
		}
		return config.BackupManifest{}, nil
	})
}

// saveBackup writes the backup write produces to a temporary file beside
// out, checks it starts with a manifest, then links it to out: out never
// holds half a backup.
func saveBackup(out string, write func(io.Writer) (config.BackupManifest, error)) (config.BackupManifest, error) {
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
	_, err = write(f)
	if err = errors.Join(err, f.Sync()); err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err == nil {
		m, err = config.ReadBackupManifest(f)
	}
	if err = errors.Join(err, f.Close()); err != nil {
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
