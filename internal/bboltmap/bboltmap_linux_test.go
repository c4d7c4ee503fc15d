package bboltmap

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"
)

// TestReleaseKeepsTheData: reading a whole bbolt file maps its pages into
// the process; Release unmaps them (the resident size of the mapping falls
// to a few pages), and the values read after it are the same.
func TestReleaseKeepsTheData(t *testing.T) {
	dir := t.TempDir()
	path, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(path, "test.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bucket := []byte("b")
	value := func(i uint64) []byte { return bytes.Repeat(binary.BigEndian.AppendUint64(nil, i), 128) }
	const n = 8192 // 1 KiB values: 8 MiB
	if err := db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket(bucket)
		if err != nil {
			return err
		}
		for i := range uint64(n) {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, i), value(i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	readAll := func() {
		t.Helper()
		if err := db.View(func(tx *bbolt.Tx) error {
			i := uint64(0)
			return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
				if binary.BigEndian.Uint64(k) != i || !bytes.Equal(v, value(i)) {
					t.Fatalf("value %d differs", i)
				}
				i++
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
	}
	readAll()
	touched, err := MappedKiB(path)
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	if touched < 4096 {
		t.Fatalf("reading %d KiB left %d KiB mapped: the test measures nothing", n, touched)
	}
	if err := Release(db); err != nil {
		t.Fatal(err)
	}
	left, err := MappedKiB(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mapped: %d KiB after reading, %d KiB after the release", touched, left)
	if left > touched/8 {
		t.Fatalf("%d KiB still mapped after the release (%d before)", left, touched)
	}
	readAll()
}
