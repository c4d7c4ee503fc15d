package main

import (
	"strings"
	"testing"
)

// The bad input of peer retention: usage errors exit 2 and say why,
// before anything is sent.
func TestRetentionBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"none with a rule", []string{"retention", "--none", "--after", "1h", "--data", dir}, "--none votes for no rule"},
		{"a zero rule", []string{"retention", "--after", "0s", "--data", dir}, "say --none"},
		{"a negative count", []string{"retention", "--keep", "-1", "--data", dir}, "want 0 to"},
		{"a negative time", []string{"retention", "--after", "-1h", "--data", dir}, "want 0 to"},
		{"an argument", []string{"retention", "1h", "--data", dir}, "unknown command"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCLI(t, c.args...)
			if code != 2 || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d (want 2)\nstdout: %s\nstderr: %s\nwant %q", code, out, errs, c.want)
			}
		})
	}
}
