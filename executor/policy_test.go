package executor

import (
	"os/user"
	"strings"
	"testing"
	"time"
)

func TestParseRunAs(t *testing.T) {
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	for _, c := range []struct {
		in       string
		uid, gid uint32
		err      string
	}{
		{"nobody", 65534, 65534, ""},
		{"65534", 65534, 65534, ""},
		{"1000:2000", 1000, 2000, ""},
		{"root", 0, 0, "unprivileged"},
		{"0", 0, 0, "unprivileged"},
		{"1000:0", 0, 0, "unprivileged"},
		{"no-such-user-xyz", 0, 0, "unknown user"},
		{"a:b", 0, 0, "must both be numbers"},
		{":5", 0, 0, "want a user name"},
		{"5:", 0, 0, "want a user name"},
	} {
		uid, gid, err := parseRunAs(c.in, false)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: got %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || uid != c.uid || gid != c.gid {
			t.Errorf("%q: got %d:%d %v, want %d:%d", c.in, uid, gid, err, c.uid, c.gid)
		}
	}
}

func TestPolicyWallClock(t *testing.T) {
	for _, c := range []struct{ pol, spec, want time.Duration }{
		{0, 0, 0},
		{0, time.Second, time.Second},
		{time.Minute, 0, time.Minute},
		{time.Minute, time.Second, time.Second},
		{time.Second, time.Minute, time.Second},
	} {
		if got := (Policy{MaxWallClock: c.pol}).wallClock(c.spec); got != c.want {
			t.Errorf("policy %v spec %v: %v, want %v", c.pol, c.spec, got, c.want)
		}
	}
}

func TestMatchOutput(t *testing.T) {
	for _, c := range []struct {
		pats []string
		rel  string
		want bool
	}{
		{[]string{"*.txt"}, "a.txt", true},
		{[]string{"*.txt"}, "d/a.txt", false}, // * does not cross a separator
		{[]string{"d"}, "d/e/a.bin", true},    // a directory collects what is under it
		{[]string{"d/*.bin"}, "d/a.bin", true},
		{[]string{"d/*.bin"}, "d/e/a.bin", false},
		{[]string{"out-?"}, "out-1/x", true},
		{nil, "a", false},
	} {
		if got := matchOutput(c.pats, c.rel); got != c.want {
			t.Errorf("%v ~ %s = %v, want %v", c.pats, c.rel, got, c.want)
		}
	}
}
