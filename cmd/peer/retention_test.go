package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
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

// peer status shows the retention rule in force against a real single
// peer: the default of a new federation (config.yaml's 168h) at first; after the only organisation's vote (its majority)
// the rule voted, in the table and in --json.
func TestStatusShowsRetention(t *testing.T) {
	_, p := startPeer(t)

	if code, out, errs := runCLI(t, "status", "--data", p.DataDir); code != 0 || !strings.Contains(out, "retention   after 168h0m0s\n") {
		t.Fatalf("status before a vote: exit %d:\n%s%s", code, out, errs)
	}
	if code, out, errs := runCLI(t, "retention", "--keep", "50", "--after", "2h", "--data", p.DataDir); code != 0 {
		t.Fatalf("retention --keep 50: exit %d: %s %s", code, out, errs)
	}
	if code, out, errs := runCLI(t, "status", "--data", p.DataDir); code != 0 || !strings.Contains(out, "retention   after 2h0m0s, or beyond 50 finished tasks\n") {
		t.Fatalf("status after the vote: exit %d:\n%s%s", code, out, errs)
	}
	code, out, errs := runCLI(t, "status", "--json", "--data", p.DataDir)
	var st api.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Retention == nil || st.Retention.Keep != 50 || st.Retention.AfterMs != 2*3600*1000 || len(st.Retention.Votes) != 0 {
		t.Fatalf("status --json: exit %d: %s %s", code, out, errs)
	}
}
