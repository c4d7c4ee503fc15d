package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFromMakefile: `make build` stamps the binary with the
// checkout's `git describe` and revision (-ldflags), and `peer version`
// and `peer --version` name them.
func TestVersionFromMakefile(t *testing.T) {
	skipShort(t)
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: cannot build the binary the way `make build` does", tool)
		}
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("git %s: %v (not a git checkout?)", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	rev := git("rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "peer")
	build := exec.Command("make", "-s", "build", "BIN="+bin)
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	// Read after the build: the work tree cannot change in between.
	describe := git("describe", "--tags", "--always", "--dirty")

	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("peer version --json: %v", err)
	}
	var b struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		GoVersion string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	if b.Version != describe || b.Commit != rev || b.GoVersion == "" {
		t.Fatalf("peer version --json = %+v, want version %q commit %q", b, describe, rev)
	}
	line, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("peer --version: %v", err)
	}
	if want := "peer " + describe + " (commit " + rev[:12]; !strings.HasPrefix(string(line), want) || strings.Contains(string(line), " dev") {
		t.Fatalf("peer --version = %q, want it to start %q", line, want)
	}
}
