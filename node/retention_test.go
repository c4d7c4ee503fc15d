package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/config"
)

// TestRetentionSweep: on a real data directory, a sweep removes exactly
// the files of finished tasks older than their retention: never those of
// an unfinished task (its inputs, outputs, work and checkpoint
// directories), never those of a task whose outputs were not delivered,
// never a recent blob (a submit on its way), and nothing of a kind whose
// retention is 0. The start-up sweep also removes the staging directories
// of finished tasks whatever their age.
func TestRetentionSweep(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	old, recent := now.Add(-10*day), now.Add(-time.Hour)
	digest := func(c string) string { return strings.Repeat(c, 64) }
	build := func(t *testing.T) string {
		dir := t.TempDir()
		write := func(rel string, at time.Time) {
			p := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			for d := p; d != dir; d = filepath.Dir(d) {
				if err := os.Chtimes(d, at, at); err != nil {
					t.Fatal(err)
				}
			}
		}
		// done-old: finished 10 days ago, delivered.
		write("outputs/a-1/out.txt", old)
		write("tasks/a-1/attempt-1/stdout", old)
		write("tasks/a-1/outputs-1/out.txt", old)
		// done-recent: finished an hour ago.
		write("outputs/a-2/out.txt", recent)
		write("tasks/a-2/attempt-1/stdout", recent)
		write("tasks/a-2/outputs-1/out.txt", recent)
		// running: a live task with old files (started long ago).
		write("outputs/a-3/partial.txt", old)
		write("tasks/a-3/attempt-2/stdout", old)
		write("tasks/a-3/outputs-1/out.txt", old)
		write("tasks/a-3/checkpoint/state", old)
		// undelivered: finished long ago, outputs kept here.
		write("tasks/b-1/attempt-1/stdout", old)
		write("tasks/b-1/outputs-1/out.txt", old)
		// gone: no longer in the ledger (left the state), old directory.
		write("tasks/c-9/attempt-1/stdout", old)
		// blobs: an old one nobody needs, an old one the live task needs,
		// a recent one, and a stray file that is not a blob.
		write("blobs/"+digest("a"), old)
		write("blobs/"+digest("b"), old)
		write("blobs/"+digest("c"), recent)
		write("blobs/.in-123", old)
		return dir
	}
	view := retentionView{
		tasks: map[string]retainedTask{
			"a-1": {known: true, finished: true, endedMs: old.UnixMilli()},
			"a-2": {known: true, finished: true, endedMs: recent.UnixMilli()},
			"a-3": {known: true},
			"b-1": {known: true, finished: true, endedMs: old.UnixMilli(), undelivered: true},
			"c-9": {finished: true},
		},
		liveInputs: map[string]bool{digest("b"): true},
	}
	kept := []string{"outputs/a-2", "outputs/a-3/partial.txt", "tasks/a-3/attempt-2", "tasks/a-3/outputs-1",
		"tasks/a-3/checkpoint/state", "tasks/b-1/attempt-1", "tasks/b-1/outputs-1", "blobs/" + digest("b"), "blobs/" + digest("c"), "blobs/.in-123"}
	cases := []struct {
		name     string
		cfg      config.RetentionConfig
		startup  bool
		gone     []string
		alsoKept []string
		want     sweepResult
	}{
		{"every kind after a week", config.RetentionConfig{Outputs: 7 * day, Blobs: 7 * day, Tasks: 7 * day}, false,
			[]string{"outputs/a-1", "tasks/a-1", "tasks/c-9", "blobs/" + digest("a")}, []string{"tasks/a-2/outputs-1"}, sweepResult{outputs: 1, tasks: 2, blobs: 1}},
		{"outputs kept for good", config.RetentionConfig{Blobs: 7 * day, Tasks: 7 * day}, false,
			[]string{"tasks/a-1", "tasks/c-9", "blobs/" + digest("a")}, []string{"outputs/a-1/out.txt", "tasks/a-2/outputs-1"}, sweepResult{tasks: 2, blobs: 1}},
		{"nothing expires yet", config.RetentionConfig{Outputs: 30 * day, Blobs: 30 * day, Tasks: 30 * day}, false,
			nil, []string{"outputs/a-1", "tasks/a-1/outputs-1", "tasks/a-2/outputs-1", "tasks/c-9", "blobs/" + digest("a")}, sweepResult{}},
		{"start-up: staging of finished tasks", config.RetentionConfig{}, true,
			[]string{"tasks/a-1/outputs-1", "tasks/a-2/outputs-1"}, []string{"tasks/a-1/attempt-1", "tasks/a-2/attempt-1", "outputs/a-1"}, sweepResult{staging: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := build(t)
			got := retentionSweep{dir: dir, cfg: tc.cfg, now: now, startup: tc.startup}.run(view)
			if len(got.failed) > 0 || got.outputs != tc.want.outputs || got.tasks != tc.want.tasks || got.blobs != tc.want.blobs || got.staging != tc.want.staging {
				t.Errorf("removed %+v, want %+v", got, tc.want)
			}
			for _, p := range tc.gone {
				if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
					t.Errorf("%s is still there (%v)", p, err)
				}
			}
			for _, p := range append(kept, tc.alsoKept...) {
				if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
					t.Errorf("%s was removed: %v", p, err)
				}
			}
		})
	}
}
