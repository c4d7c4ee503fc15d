package main

import (
	"strings"
	"testing"
)

// TestHistoryCommand: bad flags are usage errors (exit 2) caught before
// anything is sent; a peer without a history store answers not_found
// (exit 1); paging flags reach the API.
func TestHistoryCommand(t *testing.T) {
	_, data := fixture(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"a state that is not terminal", []string{"history", "--state", "running"}, 2, `state "running": the history holds finished tasks only`},
		{"bad since", []string{"history", "--since", "last week"}, 2, `--since "last week": want RFC 3339`},
		{"reversed range", []string{"history", "--since", "2026-11-02", "--until", "2026-11-01"}, 2, "time range"},
		{"page too large", []string{"history", "--limit", "10001"}, 2, "limit 10001: want 1 to 10000"},
		{"bad organisation", []string{"history", "--org", "../x"}, 2, `org "../x": not an organisation name`},
		{"no history on this peer", []string{"history", "--all"}, 1, "history: not_found: this peer keeps no history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, append(tc.args, "--data", data)...)
			if code != tc.code || !strings.Contains(out+errs, tc.msg) {
				t.Fatalf("exit %d, out %q, err %q; want exit %d with %q", code, out, errs, tc.code, tc.msg)
			}
		})
	}
	if ms, err := timeFlag("until", "2026-11-26", true); err != nil || ms != 1795737599999 {
		t.Fatalf("--until a date: %d, %v; want the day's last millisecond", ms, err)
	}
}
