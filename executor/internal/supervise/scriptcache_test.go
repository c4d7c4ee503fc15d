package supervise

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestScriptCacheRechecksAChangedFile: whether an executable is a #!
// script is remembered per version of the file, so a file replaced or
// rewritten since (even to the same size and modification time) is read
// again; a file that is no longer the one checked is never taken for a
// script (its /proc/PID/exe is then compared, and refused).
func TestScriptCacheRechecksAChangedFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tool")
	stat := func() os.FileInfo {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var c scriptCache
	mtime := time.Unix(1_700_000_000, 0)
	for _, step := range []struct {
		name, content string
		sameTimes     bool // set the modification time back to mtime
		want          bool
	}{
		{"a binary", "\x7fELF.....", true, false},
		{"rewritten in place as a script, same size and mtime", "#!/bin/sh", true, true},
		{"replaced by another binary", "\x7fELF--", false, false},
		{"replaced by a longer script", "#!/bin/sh\necho hi\n", false, true},
	} {
		// A later change time: the file system's clock is coarse.
		time.Sleep(10 * time.Millisecond)
		write(step.content)
		if step.sameTimes {
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		fi := stat()
		if got := c.isScript(p, fi); got != step.want {
			t.Errorf("%s: isScript %v, want %v", step.name, got, step.want)
		}
		if got := c.isScript(p, fi); got != step.want {
			t.Errorf("%s, from the cache: isScript %v, want %v", step.name, got, step.want)
		}
	}
	// Checked as one file, found another at the path: not a script.
	write("\x7fELF")
	checked := stat()
	time.Sleep(10 * time.Millisecond) // a later change time
	write("#!/bin/sh")
	if c.isScript(p, checked) {
		t.Error("a script put in place of the checked binary was taken for a script")
	}
}
