package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNoQuorum: a federation of three peers loses two; a write through
// the survivor (a submission, a limit change) fails with the API's
// no_quorum answer, said as "no quorum" by the CLI, well within the
// command's --timeout, whether the survivor was a follower or the leader
// when the others went; reads still answer. Once the others are back, the
// submission resent with its request ID is queued once.
func TestNoQuorum(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 1, 10, 40), config: fastConfig})
	pa := a.start(t)
	boot := pa.bootstrap(t)
	b := newOrg(t, root, "uni-b", initOptions{machines: machinesFile("b", 1, 10, 40), secret: a.secret(), config: fastConfig})
	c := newOrg(t, root, "uni-c", initOptions{machines: machinesFile("c", 1, 10, 40), secret: a.secret(), config: fastConfig})
	b.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-b"))
	c.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-c"))
	orgs := []*org{a, b, c}
	for _, g := range orgs {
		waitFor(t, waitTimeout, g.name+" sees the federation formed", func() (bool, string) {
			msg := formed(g.status(t), 3)
			return msg == "", msg
		})
	}
	job := filepath.Join(repoRoot, "examples", "jobs", "hello.json")
	// The bound this test holds the CLI to; the peer answers within its
	// leader wait (5 s with the lan preset) and a resend or two.
	const bound = 45 * time.Second

	// expectNoQuorum runs a write through g that must fail for want of a
	// quorum, with the API's code and the CLI's words.
	expectNoQuorum := func(t *testing.T, g *org, args ...string) {
		t.Helper()
		start := time.Now()
		r := g.cli(t, append(args, "--timeout", bound.String())...)
		took := time.Since(start)
		if r.code != 1 || !strings.Contains(r.stderr, "no quorum: ") || strings.Contains(r.stderr, "--timeout") {
			t.Fatalf("want the no-quorum error within --timeout %s; got after %s:\n%v", bound, took, r)
		}
		t.Logf("peer %s answered no quorum after %s: %s", strings.Join(args, " "), took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	}
	leaderOf := func() *org {
		id := a.status(t).Leader
		for _, g := range orgs {
			if g.status(t).Self == id {
				return g
			}
		}
		t.Fatalf("no organisation's peer is the leader %q", id)
		return nil
	}

	// 1. The survivor is a follower: one other peer is stopped cleanly,
	// the leader is killed.
	lead := leaderOf()
	var survivor, other *org
	for _, g := range orgs {
		if g != lead {
			if survivor == nil {
				survivor = g
			} else {
				other = g
			}
		}
	}
	if err := other.proc.Stop(15 * time.Second); err != nil {
		t.Logf("stop %s: %v", other.name, err)
	}
	lead.proc.kill9(t)
	expectNoQuorum(t, survivor, "submit", job, "--request-id", "nq-follower")
	expectNoQuorum(t, survivor, "limit", "set", "90%")
	// Reads answer from the survivor's replica.
	s := survivor.status(t)
	if s.Leader != "" || len(s.Orgs) != 3 {
		t.Fatalf("the survivor's status: leader %q, %d orgs", s.Leader, len(s.Orgs))
	}

	// 2. The others come back (from their data directories); the
	// submission resent with its request ID is queued, once.
	other.start(t)
	lead.start(t)
	var sub submitJSON
	cliJSON(t, &sub, "submit", "--data", survivor.data, job, "--request-id", "nq-follower")
	if len(sub.TaskIDs) != 2 {
		t.Fatalf("resent submission: %+v", sub)
	}
	waitAllDone(t, survivor, sub.TaskIDs)
	if n := len(survivor.tasks(t, "--org", survivor.name)); n != 2 {
		t.Fatalf("%s has %d tasks after the resend, want 2", survivor.name, n)
	}

	// 3. The survivor is the leader: both others are killed.
	lead = leaderOf()
	for _, g := range orgs {
		if g != lead {
			g.proc.kill9(t)
		}
	}
	expectNoQuorum(t, lead, "submit", job, "--request-id", "nq-leader")
	var st struct {
		Raft struct {
			State string `json:"state"`
		} `json:"raft"`
	}
	r := mustCLI(t, "status", "--data", lead.data, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Raft.State == "Leader" {
		t.Fatalf("the former leader without a quorum: %s (%v)", r.stdout, err)
	}
}
