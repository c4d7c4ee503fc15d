package config

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.etcd.io/bbolt"
)

// Backups of a data directory (`peer snapshot save|restore`,
// docs/CONFIG.md "Backup and restore"): a gzip'd tar of a stopped peer's
// data directory, manifest first. The identity key is in it: whoever holds
// a backup can act as the peer, and a peer whose identity key is lost
// cannot be replaced by a new key (its peer ID is its name in Raft and in
// the ledger, and the key signs its organisation's commands).

// BackupManifestName is the first entry of a backup.
const BackupManifestName = "coopgrid-backup.json"

// backupVersion is the version of the backup format.
const backupVersion = 1

// BackupManifest describes a backup.
type BackupManifest struct {
	V         int    `json:"v"`
	Org       string `json:"org"`
	Peer      string `json:"peer"`
	CreatedMs int64  `json:"created_ms"`
}

// ErrPeerRunning: the data directory's Raft store is locked by a running
// peer.
var ErrPeerRunning = errors.New("the peer is running (raft.db is locked): stop it first, so that the backup is of one consistent state")

// backupSkipped are the top-level entries a backup leaves out: the
// executor's work directories, whose runs are over once the peer stopped
// (their outputs were delivered or are named in the ledger's reason).
var backupSkipped = map[string]bool{TasksDir: true}

// SaveBackup writes a backup of the stopped peer's data directory dir to w
// and returns its manifest. It holds raft.db's lock (shared) throughout,
// so a peer started meanwhile waits for it.
func SaveBackup(dir string, w io.Writer, now time.Time) (BackupManifest, error) {
	m, err := backupManifest(dir, now)
	if err != nil {
		return m, err
	}
	// A peer that never ran has no Raft store yet, and nothing to lock.
	if dbPath := filepath.Join(dir, RaftDir, "raft.db"); fileExists(dbPath) {
		db, err := bbolt.Open(dbPath, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
		if errors.Is(err, bbolt.ErrTimeout) {
			return m, fmt.Errorf("backup of %s: %w", dir, ErrPeerRunning)
		}
		if err != nil {
			return m, fmt.Errorf("backup of %s: open the Raft store: %w", dir, err)
		}
		defer db.Close()
	}

	bw, err := newBackupWriter(w, m, now)
	if err != nil {
		return m, err
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		if backupSkipped[rel] {
			return fs.SkipDir
		}
		return addToBackup(bw.tw, path, filepath.ToSlash(rel), d)
	})
	if err != nil {
		return m, fmt.Errorf("backup of %s: %w", dir, err)
	}
	return m, bw.close()
}

// backupManifest is the manifest of a backup of dir taken at now: the
// organisation and peer the data directory belongs to.
func backupManifest(dir string, now time.Time) (BackupManifest, error) {
	m := BackupManifest{V: backupVersion, CreatedMs: now.UnixMilli()}
	cfg, err := Load(filepath.Join(dir, ConfigFile))
	if err != nil {
		return m, fmt.Errorf("backup of %s: %w", dir, err)
	}
	m.Org = cfg.Org
	if m.Peer, err = identityPeer(dir); err != nil {
		return m, fmt.Errorf("backup of %s: %w", dir, err)
	}
	return m, nil
}

// backupWriter is a backup archive being written: gzip over tar, its
// manifest first (both backups, offline and online, share the format).
type backupWriter struct {
	gz *gzip.Writer
	tw *tar.Writer
}

