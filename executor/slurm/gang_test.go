package slurm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/executor/slurm/slurmtest"
)

// TestSlurmGang: a two-part gang on a private Slurm of two nodes (two
// slurmds on this host), one part on each, started as the runner starts a
// gang's parts (runner.GangEnv's variables, the hostfile an input named
// by a path relative to the work directory). Each part sees its rank, the
// gang's size and hosts, its hostfile at an absolute path, and at its
// rank in the hostfile the node Slurm allocated to its job.
func TestSlurmGang(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{Nodes: 2, CPUs: 2, MemoryMiB: 1024})
	data := filepath.Join(c.Dir, "peer")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newExec(t, c, data)
	defer closeExec(t, e)
	if ms := e.Machines(); len(ms) != 2 || ms[0].Name != c.Nodes[0] || ms[1].Name != c.Nodes[1] {
		t.Fatalf("machines %+v: want the nodes %v", ms, c.Nodes)
	}

	hosts := strings.Join(c.Nodes, ",")
	hostfile := c.Nodes[0] + " slots=2\n" + c.Nodes[1] + " slots=2\n"
	see := `{ echo "$COOPGRID_GANG_RANK/$COOPGRID_GANG_SIZE $COOPGRID_HOSTS $COOPGRID_SLURM_NODELIST"; echo "$COOPGRID_HOSTFILE"; cat "$COOPGRID_HOSTFILE"; } > seen.txt`
	for rank, node := range c.Nodes {
		gate := make(chan bool, 1)
		gate <- true
		spec := executor.TaskSpec{ID: "t-gang-" + strconv.Itoa(rank), Argv: []string{"sh", "-c", see}, CPUs: 2, Gate: gate,
			OutputPatterns: []string{"seen.txt"}, Inputs: map[string][]byte{"hostfile": []byte(hostfile)},
			PeerEnv: map[string]string{"COOPGRID_HOSTS": hosts, "COOPGRID_GANG_RANK": strconv.Itoa(rank),
				"COOPGRID_GANG_SIZE": "2", "COOPGRID_HOSTFILE": "./hostfile"},
			StartBy: func() time.Time { return time.Now().Add(time.Minute) }}
		if err := e.Start(context.Background(), node, spec); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]executor.Result{}
	for range 2 {
		select {
		case r := <-e.Results():
			got[r.ID] = r
		case <-time.After(90 * time.Second):
			t.Fatalf("gang results: %v after 90 s; squeue %v", got, c.Jobs())
		}
	}
	lines := strings.Split(strings.TrimSuffix(hostfile, "\n"), "\n")
	for rank, node := range c.Nodes {
		id := "t-gang-" + strconv.Itoa(rank)
		r := got[id]
		if !r.OK() || r.Machine != node {
			t.Fatalf("%s: result %+v: want ok on %s", id, r, node)
		}
		b, err := os.ReadFile(r.Outputs["seen.txt"])
		if err != nil {
			t.Fatal(err)
		}
		seen := strings.SplitN(string(b), "\n", 3)
		if len(seen) != 3 {
			t.Fatalf("%s saw %q", id, b)
		}
		// Slurm's own word on the job's node (SLURM_JOB_NODELIST).
		want := strconv.Itoa(rank) + "/2 " + hosts + " " + node
		if seen[0] != want {
			t.Errorf("%s saw %q, want %q", id, seen[0], want)
		}
		if want := filepath.Join(r.WorkDir, "hostfile"); seen[1] != want {
			t.Errorf("%s: COOPGRID_HOSTFILE %q, want %q (absolute, in its work directory on the shared file system)", id, seen[1], want)
		}
		if seen[2] != hostfile {
			t.Errorf("%s: hostfile %q, want %q", id, seen[2], hostfile)
		}
		slurmNode := strings.Fields(seen[0])[2]
		if host, _, _ := strings.Cut(lines[rank], " "); host != slurmNode {
			t.Errorf("%s: the hostfile names %q at rank %d, Slurm allocated %q", id, host, rank, slurmNode)
		}
	}
}
