package executor

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCaptureFilesOnlyForStreamsWritten: a stream's file is created with
// its first byte (issue 22): a task that writes nothing leaves neither,
// one that writes only to stderr leaves only that, with what it wrote.
func TestCaptureFilesOnlyForStreamsWritten(t *testing.T) {
	e := newProc(t, allowShell())
	for _, c := range []struct {
		id, script     string
		stdout, stderr string // "-": no file
	}{
		{"silent", "true", "-", "-"},
		{"stderr-only", "echo oops >&2", "-", "oops\n"},
		{"both", "echo out; echo err >&2", "out\n", "err\n"},
	} {
		t.Run(c.id, func(t *testing.T) {
			r := run(t, e, sh(c.id, c.script))
			if !r.OK() {
				t.Fatalf("%s %s", r.Reason, r.Detail)
			}
			for _, s := range []struct{ path, want string }{{r.StdoutPath, c.stdout}, {r.StderrPath, c.stderr}} {
				b, err := os.ReadFile(s.path)
				switch {
				case s.want == "-" && !os.IsNotExist(err):
					t.Errorf("%s exists (%v) for a stream never written", s.path, err)
				case s.want != "-" && (err != nil || string(b) != s.want):
					t.Errorf("%s: %q, %v; want %q", s.path, b, err, s.want)
				}
			}
		})
	}
}

// TestAttemptDirSearchableWhateverTheUmask: the attempt directory is
// 0711 (a run-as user must reach its work directory), also under a umask
// that strips those bits, when the executor must chmod it (with the
// usual 022 it need not).
func TestAttemptDirSearchableWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	e := newProc(t, allowShell())
	if !e.umaskStrips(0o711) {
		t.Fatalf("umask read as %#o, want 077", e.umask)
	}
	r := run(t, e, sh("u-1", "true"))
	fi, err := os.Stat(filepath.Dir(r.WorkDir))
	if err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("attempt directory %v (%v), want 0711", fi.Mode().Perm(), err)
	}
}
