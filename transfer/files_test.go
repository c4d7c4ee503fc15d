package transfer

import (
	"os"
	"strings"
	"testing"
)

func TestOutputNamesAndPatterns(t *testing.T) {
	for name, ok := range map[string]bool{
		"out.txt": true, "a/b/c.txt": true, "../x": false, "/abs": false, "a/../b": false, "": false,
		".": false, "a//b": false, "a\\b": false, "x/.incoming-1": false, strings.Repeat("x", 256): false,
	} {
		if validOutputName(name) != ok {
			t.Errorf("validOutputName(%q) = %v", name, !ok)
		}
	}
	for _, tc := range []struct {
		pats []string
		rel  string
		want bool
	}{
		{[]string{"out"}, "out/a/b.txt", true},
		{[]string{"*.txt"}, "a.txt", true},
		{[]string{"*.txt"}, "d/a.txt", false},
		{[]string{"res-?.csv"}, "res-1.csv", true},
		{nil, "a.txt", false},
	} {
		if got := matchOutput(tc.pats, tc.rel); got != tc.want {
			t.Errorf("matchOutput(%v, %q) = %v", tc.pats, tc.rel, got)
		}
	}
}

func TestBlobStoreDetectsCorruption(t *testing.T) {
	s, err := newBlobStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.put([]byte("content"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.read(d, 100); err != nil || string(b) != "content" {
		t.Fatalf("read %q %v", b, err)
	}
	if _, err := s.read(d, 3); err == nil {
		t.Fatal("read past the limit")
	}
	if err := os.WriteFile(s.path(d), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.read(d, 100); err == nil || s.has(d) {
		t.Fatalf("a corrupted blob was served (%v) or kept", err)
	}
	if _, err := s.read("../../etc/passwd", 100); err == nil {
		t.Fatal("a path was read as a digest")
	}
}
