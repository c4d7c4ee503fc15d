package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// TestVersionCommand: `peer version`, `peer --version` and `peer version
// --json` describe the same build; the line names the commit when one is
// known; a stray argument is a usage error.
func TestVersionCommand(t *testing.T) {
	want := buildInfo()
	exec := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errs := exec(args...)
		if code != 0 || out != "peer "+versionLine(want)+"\n" {
			t.Fatalf("peer %v: exit %d, stdout %q, stderr %q; want %q", args, code, out, errs, "peer "+versionLine(want))
		}
	}
	code, out, errs := exec("version", "--json")
	var got api.BuildInfo
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got != want {
		t.Fatalf("peer version --json: exit %d, %v, %+v (stderr %q), want %+v", code, err, got, errs, want)
	}
	if code, _, errs := exec("version", "extra"); code != 2 || !strings.Contains(errs, "usage") {
		t.Fatalf("peer version extra: exit %d, stderr %q", code, errs)
	}
}

func TestVersionLine(t *testing.T) {
	for _, tc := range []struct {
		b    api.BuildInfo
		want string
	}{
		{api.BuildInfo{Version: "dev", GoVersion: "go1.26.8", Platform: "linux/amd64"}, "dev, go1.26.8 linux/amd64"},
		{api.BuildInfo{Version: "v1.0.0", Commit: "4b85f05450eb8c8c6e12", GoVersion: "go1.26.8", Platform: "linux/amd64"}, "v1.0.0 (commit 4b85f05450eb), go1.26.8 linux/amd64"},
		{api.BuildInfo{Version: "v1.0.0", Commit: "abc", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"}, "v1.0.0 (commit abc, modified), go1.26.8 linux/arm64"},
	} {
		if got := versionLine(tc.b); got != tc.want {
			t.Errorf("versionLine(%+v) = %q, want %q", tc.b, got, tc.want)
		}
	}
}
