package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// previousRelease is the commit whose binary the rolling upgrade starts
// from: the last commit of the previous release (session 4's main, the
// last build without command versions). Move it forward when a release is
// cut, so that the test always upgrades from the release before.
const previousRelease = "2d59fe9e0e06f9629dec29a54345a793c1a2c665"

// buildRelease builds ./cmd/peer of commit from the repository's history
// (git archive into a temporary directory, then go build there) and
// returns the binary. It skips the test, saying why, when the history is
// not there (a source tarball, a shallow clone without the commit).
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("rolling upgrade: no git to build the previous release %.12s from history: %v", commit, err)
	}
	if out, err := exec.Command(git, "-C", repoRoot, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("rolling upgrade: the previous release %.12s is not in this checkout's git history (%v %s)", commit, err, strings.TrimSpace(string(out)))
	}
	src := filepath.Join(t.TempDir(), "release")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", `"$0" -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, git, repoRoot, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	bin := filepath.Join(src, "peer-release")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=release-"+commit[:12]+" -X main.commit="+commit, "-o", bin, "./cmd/peer")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the previous release %.12s: %v\n%s", commit, err, out)
	}
	return bin
}

// upgradeStatus is the part of GET /v1/status the upgrade reads: the
// command version is new in this build.
type upgradeStatus struct {
	Raft struct {
		CommandVersion int    `json:"command_version"`
		Halted         string `json:"halted"`
	} `json:"raft"`
	Build struct {
		Version string `json:"version"`
	} `json:"build"`
}

// TestRollingUpgrade: a federation of three organisations runs the
// previous release's binary; with tasks queued and running, each peer in
// turn is stopped and started again from its data directory with this
// build's binary (the leader among them). Throughout, the other peers
// keep scheduling; at the end every task submitted, before, during and
// after the upgrades, is done, none failed or lost, and every peer has
// the same applied index and state hash. Each upgraded peer reports this
// build and the command version it applies. COOPGRID_UPGRADE_TASKS sets
// the tasks of each batch (default 6; `make upgrade-test` runs more).
func TestRollingUpgrade(t *testing.T) {
	skipShort(t)
	alongside(t)
	perBatch := 6
	if n, err := strconv.Atoi(os.Getenv("COOPGRID_UPGRADE_TASKS")); err == nil && n > 0 {
		perBatch = n
	}
	release := buildRelease(t, previousRelease)
	root := t.TempDir()
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 2, 10, 100), config: fastConfig, bin: release})
	boot := a.start(t).bootstrap(t)
	handed := filepath.Join(root, "federation.key.copy")
	copyFile(t, a.secret(), handed)
	b := newOrg(t, root, "uni-b", initOptions{machines: machinesFile("b", 2, 10, 60), secret: handed, config: fastConfig, bin: release})
	c := newOrg(t, root, "uni-c", initOptions{machines: machinesFile("c", 2, 10, 50), secret: handed, config: fastConfig, bin: release})
	b.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-b"))
	c.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-c"))
	orgs := []*org{a, b, c}
	waitFormed := func(t *testing.T) {
		t.Helper()
		for _, g := range orgs {
			waitFor(t, waitTimeout, g.name+" sees three orgs, three peers, one leader", func() (bool, string) {
				s := g.status(t)
				return formed(s, 3) == "", formed(s, 3)
			})
		}
	}
	waitFormed(t)

	job := writeFile(t, root, "batch.yaml", fmt.Sprintf(`name: batch
template:
  count: %d
  argv: [/bin/sh, -c, 'sleep 1; echo ok > out.txt']
  size: 0.1
  wall_clock_limit: 1m
  outputs: [out.txt]
`, perBatch))
	var all []string
	// The upgrade order puts the leader last but one, so that both a
	// follower and the leader are upgraded under an old leader and a new
	// one.
	order := []*org{b, a, c}
	if leader := a.status(t).Leader; mustOrg(t, a.status(t), "uni-b").Peer == leader {
		order = []*org{a, b, c}
	}
	for i, g := range order {
		// The workload: a batch from an organisation that stays up, some
		// of it running when g stops.
		from := order[(i+1)%len(order)]
		ids := from.submit(t, job)
		all = append(all, ids...)
		waitFor(t, waitTimeout, "a task of the batch running", func() (bool, string) {
			for _, tk := range from.tasks(t) {
				if tk.State == "running" {
					return true, ""
				}
			}
			return false, "none running"
		})
		if err := g.proc.Stop(30 * time.Second); err != nil {
			t.Logf("%s: stop: %v", g.name, err)
		}
		// While g is down, more work through the others.
		all = append(all, from.submit(t, job)...)
		g.bin = ""
		g.start(t)
		waitFormed(t)
		var st upgradeStatus
		cliJSON(t, &st, "status", "--data", g.data)
		if st.Raft.CommandVersion < 1 || st.Raft.Halted != "" || strings.HasPrefix(st.Build.Version, "release-") {
			t.Fatalf("%s after its upgrade: %+v, want this build, applying command version 1 or more, not halted", g.name, st)
		}
		t.Logf("upgraded %s (%d of 3) to %s", g.name, i+1, st.Build.Version)
	}
	// After the upgrade, work from every organisation.
	for _, g := range orgs {
		all = append(all, g.submit(t, job)...)
	}
	for _, g := range orgs {
		waitAllDone(t, g, all)
	}
	waitSameLedger(t, orgs)
}
