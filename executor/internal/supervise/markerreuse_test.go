package supervise

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReusedMarkerIsEmptiedOnlyOnceLocked: a run that reuses its
// machine's marker starts with it empty (the previous run's time is not
// its own), and a marker still held is neither taken nor emptied.
func TestReusedMarkerIsEmptiedOnlyOnceLocked(t *testing.T) {
	p := filepath.Join(t.TempDir(), "0.end")
	if err := os.WriteFile(p, []byte("12345\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := openEndMarker(p)
	if m == nil {
		t.Fatal("a free marker was not taken")
	}
	if at, ok := ReadEndMarker(p); ok {
		t.Fatalf("a reused marker still holds %d", at)
	}
	m.mark(67890, false)
	if other := openEndMarker(p); other != nil {
		other.close()
		t.Fatal("a marker still held was taken by another run")
	}
	if at, ok := ReadEndMarker(p); !ok || at != 67890 {
		t.Fatalf("the holder's time is %d (%v), want 67890", at, ok)
	}
	m.close()
	if next := openEndMarker(p); next == nil {
		t.Fatal("a released marker was not taken by the next run")
	} else {
		next.close()
	}
}

// TestMarkerFreeWhileACopyOfItsDescriptorLives: a task forked while a run
// ends holds a copy of that run's marker descriptor until its execve; the
// next run on the machine must still find the marker free.
func TestMarkerFreeWhileACopyOfItsDescriptorLives(t *testing.T) {
	p := filepath.Join(t.TempDir(), "0.end")
	m := openEndMarker(p)
	if m == nil {
		t.Fatal("marker not taken")
	}
	cp, err := unix.Dup(int(m.f.Fd())) // what a fork's child holds
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cp)
	m.close()
	next := openEndMarker(p)
	if next == nil {
		t.Fatal("the marker stayed locked by a copy of the ended run's descriptor")
	}
	next.close()
}

// TestKeptMarkerFiles: the supervisor keeps a marker's file open between
// its runs. The next run gets it locked and emptied; a marker asked for
// while its run holds it is refused as before (the lock is taken); a
// marker removed meanwhile is made again, so that its time lands where a
// boot reads it.
func TestKeptMarkerFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "0.end")
	var k markerFiles
	first := k.open(p)
	if first == nil {
		t.Fatal("no marker")
	}
	if k.open(p) != nil {
		t.Fatal("a marker its run holds was handed to another run")
	}
	first.mark(111, false)
	first.close()
	second := k.open(p)
	if second == nil || second.f != first.f {
		t.Fatalf("the marker's file was not kept for its next run")
	}
	if v, ok := readMarker(second.f); ok {
		t.Fatalf("the next run's marker holds %d, want it emptied", v)
	}
	if other := openEndMarker(p); other != nil {
		other.close()
		t.Fatal("a kept marker's run does not hold its lock")
	}
	second.mark(222, false)
	second.close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	third := k.open(p)
	if third == nil {
		t.Fatal("no marker after its file was removed")
	}
	third.mark(333, false)
	third.close()
	if v, ok := ReadEndMarker(p); !ok || v != 333 {
		t.Fatalf("the marker on disk holds %d (%v), want 333: the removed file was written", v, ok)
	}
}
