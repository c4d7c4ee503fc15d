package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
)

// An online backup (a running peer's GET of POST /v1/backup; docs/CONFIG.md
// "Backup and restore") has the format of SaveBackup's, so RestoreBackup
// reads it. The running peer's Raft store and history store are not copied
// as files (they change under the copy): the peer stages a snapshot of its
// state in Raft's snapshot layout (raft/snapshots/…) and a consistent copy
// of its history (history.db), and SaveLiveBackup puts those in their
// place. The restored Raft store holds that snapshot and no log.

// LiveBackupStagePrefix names the staging directory a running peer makes in
// its data directory; a backup leaves such directories out.
const LiveBackupStagePrefix = ".backup-"

// liveSkipped are the top-level entries of a running peer's data
// directory an online backup does not copy as files.
var liveSkipped = map[string]bool{TasksDir: true, RaftDir: true, "history.db": true}

// SaveLiveBackup writes the backup of the running peer whose data
// directory is dir to w: its files, except the executor's work
// directories and the Raft and history stores, whose consistent copies
// are taken from staged (a directory holding raft/ and history.db). A
// file that disappears during the copy (a blob or an output removed) is
// left out.
func SaveLiveBackup(dir, staged string, w io.Writer, now time.Time) (BackupManifest, error) {
	m, err := backupManifest(dir, now)
	if err != nil {
		return m, err
	}
	bw, err := newBackupWriter(w, m, now)
	if err != nil {
		return m, err
	}
	tw := bw.tw
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		if liveSkipped[rel] || strings.HasPrefix(rel, LiveBackupStagePrefix) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		err = addToBackup(tw, path, filepath.ToSlash(rel), d)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	if err != nil {
		return m, fmt.Errorf("backup of %s: %w", dir, err)
	}
	err = filepath.WalkDir(staged, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(staged, path)
		if err != nil || rel == "." {
			return err
		}
		return addToBackup(tw, path, filepath.ToSlash(rel), d)
	})
	if err != nil {
		return m, fmt.Errorf("backup of %s: the staged stores: %w", dir, err)
	}
	return m, bw.close()
}

// ReadBackupManifest reads the manifest at the start of a backup.
func ReadBackupManifest(r io.Reader) (BackupManifest, error) {
	m, _, err := readManifest(r)
	return m, err
}
