package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bad input of peer snapshot: usage errors exit 2, refusals exit 1 and
// say why, and nothing is written.
func TestSnapshotBadInput(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "exists.tar.gz")
	if err := os.WriteFile(existing, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	notBackup := filepath.Join(dir, "not-a-backup")
	if err := os.WriteFile(notBackup, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "config.yaml"), []byte("org: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"save without data", []string{"snapshot", "save", filepath.Join(dir, "b.tar.gz")}, 2, "--data is required"},
		{"save without file", []string{"snapshot", "save", "--data", full}, 2, "accepts 1 arg"},
		{"save over a file", []string{"snapshot", "save", existing, "--data", full}, 1, "exists: choose another name"},
		{"save of no data directory", []string{"snapshot", "save", filepath.Join(dir, "c.tar.gz"), "--data", t.TempDir()}, 1, "config.yaml"},
		{"restore without data", []string{"snapshot", "restore", existing}, 2, "--data is required"},
		{"restore over a data directory", []string{"snapshot", "restore", existing, "--data", full}, 1, "is not empty"},
		{"restore of something else", []string{"snapshot", "restore", notBackup, "--data", filepath.Join(dir, "new")}, 1, "not a backup"},
		{"restore of no file", []string{"snapshot", "restore", filepath.Join(dir, "missing"), "--data", filepath.Join(dir, "new")}, 1, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCLI(t, c.args...)
			if code != c.wantCode || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant %q", code, c.wantCode, out, errs, c.want)
			}
		})
	}
	for _, p := range []string{filepath.Join(dir, "b.tar.gz"), filepath.Join(dir, "c.tar.gz"), filepath.Join(dir, "new")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was written", p)
		}
	}
	if es, _ := os.ReadDir(dir); len(es) != 2 {
		t.Errorf("leftovers in %s: %d entries", dir, len(es))
	}
}
