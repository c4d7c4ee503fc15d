package executor

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestBatchKitReopen: a prepared attempt reopens to the same layout (what
// a restarted Slurm peer needs to collect an adopted job's outputs);
// anything else is refused, and nothing is created.
func TestBatchKitReopen(t *testing.T) {
	k, err := NewBatchKit(t.TempDir(), Policy{Allow: []string{"sh"}, UnsafeRunAsPeerUser: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := &TaskSpec{ID: "t-1", Argv: []string{"sh", "-c", "true"}, Checkpointable: true}
	prep, re := k.Prepare(spec, MachineConfig{Name: "m1", GFLOPS: 1, BusyWatts: 1})
	if re != nil {
		t.Fatal(re)
	}
	got, re := k.Reopen(spec, prep.Attempt)
	if re != nil {
		t.Fatal(re)
	}
	prep.Exe, prep.Env = "", nil
	if !reflect.DeepEqual(got, prep) || got.Checkpoint == "" {
		t.Errorf("reopened %+v, prepared %+v", got, prep)
	}
	cases := []struct {
		name    string
		spec    *TaskSpec
		attempt int
		want    string
	}{
		{"attempt never prepared", spec, prep.Attempt + 1, "no work directory"},
		{"task never prepared", &TaskSpec{ID: "t-2"}, 1, "no work directory"},
		{"attempt zero", spec, 0, "not a valid run"},
		{"bad task ID", &TaskSpec{ID: "../t-1"}, 1, "not a valid run"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, re := k.Reopen(c.spec, c.attempt)
			if re == nil || re.Reason != ReasonStartFailed || !strings.Contains(re.Detail, c.want) {
				t.Fatalf("Reopen: %v, want start_failed %q", re, c.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(k.TasksDir(), "t-2")); !os.IsNotExist(err) {
		t.Errorf("Reopen created t-2's directory: %v", err)
	}
}
