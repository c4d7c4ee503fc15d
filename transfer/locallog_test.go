package transfer

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadLocalLogOfAStreamNeverWritten: the executor creates a stream's
// file with its first byte (issue 22), so an attempt without one wrote
// nothing there: empty, not "not found"; a task that never ran here is
// still not found.
func TestReadLocalLogOfAStreamNeverWritten(t *testing.T) {
	dir := t.TempDir()
	s := &Service{dirs: Dirs{Tasks: dir}, limits: Limits{MaxLogBytes: 1 << 20}}
	att := filepath.Join(dir, "o-1", "attempt-1")
	if err := os.MkdirAll(att, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(att, "stderr"), []byte("oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		task, stream, want string
		found              bool
	}{
		{"o-1", "stderr", "oops\n", true},
		{"o-1", "stdout", "", true},
		{"o-2", "stdout", "", false},
	} {
		b, err := s.ReadLocalLog(c.task, c.stream)
		if c.found && (err != nil || string(b) != c.want) {
			t.Errorf("%s %s: %q, %v; want %q", c.task, c.stream, b, err, c.want)
		}
		if !c.found && err == nil {
			t.Errorf("%s %s: %q, want not found", c.task, c.stream, b)
		}
	}
}
