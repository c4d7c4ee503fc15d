package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestDrain: a real peer with two machines. The machine running a task is
// drained: that task runs to its end there (done), the tasks submitted
// afterwards all run on the other machine, and the listing marks the
// drained one; undrained, it is offered again.
func TestDrain(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	machines := `machines:
  - name: a1
    gflops: 10
    busy_watts: 40
  - name: a2
    gflops: 10
    busy_watts: 60
policy:
  allow: [/bin/sh]
  unsafe_run_as_peer_user: true
  max_wall_clock: 10m
  kill_grace: 2s
`
	a := newOrg(t, root, "uni-a", initOptions{machines: machines, config: fastConfig})
	a.start(t)
	long := writeFile(t, root, "long.yaml", `name: long
tasks:
  - argv: [/bin/sh, -c, 'sleep 4; echo ok > out.txt']
    size: 1
    wall_clock_limit: 1m
    outputs: [out.txt]
`)
	first := a.submit(t, long)[0]
	var busy string
	waitFor(t, waitTimeout, "the first task running", func() (bool, string) {
		d := a.task(t, first)
		if d.State == "running" && len(d.Segments) > 0 {
			busy = d.Segments[len(d.Segments)-1].Machine
		}
		return busy != "", fmt.Sprintf("%+v", d)
	})
	name := strings.TrimPrefix(busy, "uni-a/")
	r := mustCLI(t, "machines", "drain", name, "--data", a.data)
	if want := busy + " drained: no new work; its task " + first + " runs to its end"; !strings.HasPrefix(r.stdout, want) {
		t.Fatalf("peer machines drain: %q, want %q", r.stdout, want)
	}

	// Two more tasks: they may only run on the other machine, one after
	// the other, while the first ends where it is.
	more := writeFile(t, root, "more.yaml", `name: more
template:
  count: 2
  argv: [/bin/sh, -c, 'echo ok > out.txt']
  size: 1
  wall_clock_limit: 1m
  outputs: [out.txt]
`)
	ids := a.submit(t, more)
	waitAllDone(t, a, append([]string{first}, ids...))
	if d := a.task(t, first); len(d.Segments) != 1 || d.Segments[0].Machine != busy || d.Segments[0].Outcome != "done" {
		t.Fatalf("the drained machine's task: %+v, want one run on %s, done", d, busy)
	}
	for _, id := range ids {
		for _, s := range a.task(t, id).Segments {
			if s.Machine == busy {
				t.Fatalf("task %s ran on the drained machine %s", id, busy)
			}
		}
	}
	if r := mustCLI(t, "machines", "--data", a.data); !strings.Contains(r.stdout, "up (drained)") {
		t.Fatalf("peer machines does not mark the drained machine:\n%s", r.stdout)
	}

	r = mustCLI(t, "machines", "undrain", busy, "--data", a.data)
	if !strings.HasPrefix(r.stdout, busy+" takes work again") {
		t.Fatalf("peer machines undrain: %q", r.stdout)
	}
	if r := mustCLI(t, "machines", "--data", a.data); strings.Contains(r.stdout, "drained") {
		t.Fatalf("still marked drained:\n%s", r.stdout)
	}
}
