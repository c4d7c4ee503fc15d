package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRecoverFromSurvivors: five real peers, five voters, finish a job;
// three are killed for good and the two left have no quorum. Both are
// stopped, `peer recover` runs on each with the two survivors' IDs, and
// they are started again: a leader is elected, `peer members` lists the
// two as reachable voters, every task committed before is there in the
// state it had, and a new job runs to its end (docs/OPERATIONS.md,
// "Recovery").
func TestRecoverFromSurvivors(t *testing.T) {
	skipShort(t)
	alongside(t)
	root := t.TempDir()
	names := []string{"uni-a", "uni-b", "uni-c", "uni-d", "uni-e"}
	var orgs []*org
	first := newOrg(t, root, names[0], initOptions{machines: machinesFile("a", 1, 10, 40), config: fastConfig})
	first.start(t)
	boot := first.proc.bootstrap(t)
	orgs = append(orgs, first)
	for i, name := range names[1:] {
		g := newOrg(t, root, name, initOptions{machines: machinesFile(string(rune('b'+i)), 1, 10, 40), secret: first.secret(), config: fastConfig})
		g.start(t, "--bootstrap", boot, "--invitation", first.invite(t, name))
		orgs = append(orgs, g)
	}
	for _, g := range orgs {
		waitFor(t, waitTimeout, g.name+" sees the federation formed", func() (bool, string) {
			msg := formed(g.status(t), len(names))
			return msg == "", msg
		})
	}
	job := filepath.Join(repoRoot, "examples", "jobs", "hello.json")
	before := map[string]string{}
	for _, g := range orgs[:2] {
		for _, id := range g.submit(t, job) {
			before[id] = ""
		}
	}
	survivors, lost := orgs[3:], orgs[:3]
	waitFor(t, waitTimeout, "every task done, as a survivor sees it", func() (bool, string) {
		for _, tk := range survivors[0].tasks(t) {
			if _, ok := before[tk.ID]; ok && tk.State != "done" {
				return false, fmt.Sprintf("%s is %s", tk.ID, tk.State)
			}
			before[tk.ID] = tk.State
		}
		return true, ""
	})

	for _, g := range lost {
		g.proc.kill9(t)
	}
	r := survivors[0].cli(t, "submit", job, "--timeout", "30s")
	if r.code != 1 || !strings.Contains(r.stderr, "no quorum") {
		t.Fatalf("two of five voters accepted a write:\n%v", r)
	}
	var ids []string
	for _, g := range survivors {
		ids = append(ids, g.status(t).Self)
		if err := g.proc.Stop(15 * time.Second); err != nil {
			t.Logf("stop %s: %v", g.name, err)
		}
	}
	for _, g := range survivors {
		r := mustCLI(t, "recover", "--data", g.data, "--dry-run")
		if strings.Count(r.stdout, " voter\n") != 5 {
			t.Fatalf("dry run on %s does not list the five voters:\n%v", g.name, r)
		}
		mustCLI(t, append([]string{"recover", "--data", g.data}, ids...)...)
	}
	// A peer listens on a new port when restarted (tcp/0 in these tests):
	// the second finds the first through --bootstrap. Neither is ready
	// (registered) before the two elect a leader.
	p0 := survivors[0].spawn(t)
	if _, err := p0.WaitLine(`(?m)^listening on `, readyTimeout); err != nil {
		t.Fatal(err)
	}
	survivors[1].start(t, "--bootstrap", p0.bootstrap(t))
	if _, err := p0.WaitLine(`(?m)^ready: `, readyTimeout); err != nil {
		t.Fatal(err)
	}

	var members struct {
		Leader          string `json:"leader"`
		Voters          int    `json:"voters"`
		VotersReachable int    `json:"voters_reachable"`
	}
	waitFor(t, waitTimeout, "the survivors elect a leader", func() (bool, string) {
		r := survivors[1].cli(t, "members", "--json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &members) != nil {
			return false, r.String()
		}
		return members.Leader != "" && members.Voters == 2 && members.VotersReachable == 2, r.stdout
	})
	for _, g := range survivors {
		got := map[string]string{}
		for _, tk := range g.tasks(t) {
			got[tk.ID] = tk.State
		}
		for id, state := range before {
			if got[id] != state {
				t.Errorf("%s: task %s is %q after recovery, was %q", g.name, id, got[id], state)
			}
		}
	}
	after := survivors[1].submit(t, job)
	waitFor(t, waitTimeout, "the new job done", func() (bool, string) {
		for _, id := range after {
			if tk := survivors[0].task(t, id); tk.State != "done" {
				return false, fmt.Sprintf("%s is %s", id, tk.State)
			}
		}
		return true, ""
	})
}