func newBackupWriter(w io.Writer, m BackupManifest, now time.Time) (*backupWriter, error) {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	mb, _ := json.Marshal(m)
	if err := tw.WriteHeader(&tar.Header{Name: BackupManifestName, Mode: 0o600, Size: int64(len(mb)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if _, err := tw.Write(mb); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return &backupWriter{gz: gz, tw: tw}, nil
}

// close ends the archive.
func (b *backupWriter) close() error {
	if err := b.tw.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := b.gz.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// addToBackup writes one directory or regular file; anything else (a link,
// a socket) is refused: a data directory holds none outside tasks/.
func addToBackup(tw *tar.Writer, path, name string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	h := &tar.Header{Name: name, Mode: int64(info.Mode().Perm()), ModTime: info.ModTime()}
	switch {
	case info.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(h)
	case info.Mode().IsRegular():
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
	default:
		return fmt.Errorf("%s: a %s, not a file or directory", name, info.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, h.Size); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// identityPeer is the peer ID of dir's identity key, which must exist.
func identityPeer(dir string) (string, error) {
	path := filepath.Join(dir, p2p.IdentityFile)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("identity key: %w", err)
	}
	k, err := p2p.LoadOrCreateIdentity(path)
	if err != nil {
		return "", err
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		return "", fmt.Errorf("identity %s: %w", path, err)
	}
	return id.String(), nil
}

// RestoreBackup unpacks a backup (SaveBackup) into dir, which must not
// exist or be empty. It unpacks beside dir first and moves the result into
// place only once every entry unpacked and the restored directory holds a
// configuration that loads and the identity the manifest names, so a bad
// backup leaves nothing behind.
func RestoreBackup(r io.Reader, dir string) (BackupManifest, error) {
	var m BackupManifest
	if es, err := os.ReadDir(dir); err == nil && len(es) > 0 {
		return m, fmt.Errorf("restore into %s: the directory is not empty (move it aside, or restore into a new one)", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("restore into %s: %w", dir, err)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return m, fmt.Errorf("restore into %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-")
	if err != nil {
		return m, fmt.Errorf("restore into %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	if m, err = unpackBackup(r, tmp); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	if _, err := Load(filepath.Join(tmp, ConfigFile)); err != nil {
		return m, fmt.Errorf("restore: the backup's configuration: %w", err)
	}
	id, err := identityPeer(tmp)
	if err != nil {
		return m, fmt.Errorf("restore: the backup's %w", err)
	}
	if id != m.Peer {
		return m, fmt.Errorf("restore: the backup's identity is peer %s, its manifest names %s", id, m.Peer)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("restore into %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return m, fmt.Errorf("restore into %s: %w", dir, err)
	}
	return m, nil
}

// unpackBackup reads the manifest, then every entry, into dir.
func unpackBackup(r io.Reader, dir string) (BackupManifest, error) {
	m, tr, err := readManifest(r)
	if err != nil {
		return m, err
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, fmt.Errorf("read the backup: %w", err)
		}
		if err := unpackEntry(tr, h, dir); err != nil {
			return m, err
		}
	}
}

// readManifest opens a backup and reads its manifest, its first entry
// (strictly: a field this peer does not know is an error, as is another
// version), leaving the archive at the next entry.
func readManifest(r io.Reader) (BackupManifest, *tar.Reader, error) {
	var m BackupManifest
	gz, err := gzip.NewReader(r)
	if err != nil {
		return m, nil, fmt.Errorf("not a backup (gzip): %w", err)
	}
	tr := tar.NewReader(gz)
	h, err := tr.Next()
	if err != nil || h.Name != BackupManifestName || h.Size > 1<<16 {
		return m, nil, fmt.Errorf("not a backup: the first entry is not %s", BackupManifestName)
	}
	dec := json.NewDecoder(tr)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, nil, fmt.Errorf("%s: %w", BackupManifestName, err)
	}
	if m.V != backupVersion {
		return m, nil, fmt.Errorf("%s: backup version %d, this peer reads version %d", BackupManifestName, m.V, backupVersion)
	}
	return m, tr, nil
}

func unpackEntry(tr *tar.Reader, h *tar.Header, dir string) error {
	name := strings.TrimSuffix(h.Name, "/")
	if !filepath.IsLocal(filepath.FromSlash(name)) {
		return fmt.Errorf("backup entry %q: not a path inside the data directory", h.Name)
	}
	path := filepath.Join(dir, filepath.FromSlash(name))
	mode := fs.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(path, mode|0o700)
	case tar.TypeReg:
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("backup entry %s: %w", name, err)
		}
		_, cerr := io.CopyN(f, tr, h.Size)
		if err := errors.Join(cerr, f.Sync(), f.Close()); err != nil {
			return fmt.Errorf("backup entry %s: %w", name, err)
		}
		return os.Chtimes(path, h.ModTime, h.ModTime)
	}
	return fmt.Errorf("backup entry %s: type %q, not a file or directory", name, h.Typeflag)
}
