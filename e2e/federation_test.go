package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// TestFederation drives one three-organisation federation of real `peer`
// processes through what an institution does with it, in order: form it
// through a bootstrap address, keep strangers out, run every
// organisation's job to completion with outputs returned and energy
// booked, keep each organisation to its own tasks and limit, survive a
// peer killed with SIGKILL while it runs tasks, answer every client error
// clearly, and take the killed peer back from its data directory alone.
// The sub-tests share the federation (one start-up instead of eight) and
// run in order; each asserts on the state the previous ones left.
func TestFederation(t *testing.T) {
	skipShort(t)
	alongside(t)
	root := t.TempDir()

	// W per GFLOPS: uni-a 10, uni-b 6, uni-c 5. EHOSEP prefers uni-c's
	// machines, then uni-b's, so work crosses organisations.
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 2, 10, 100), config: fastConfig})
	pa := a.start(t)
	boot := pa.bootstrap(t)

	// The secret is handed over out of band: the others get a copy.
	handed := filepath.Join(root, "federation.key.copy")
	copyFile(t, a.secret(), handed)
	b := newOrg(t, root, "uni-b", initOptions{machines: machinesFile("b", 2, 10, 60), secret: handed, config: fastConfig})
	c := newOrg(t, root, "uni-c", initOptions{machines: machinesFile("c", 2, 10, 50), secret: handed, config: fastConfig})
	b.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-b"))
	c.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-c"))
	orgs := []*org{a, b, c}

	t.Run("formed", func(t *testing.T) {
		for _, g := range orgs {
			waitFor(t, waitTimeout, g.name+" sees three orgs, three peers, one leader", func() (bool, string) {
				s := g.status(t)
				return formed(s, 3) == "", formed(s, 3)
			})
		}
		// Every peer names the same leader.
		leaders := map[string]bool{}
		for _, g := range orgs {
			leaders[g.status(t).Leader] = true
		}
		if len(leaders) != 1 {
			t.Fatalf("the peers disagree on the leader: %v", leaders)
		}
		s := c.status(t)
		if s.Org != "uni-c" || s.Self == "" {
			t.Fatalf("uni-c's status names itself %q of %q", s.Self, s.Org)
		}
	})

	// Known bug: node.(*Node).Submit and Cancel return once the leader has
	// committed, without waiting for the local apply as SetLimit does
	// (waitApplied). So a follower's `peer submit` prints task IDs that its
	// own `peer task` does not know yet, and a `peer cancel` that succeeded
	// is followed by a `peer task` that still shows the task queued. The
	// other sub-tests wait for their writes to show up (org.submit) so that
	// they test the rest.
	t.Run("a follower's writes are visible to its next read", func(t *testing.T) {
		f := b
		if mustOrg(t, a.status(t), "uni-b").Peer == a.status(t).Leader {
			f = c
		}
		job := writeFile(t, root, "quick.yaml", "name: quick\ntasks:\n  - {argv: [/bin/sh, -c, \"true\"], size: 0.1, wall_clock_limit: 1m}\n")
		var ids []string
		for range 10 {
			id := f.submitNoWait(t, job)[0]
			ids = append(ids, id)
			if r := f.cli(t, "task", id); r.code != 0 {
				t.Errorf("%s (a follower) printed task ID %s, then did not know it\n%v", f.name, id, r)
			}
		}
		waitAllDone(t, f, ids)

		// With a limit of 0 W nothing of f's runs: its tasks stay queued
		// until cancelled.
		mustCLI(t, "limit", "set", "0W", "--data", f.data)
		defer mustCLI(t, "limit", "set", "100%", "--data", f.data)
		for range 5 {
			id := f.submit(t, job)[0]
			if r := f.cli(t, "cancel", id); r.code != 0 {
				t.Fatalf("cancel %s\n%v", id, r)
			}
			if d := f.task(t, id); d.State != "cancelled" {
				t.Errorf("%s (a follower) cancelled %s, then showed it %s", f.name, id, d.State)
			}
			waitFor(t, waitTimeout, id+" cancelled", func() (bool, string) {
				d := f.task(t, id)
				return d.State == "cancelled", d.State
			})
		}
	})

	t.Run("outsiders cannot join", func(t *testing.T) {
		// Another federation's secret: a valid PSK file, the wrong one.
		stranger := newOrg(t, root, "stranger-fed", initOptions{})
		wrong := newOrg(t, root, "uni-x", initOptions{machines: machinesFile("x", 1, 10, 10), secret: stranger.secret(), config: fastConfig})
		assertNeverReady(t, wrong, "--bootstrap", boot)

		// No secret at all: the file handed over is missing.
		none := newOrg(t, root, "uni-y", initOptions{machines: machinesFile("y", 1, 10, 10), secret: handed, config: fastConfig})
		if err := os.Remove(none.secret()); err != nil {
			t.Fatal(err)
		}
		assertNeverReady(t, none, "--bootstrap", boot)
		if r := cli(t, "init", "--org", "uni-z", "--data", filepath.Join(root, "uni-z")); r.code != 2 || !strings.Contains(r.stderr, "--secret") {
			t.Fatalf("init with no secret and no --new-federation: want exit 2 naming --secret\n%v", r)
		}

		// A plain libp2p host, with no pre-shared key, cannot even complete
		// a connection to a member.
		h, err := libp2p.New(libp2p.NoListenAddrs)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		info, err := peer.AddrInfoFromP2pAddr(ma.StringCast(boot))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := h.Connect(ctx, *info); err == nil {
			t.Fatalf("a host without the federation secret connected to %s", boot)
		}

		for _, g := range orgs {
			s := g.status(t)
			if msg := formed(s, 3); msg != "" {
				t.Fatalf("%s after the strangers tried: %s", g.name, msg)
			}
			for _, o := range s.Orgs {
				if o.Name == "uni-x" || o.Name == "uni-y" {
					t.Fatalf("%s lists the stranger %s", g.name, o.Name)
				}
			}
		}
	})

	t.Run("every organisation's job runs and returns its outputs", func(t *testing.T) {
		sweep := filepath.Join(repoRoot, "examples", "jobs", "sweep.yaml")
		ids := map[*org][]string{}
		for _, g := range orgs {
			ids[g] = g.submit(t, sweep)
			if len(ids[g]) != 8 {
				t.Fatalf("%s: sweep.yaml gave %d tasks, want 8", g.name, len(ids[g]))
			}
		}
		var all []string
		for _, g := range orgs {
			all = append(all, ids[g]...)
		}
		waitAllDone(t, a, all)

		alpha := []string{"0.1", "0.2", "0.5", "1.0"}
		crossed := 0
		for _, g := range orgs {
			for i, id := range ids[g] {
				want := fmt.Sprintf("task %d of 8: alpha=%s seed=%d\n", i, alpha[i/2], i%2+1)
				got, err := os.ReadFile(filepath.Join(g.data, "outputs", id, fmt.Sprintf("result-%d.txt", i)))
				if err != nil {
					t.Fatalf("output of %s not in %s's data directory: %v", id, g.name, err)
				}
				if string(got) != want {
					t.Fatalf("output of %s = %q, want %q", id, got, want)
				}
				d := g.task(t, id)
				if d.State != "done" || len(d.Segments) == 0 {
					t.Fatalf("task %s: %+v", id, d)
				}
				last := d.Segments[len(d.Segments)-1]
				if last.Outcome != "done" || last.EnergyJ <= 0 || last.Source == "" {
					t.Fatalf("task %s: last run %+v", id, last)
				}
				if last.MachineOrg != g.name {
					crossed++
				}
			}
		}
		if crossed == 0 {
			t.Fatal("no task ran on another organisation's machine: nothing travelled between peers")
		}
		t.Logf("%d of 24 tasks ran on another organisation's machine", crossed)

		// Every peer converges on one ledger; every organisation is
		// credited as a user, and the energy booked to users is the energy
		// booked to owners.
		waitSameLedger(t, orgs)
		l := b.ledger(t)
		var users, owners float64
		for _, g := range orgs {
			found := false
			for _, acc := range l.Orgs {
				if acc.Org == g.name {
					found = true
					if acc.UserJ <= 0 {
						t.Fatalf("%s's energy account was not credited: %+v", g.name, acc)
					}
				}
			}
			if !found {
				t.Fatalf("no account for %s in %+v", g.name, l)
			}
		}
		for _, acc := range l.Orgs {
			users += acc.UserJ
			owners += acc.OwnerSelfJ + acc.OwnerOthersJ
		}
		if math.Abs(users-owners) > 1e-6*math.Max(1, users) {
			t.Fatalf("users were booked %v J, owners %v J: %+v", users, owners, l)
		}
	})

	t.Run("limit set 50% shows in every peer's view", func(t *testing.T) {
		before := a.status(t)
		r := a.cli(t, "limit", "set", "50%")
		if r.code != 0 || !strings.Contains(r.stdout, "uni-a: power limit 100 W") {
			t.Fatalf("want uni-a's limit at 100 W (50%% of 2 × 100 W)\n%v", r)
		}
		for _, g := range orgs {
			waitFor(t, waitTimeout, g.name+" sees uni-a's limit at 50%", func() (bool, string) {
				s := g.status(t)
				o, _ := s.org("uni-a")
				return o.PowerQuotaW == 200 && o.LimitW == 100, fmt.Sprintf("%+v", o)
			})
			// The others' limits did not move.
			s := g.status(t)
			for _, name := range []string{"uni-b", "uni-c"} {
				o, _ := s.org(name)
				old, _ := before.org(name)
				if o.LimitW != old.LimitW {
					t.Fatalf("%s sees %s's limit changed from %v to %v", g.name, name, old.LimitW, o.LimitW)
				}
			}
		}
	})

	t.Run("an organisation acts only for itself", func(t *testing.T) {
		hold := writeFile(t, root, "hold.yaml", `name: hold
defaults: {size: 1000, wall_clock_limit: 5m}
template:
  count: 2
  argv: [/bin/sh, -c, "sleep 120"]
`)
		ids := b.submit(t, hold)
		waitFor(t, waitTimeout, "uni-b's hold tasks queued or running", func() (bool, string) {
			d := b.task(t, ids[0])
			return d.State == "queued" || d.State == "running", d.State
		})

		// uni-a's peer refuses to cancel uni-b's task.
		r := a.cli(t, "cancel", ids[0])
		if r.code != 1 || !strings.Contains(r.stderr, "forbidden") || !strings.Contains(r.stderr, "uni-b") {
			t.Fatalf("uni-a cancelling %s: want exit 1, forbidden\n%v", ids[0], r)
		}
		// uni-a's token does not open uni-b's API: neither to cancel nor to
		// change uni-b's limit.
		limB := mustOrg(t, b.status(t), "uni-b").LimitW
		for _, args := range [][]string{{"cancel", ids[0]}, {"limit", "set", "10%"}} {
			r := cli(t, append(args, "--api", b.api, "--token-file", filepath.Join(a.data, "api.token"))...)
			if r.code != 1 || !strings.Contains(r.stderr, "refused the token") {
				t.Fatalf("uni-a's token at uni-b's API: want exit 1, refused\n%v", r)
			}
		}
		if d := b.task(t, ids[0]); d.State == "cancelled" {
			t.Fatalf("uni-b's task %s was cancelled by uni-a", ids[0])
		}
		for _, g := range orgs {
			if got := mustOrg(t, g.status(t), "uni-b").LimitW; got != limB {
				t.Fatalf("%s sees uni-b's limit %v, was %v", g.name, got, limB)
			}
		}

		// uni-b cancels its own.
		r = b.cli(t, "cancel", ids[0], ids[1])
		if r.code != 0 || !strings.Contains(r.stdout, "cancelled "+ids[0]+" "+ids[1]) {
			t.Fatalf("uni-b cancelling its own tasks\n%v", r)
		}
		waitFor(t, waitTimeout, "uni-b's hold tasks cancelled and their machines free", func() (bool, string) {
			for _, id := range ids {
				if d := b.task(t, id); d.State != "cancelled" {
					return false, id + " " + d.State
				}
			}
			for _, m := range b.machines(t) {
				if m.Task != "" {
					return false, m.ID + " holds " + m.Task
				}
			}
			return true, ""
		})
	})

	t.Run("client errors against a running peer", func(t *testing.T) {
		wrongToken := writeFile(t, root, "wrong.token", strings.Repeat("ab", 32)+"\n")
		sweep := filepath.Join(repoRoot, "examples", "jobs", "sweep.yaml")
		tasksBefore := len(a.tasks(t))
		limitBefore := mustOrg(t, a.status(t), "uni-a").LimitW
		for _, args := range allCommands(sweep, "uni-a-1") {
			r := cli(t, append(args, "--data", a.data, "--token-file", wrongToken)...)
			if r.code != 1 || !strings.Contains(r.stderr, "refused the token from "+wrongToken) {
				t.Errorf("bad token: want exit 1 and a refused token\n%v", r)
			}
		}

		for _, args := range [][]string{{"task", "uni-a-999999"}, {"logs", "uni-a-999999"}, {"cancel", "uni-a-999999"}, {"task", "nobody-1"}} {
			r := a.cli(t, args...)
			if r.code != 1 || !strings.Contains(r.stderr, "not_found") {
				t.Errorf("unknown task: want exit 1, not_found\n%v", r)
			}
		}
		if r := a.cli(t, "task", "bad/id"); r.code != 2 || !strings.Contains(r.stderr, "want <org>-<n>") {
			t.Errorf("malformed task ID: want exit 2\n%v", r)
		}

		jobs := t.TempDir()
		for _, tc := range []struct {
			name, content string
			want          []string
		}{
			{"bad-limit.yaml", "version: 1\nname: bad\ntasks:\n  - name: t1\n    argv: [/bin/sh, -c, \"true\"]\n    size: 1\n    wall_clock_limit: -5m\n",
				[]string{"bad-limit.yaml:7:", "tasks[0].wall_clock_limit"}},
			{"bad-key.yaml", "name: bad\ntasks:\n  - argv: [/bin/sh]\n    size: 1\n    wall_clock_limit: 1m\n    outptus: [x]\n",
				[]string{"bad-key.yaml:6:", "outptus"}},
			{"bad-syntax.json", "{\"name\": \"bad\",\n \"tasks\": [\n  {\"argv\": [\"/bin/sh\"],}\n ]}\n",
				[]string{"bad-syntax.json:3:"}},
		} {
			path := writeFile(t, jobs, tc.name, tc.content)
			r := a.cli(t, "submit", path)
			if r.code != 2 {
				t.Errorf("malformed job %s: want exit 2\n%v", tc.name, r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("malformed job %s: stderr lacks %q\n%v", tc.name, w, r)
				}
			}
		}

		// None of that changed anything.
		if n := len(a.tasks(t)); n != tasksBefore {
			t.Fatalf("the refused commands changed the task count from %d to %d", tasksBefore, n)
		}
		s := a.status(t)
		if got := mustOrg(t, s, "uni-a").LimitW; got != limitBefore {
			t.Fatalf("uni-a's limit moved from %v to %v", limitBefore, got)
		}
		if msg := formed(s, 3); msg != "" {
			t.Fatalf("after the refused leave: %s", msg)
		}
	})

	// victim: a follower whose machines run tasks; submitter: another
	// organisation that survives.
	leader := a.status(t).Leader
	victim, submitter := c, b
	if mustOrg(t, a.status(t), "uni-c").Peer == leader {
		victim, submitter = b, a
	}

	t.Run("a follower killed with SIGKILL loses its machines; its tasks finish elsewhere", func(t *testing.T) {
		mustCLI(t, "limit", "set", "1000%", "--data", submitter.data)
		job := writeFile(t, root, "long.yaml", `name: long
template:
  count: 6
  argv: [/bin/sh, -c, 'sleep 4; echo "task $INDEX on $COOPGRID_MACHINE"; echo "$INDEX" > "done-$INDEX.txt"']
  env: {INDEX: "{{index}}"}
  size: 40
  wall_clock_limit: 2m
  outputs: ["done-{{index}}.txt"]
`)
		ids := submitter.submit(t, job)
		var onVictim []string
		waitFor(t, waitTimeout, "a task running on "+victim.name+"'s machines", func() (bool, string) {
			onVictim = onVictim[:0]
			ts := submitter.tasks(t, "--org", submitter.name)
			for _, tk := range ts {
				if slices.Contains(ids, tk.ID) && tk.State == "running" && strings.HasPrefix(tk.Machine, victim.name+"/") {
					onVictim = append(onVictim, tk.ID)
				}
			}
			return len(onVictim) > 0, fmt.Sprintf("%+v", ts)
		})
		victim.proc.kill9(t)

		survivors := []*org{}
		for _, g := range orgs {
			if g != victim {
				survivors = append(survivors, g)
			}
		}
		for _, g := range survivors {
			waitFor(t, waitTimeout, g.name+" sees "+victim.name+"'s machines lost", func() (bool, string) {
				n := 0
				ms := g.machines(t)
				for _, m := range ms {
					if m.Org == victim.name {
						if m.State != "lost" {
							return false, fmt.Sprintf("%+v", ms)
						}
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
			if last.MachineOrg == victim.name || last.Outcome != "done" {
				t.Fatalf("task %s finished on %s (%s)", id, last.Machine, last.Outcome)
			}
			if slices.Contains(onVictim, id) {
				if d.Attempts < 2 || d.Segments[0].MachineOrg != victim.name || d.Segments[0].Outcome != "lost" {
					t.Fatalf("task %s ran on %s when it was killed, but its runs are %+v (attempts %d)", id, victim.name, d.Segments, d.Attempts)
				}
			}
			got, err := os.ReadFile(filepath.Join(submitter.data, "outputs", id, fmt.Sprintf("done-%d.txt", i)))
			if err != nil || string(got) != fmt.Sprintf("%d\n", i) {
				t.Fatalf("output of %s: %q, %v", id, got, err)
			}
			_, mname, _ := strings.Cut(last.Machine, "/")
			r := submitter.cli(t, "logs", id)
			if r.code != 0 || r.stdout != fmt.Sprintf("task %d on %s\n", i, mname) {
				t.Fatalf("logs of %s (last run on %s)\n%v", id, last.Machine, r)
			}
		}
		// The federation keeps one leader, the same in both survivors' views.
		waitFor(t, waitTimeout, "the survivors agree on a leader", func() (bool, string) {
			s0, s1 := survivors[0].status(t), survivors[1].status(t)
			return s0.Leader != "" && s0.Leader == s1.Leader, s0.Leader + " / " + s1.Leader
		})
	})

	t.Run("client errors against a stopped peer", func(t *testing.T) {
		sweep := filepath.Join(repoRoot, "examples", "jobs", "sweep.yaml")
		for _, args := range allCommands(sweep, victim.name+"-1") {
			r := victim.cli(t, args...)
			if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the peer's API at http://"+victim.api) {
				t.Errorf("API unreachable: want exit 1 and a clear message\n%v", r)
			}
		}
		// A malformed job is refused before the peer is even contacted.
		bad := writeFile(t, t.TempDir(), "bad.yaml", "name: bad\ntasks: []\n")
		if r := victim.cli(t, "submit", bad); r.code != 2 || !strings.Contains(r.stderr, "bad.yaml:2:") {
			t.Errorf("malformed job with the peer down: want exit 2 and file:line\n%v", r)
		}
	})

	t.Run("the killed peer restarts from its data directory alone", func(t *testing.T) {
		victim.start(t) // no --bootstrap: it knows the members
		s := victim.status(t)
		if s.Org != victim.name {
			t.Fatalf("restarted peer reports org %q", s.Org)
		}
		for _, g := range orgs {
			waitFor(t, waitTimeout, g.name+" sees the federation whole again", func() (bool, string) {
				s := g.status(t)
				if msg := formed(s, 3); msg != "" {
					return false, msg
				}
				for _, m := range g.machines(t) {
					if m.State != "up" {
						return false, m.ID + " is " + m.State
					}
				}
				return true, ""
			})
		}
		waitSameLedger(t, orgs)
		// It listens on a new port (listen is tcp/0); the members list the
		// address it has now.
		addr := strings.Split(victim.proc.bootstrap(t), "/p2p/")[0]
		for _, g := range orgs {
			waitFor(t, waitTimeout, g.name+" lists "+victim.name+"'s new address "+addr, func() (bool, string) {
				s := g.status(t)
				for _, p := range s.Peers {
					if p.Org == victim.name {
						return slices.Contains(p.Addrs, addr), fmt.Sprint(p.Addrs)
					}
				}
				return false, "no peer of " + victim.name
			})
		}

		// It works: it submits a job and gets the outputs back.
		ids := victim.submit(t, filepath.Join(repoRoot, "examples", "jobs", "hello.json"))
		waitAllDone(t, victim, ids)
		for i, who := range []string{"a task sized in GFlop", "a task sized by its runtime"} {
			got, err := os.ReadFile(filepath.Join(victim.data, "outputs", ids[i], "hello.txt"))
			if err != nil || string(got) != "hello from "+who+"\n" {
				t.Fatalf("output of %s: %q, %v", ids[i], got, err)
			}
		}
	})

	t.Run("a clean stop (SIGTERM) hands the machines back; the peer restarts", func(t *testing.T) {
		leader := a.status(t).Leader
		var g *org
		for _, o := range orgs {
			if o != victim && mustOrg(t, a.status(t), o.name).Peer != leader {
				g = o
			}
		}
		if g == nil {
			t.Fatal("no follower left to stop")
		}
		if err := g.proc.Stop(60 * time.Second); err != nil {
			t.Fatalf("peer run of %s after SIGTERM: %v (want exit 0)", g.name, err)
		}
		if out := readFile(g.proc.Stdout); !strings.Contains(out, "\nstopping\n") {
			t.Fatalf("peer run did not say it was stopping:\n%s", out)
		}
		for _, o := range orgs {
			if o == g {
				continue
			}
			waitFor(t, waitTimeout, o.name+" sees "+g.name+"'s machines lost", func() (bool, string) {
				ms := o.machines(t)
				for _, m := range ms {
					if m.Org == g.name && m.State != "lost" {
						return false, fmt.Sprintf("%+v", ms)
					}
				}
				return true, ""
			})
		}
		g.start(t)
		for _, o := range orgs {
			waitFor(t, waitTimeout, o.name+" sees the federation whole again", func() (bool, string) {
				if msg := formed(o.status(t), 3); msg != "" {
					return false, msg
				}
				for _, m := range o.machines(t) {
					if m.State != "up" {
						return false, m.ID + " is " + m.State
					}
				}
				return true, ""
			})
		}
		waitSameLedger(t, orgs)
	})
}

// formed returns "" when a status shows n organisations, n voting peers
// each acting for an organisation, and exactly one leader among them;
// otherwise what is wrong.
func formed(s statusJSON, n int) string {
	if len(s.Orgs) != n || len(s.Peers) != n {
		return fmt.Sprintf("%d orgs and %d peers, want %d", len(s.Orgs), len(s.Peers), n)
	}
	if s.Leader == "" {
		return "no leader"
	}
	leaders := 0
	for _, p := range s.Peers {
		if p.Leader {
			leaders++
			if p.ID != s.Leader {
				return fmt.Sprintf("peer %s marked leader, but the leader is %s", p.ID, s.Leader)
			}
		}
		if !p.Voter || p.Org == "" || len(p.Addrs) == 0 {
			return fmt.Sprintf("peer %+v", p)
		}
	}
	if leaders != 1 {
		return fmt.Sprintf("%d peers marked leader", leaders)
	}
	return ""
}

func mustOrg(t *testing.T, s statusJSON, name string) orgJSON {
	t.Helper()
	o, ok := s.org(name)
	if !ok {
		t.Fatalf("%s's status lists no %s: %+v", s.Org, name, s.Orgs)
	}
	return o
}

// waitAllDone waits until every task of ids is done in g's view; a failed
// or cancelled one fails the test at once.
func waitAllDone(t *testing.T, g *org, ids []string) {
	t.Helper()
	waitFor(t, waitTimeout, fmt.Sprintf("%d tasks done in %s's view", len(ids), g.name), func() (bool, string) {
		ts := g.tasks(t)
		state := map[string]taskJSON{}
		for _, tk := range ts {
			state[tk.ID] = tk
		}
		done := 0
		var pending []string
		for _, id := range ids {
			switch tk := state[id]; tk.State {
			case "failed", "cancelled":
				t.Fatalf("task %s %s: %+v", id, tk.State, tk)
			case "done":
				done++
			default:
				pending = append(pending, id+":"+tk.State+"@"+tk.Machine)
			}
		}
		return done == len(ids), fmt.Sprintf("%d of %d done; pending %v", done, len(ids), pending)
	})
}

// waitSameLedger waits until every peer reports the same applied index and
// state hash.
func waitSameLedger(t *testing.T, orgs []*org) {
	t.Helper()
	waitFor(t, waitTimeout, "the same ledger on every peer", func() (bool, string) {
		var seen []string
		for _, g := range orgs {
			l := g.ledger(t)
			seen = append(seen, fmt.Sprintf("%s@%d %.12s", g.name, l.AppliedIndex, l.StateHash))
		}
		same := true
		for _, s := range seen[1:] {
			_, a, _ := strings.Cut(s, "@")
			_, b, _ := strings.Cut(seen[0], "@")
			same = same && a == b
		}
		return same, strings.Join(seen, ", ")
	})
}

// assertNeverReady starts a peer that must not get in: `peer run` either
// exits with an error or never prints ready: within 20 s.
func assertNeverReady(t *testing.T, g *org, args ...string) {
	t.Helper()
	p := g.spawn(t, args...)
	if _, err := p.WaitLine(`(?m)^ready: `, 20*time.Second); err == nil {
		t.Fatalf("%s joined the federation:\n%s", g.name, readFile(p.Stdout))
	}
	if p.Exited() && p.Err() == nil {
		t.Fatalf("%s: peer run exited 0", g.name)
	}
	_ = p.Stop(10 * time.Second)
	t.Logf("%s kept out: %s", g.name, strings.TrimSpace(tail(readFile(p.Stderr), 2)))
}

// allCommands are every client command, with arguments that would be
// accepted by a running peer of the organisation whose task taskID is.
func allCommands(jobFile, taskID string) [][]string {
	return [][]string{
		{"submit", jobFile},
		{"tasks"},
		{"task", taskID},
		{"logs", taskID},
		{"cancel", taskID},
		{"machines"},
		{"orgs"},
		{"ledger"},
		{"limit", "set", "80%"},
		{"status"},
		{"leave"},
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
