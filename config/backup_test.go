package config

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// backupDir is an initialised data directory with a Raft store and files
// in every place a backup keeps or leaves out.
func backupDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := Init(context.Background(), InitOptions{DataDir: dir, Org: "uni-a", NewFederation: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, RaftDir), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(filepath.Join(dir, RaftDir, "raft.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("logs")); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for name, content := range map[string]string{
		"outputs/uni-a-1/out.txt":     "result",
		"blobs/ab":                    "input",
		"tasks/uni-a-1/attempt-1/log": "work",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tree maps every file under dir to its content and mode.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		out[rel] = info.Mode().Perm().String() + " " + string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBackupRoundTrip: a restored data directory holds every file of the
// saved one byte for byte and mode for mode (the identity key 0600), but
// the executor's work directories; the manifest names the organisation
// and the peer.
func TestBackupRoundTrip(t *testing.T) {
	dir := backupDir(t)
	var b bytes.Buffer
	m, err := SaveBackup(dir, &b, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := tree(t, dir)
	delete(want, filepath.Join("tasks", "uni-a-1", "attempt-1", "log"))
	if m.Org != "uni-a" || m.Peer == "" {
		t.Fatalf("manifest %+v", m)
	}
	into := filepath.Join(t.TempDir(), "restored")
	got, err := RestoreBackup(bytes.NewReader(b.Bytes()), into)
	if err != nil {
		t.Fatal(err)
	}
	if got != m {
		t.Fatalf("restored manifest %+v, saved %+v", got, m)
	}
	have := tree(t, into)
	for name, w := range want {
		if have[name] != w {
			t.Errorf("%s: restored %q, saved %q", name, have[name], w)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			t.Errorf("%s restored but not saved", name)
		}
	}
	if have["identity.key"][:10] != "-rw-------" {
		t.Errorf("identity key restored with mode %s", have["identity.key"][:10])
	}
}

// TestBackupRefusals: no backup of a running peer (raft.db locked); no
// restore over a data directory, of something that is not a backup, or of
// a backup with an entry outside the directory, and a refused restore
// leaves nothing behind.
func TestBackupRefusals(t *testing.T) {
	dir := backupDir(t)
	db, err := bbolt.Open(filepath.Join(dir, RaftDir, "raft.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := SaveBackup(dir, &b, time.Now()); !errors.Is(err, ErrPeerRunning) {
		t.Fatalf("backup of a running peer: %v, want ErrPeerRunning", err)
	}
	db.Close()
	b.Reset()
	if _, err := SaveBackup(dir, &b, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreBackup(bytes.NewReader(b.Bytes()), dir); err == nil {
		t.Fatal("restored over an existing data directory")
	}

	evil := func(name string) []byte {
		var out bytes.Buffer
		gz := gzip.NewWriter(&out)
		tw := tar.NewWriter(gz)
		man := []byte(`{"v":1,"org":"uni-a","peer":"12D3KooWx","created_ms":1}`)
		tw.WriteHeader(&tar.Header{Name: BackupManifestName, Mode: 0o600, Size: int64(len(man)), Typeflag: tar.TypeReg})
		tw.Write(man)
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: 1, Typeflag: tar.TypeReg})
		tw.Write([]byte("x"))
		tw.Close()
		gz.Close()
		return out.Bytes()
	}
	parent := t.TempDir()
	for name, data := range map[string][]byte{
		"not gzip":         []byte("hello"),
		"escapes":          evil("../outside"),
		"absolute":         evil("/etc/evil"),
		"no configuration": evil("blobs/x"),
	} {
		t.Run(name, func(t *testing.T) {
			into := filepath.Join(parent, "restored")
			if _, err := RestoreBackup(bytes.NewReader(data), into); err == nil {
				t.Fatal("restored")
			}
			es, _ := os.ReadDir(parent)
			if len(es) != 0 {
				t.Fatalf("a refused restore left %v behind", es[0].Name())
			}
		})
	}
}
