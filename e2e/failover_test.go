package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLeaderKilled: the Raft leader's peer is killed with SIGKILL while its
// machines run tasks and more tasks wait in the queue. The two survivors
// elect a new leader, which declares the dead peer's machines lost after
// the heartbeat timeout; every task, queued or interrupted, completes on
// the survivors' machines with its outputs returned; the federation still
// takes new work.
func TestLeaderKilled(t *testing.T) {
	skipShort(t)
	alongside(t)
	root := t.TempDir()

	// The first peer (the leader) has the most efficient machines, so the
	// work starts there.
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 2, 10, 40), config: fastConfig})
	pa := a.start(t)
	boot := pa.bootstrap(t)
	b := newOrg(t, root, "uni-b", initOptions{machines: machinesFile("b", 2, 10, 100), secret: a.secret(), config: fastConfig})
	// uni-c joins through config.yaml's bootstrap key instead of the flag,
	// as the systemd example does.
	cfgC := map[string]string{"bootstrap": "[" + boot + "]"}
	for k, v := range fastConfig {
		cfgC[k] = v
	}
	c := newOrg(t, root, "uni-c", initOptions{machines: machinesFile("c", 2, 10, 100), secret: a.secret(), config: cfgC})
	b.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-b"))
	c.start(t, "--invitation", a.invite(t, "uni-c"))
	orgs := []*org{a, b, c}
	for _, g := range orgs {
		waitFor(t, waitTimeout, g.name+" sees the federation formed", func() (bool, string) {
			msg := formed(g.status(t), 3)
			return msg == "", msg
		})
	}

	oldLeader := a.status(t).Leader
	var victim *org
	var survivors []*org
	for _, g := range orgs {
		if g.status(t).Self == oldLeader {
			victim = g
		} else {
			survivors = append(survivors, g)
		}
	}
	if victim == nil {
		t.Fatalf("no organisation's peer is the leader %s", oldLeader)
	}
	submitter, other := survivors[0], survivors[1]
	mustCLI(t, "limit", "set", "1000%", "--data", submitter.data)

	// Ten tasks on six machines: some run on the leader's machines, some
	// wait in the queue when it dies.
	job := writeFile(t, root, "batch.yaml", `name: batch
template:
  count: 10
  argv: [/bin/sh, -c, 'sleep 3; echo "$INDEX" > "out-$INDEX.txt"']
  env: {INDEX: "{{index}}"}
  size: 30
  wall_clock_limit: 2m
  outputs: ["out-{{index}}.txt"]
`)
	ids := submitter.submit(t, job)
	var onVictim []string
	waitFor(t, waitTimeout, "tasks running on the leader's machines while others wait", func() (bool, string) {
		onVictim = onVictim[:0]
		queued := 0
		ts := submitter.tasks(t, "--org", submitter.name)
		for _, tk := range ts {
			switch {
			case tk.State == "running" && strings.HasPrefix(tk.Machine, victim.name+"/"):
				onVictim = append(onVictim, tk.ID)
			case tk.State == "queued":
				queued++
			}
		}
		return len(onVictim) > 0 && queued > 0, fmt.Sprintf("%+v", ts)
	})
	victim.proc.kill9(t)

	waitFor(t, waitTimeout, "a new leader both survivors agree on", func() (bool, string) {
		s0, s1 := survivors[0].status(t), survivors[1].status(t)
		ok := s0.Leader != "" && s0.Leader != oldLeader && s0.Leader == s1.Leader
		return ok, fmt.Sprintf("old %s, now %q and %q", oldLeader, s0.Leader, s1.Leader)
	})
	for _, g := range survivors {
		waitFor(t, waitTimeout, g.name+" sees the dead leader's machines lost", func() (bool, string) {
			ms := g.machines(t)
			n := 0
			for _, m := range ms {
				if m.Org == victim.name && m.State == "lost" {
					n++
				}
			}
			return n == 2, fmt.Sprintf("%+v", ms)
		})
	}
	waitAllDone(t, submitter, ids)
	for i, id := range ids {
		d := submitter.task(t, id)
		last := d.Segments[len(d.Segments)-1]
		if last.MachineOrg == victim.name {
			t.Fatalf("task %s finished on the dead peer's machine %s", id, last.Machine)
		}
		if slices.Contains(onVictim, id) && (d.Attempts < 2 || d.Segments[0].Outcome != "lost") {
			t.Fatalf("task %s ran on the leader when it died; runs %+v, attempts %d", id, d.Segments, d.Attempts)
		}
		got, err := os.ReadFile(filepath.Join(submitter.data, "outputs", id, fmt.Sprintf("out-%d.txt", i)))
		if err != nil || string(got) != fmt.Sprintf("%d\n", i) {
			t.Fatalf("output of %s: %q, %v", id, got, err)
		}
	}

	// The federation under its new leader takes new work.
	more := other.submit(t, filepath.Join(repoRoot, "examples", "jobs", "hello.json"))
	waitAllDone(t, other, more)
	for _, id := range more {
		if got, err := os.ReadFile(filepath.Join(other.data, "outputs", id, "hello.txt")); err != nil || !strings.HasPrefix(string(got), "hello from ") {
			t.Fatalf("output of %s: %q, %v", id, got, err)
		}
	}
	waitSameLedger(t, survivors)
}
