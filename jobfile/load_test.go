package jobfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTree creates files (path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadInputsRelativeToJobFile: input paths are relative to the job
// file's directory, not to the working directory of the caller.
func TestLoadInputsRelativeToJobFile(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"jobs/run.yaml": `
defaults:
  argv: [/bin/sh, run.sh]
  size: 1
  wall_clock_limit: 1m
tasks:
  - name: a
    inputs: [run.sh, lib/common.sh, {path: data/in.txt, name: input/data.txt}]
  - name: b
    inputs: [run.sh]
`,
		"jobs/run.sh":         "#!/bin/sh\n. ./common.sh\n",
		"jobs/lib/common.sh":  "X=1\n",
		"jobs/data/in.txt":    "payload",
		"run.sh":              "the wrong run.sh, next to the caller",
		"elsewhere/other.txt": "not reachable",
	})
	// Run from another directory: the inputs must still resolve.
	t.Chdir(dir)
	job, err := Load(filepath.Join("jobs", "run.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "run" || len(job.Tasks) != 2 {
		t.Fatalf("job %+v", job)
	}
	a := job.Tasks[0]
	want := []Input{{"run.sh", []byte("#!/bin/sh\n. ./common.sh\n")}, {"common.sh", []byte("X=1\n")}, {"input/data.txt", []byte("payload")}}
	if len(a.Inputs) != len(want) {
		t.Fatalf("inputs %+v", a.Inputs)
	}
	for i, in := range a.Inputs {
		if in.Name != want[i].Name || string(in.Data) != string(want[i].Data) {
			t.Errorf("inputs[%d] = %s %q, want %s %q", i, in.Name, in.Data, want[i].Name, want[i].Data)
		}
	}
	// Both tasks ship run.sh: it is read once and shared.
	b := job.Tasks[1]
	if len(b.Inputs) != 1 || &b.Inputs[0].Data[0] != &a.Inputs[0].Data[0] {
		t.Errorf("run.sh not shared between tasks: %+v", b.Inputs)
	}
}

func TestLoadInputErrors(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		opts  Options
		want  string
		is    error
	}{
		{
			name:  "missing",
			files: map[string]string{"j.yaml": "tasks: [{argv: [x], size: 1, wall_clock_limit: 1m, inputs: [gone.sh]}]\n"},
			want:  `j.yaml:1:61: tasks[0].inputs[0]: cannot read input "gone.sh": no such file or directory`,
			is:    fs.ErrNotExist,
		},
		{
			name:  "over the per-file limit",
			files: map[string]string{"j.yaml": "tasks: [{argv: [x], size: 1, wall_clock_limit: 1m, inputs: [big]}]\n", "big": strings.Repeat("x", 101)},
			opts:  Options{MaxInputFileBytes: 100},
			want:  `j.yaml:1:61: tasks[0].inputs[0]: input "big" is 101 bytes, more than the 100 allowed per input file`,
		},
		{
			name: "over the total, each file counted once",
			files: map[string]string{
				"j.yaml": "defaults: {argv: [x], size: 1, wall_clock_limit: 1m}\ntasks:\n  - inputs: [a, b]\n  - inputs: [a, b]\n  - inputs: [c]\n",
				"a":      strings.Repeat("a", 40), "b": strings.Repeat("b", 40), "c": strings.Repeat("c", 40),
			},
			opts: Options{MaxInputTotalBytes: 100},
			want: `j.yaml:5:14: tasks[2].inputs[0]: input "c" (40 bytes) brings the job's input files over the 100 bytes allowed in total`,
		},
		{
			name:  "a directory",
			files: map[string]string{"j.yaml": "tasks: [{argv: [x], size: 1, wall_clock_limit: 1m, inputs: [d]}]\n", "d/f": "x"},
			want:  `j.yaml:1:61: tasks[0].inputs[0]: input "d" is a directory: list its files`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, c.files)
			t.Chdir(dir)
			job, err := Load("j.yaml", c.opts)
			if err == nil || job != nil {
				t.Fatalf("got %+v, %v", job, err)
			}
			if err.Error() != c.want {
				t.Errorf("error\n got: %s\nwant: %s", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("errors.Is(err, %v) is false", c.is)
			}
		})
	}
}

// TestLoadSymlinkEscape: a symbolic link inside the job's directory that
// points outside it is not followed (os.Root), so a job file cannot ship
// files from elsewhere on the submitter's machine by accident.
func TestLoadSymlinkEscape(t *testing.T) {
	base := t.TempDir()
	writeTree(t, base, map[string]string{
		"secret.txt": "private",
		"job/j.yaml": "tasks: [{argv: [x], size: 1, wall_clock_limit: 1m, inputs: [link.txt]}]\n",
		"job/ok.txt": "fine",
	})
	if err := os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(base, "job", "link.txt")); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
	job, err := Load(filepath.Join(base, "job", "j.yaml"), Options{})
	if err == nil {
		t.Fatalf("the link was followed: %+v", job.Tasks[0].Inputs)
	}
	if !strings.Contains(err.Error(), `tasks[0].inputs[0]: cannot read input "link.txt": path escapes from parent`) {
		t.Errorf("error: %v", err)
	}
	// A link that stays inside is followed.
	if err := os.Remove(filepath.Join(base, "job", "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok.txt", filepath.Join(base, "job", "link.txt")); err != nil {
		t.Fatal(err)
	}
	job, err = Load(filepath.Join(base, "job", "j.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(job.Tasks[0].Inputs[0].Data); got != "fine" {
		t.Errorf("data %q", got)
	}
}

func TestLoadJobFileErrors(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"big.yaml": "tasks: []\n" + strings.Repeat("#", 200)})
	missing := filepath.Join(dir, "nope.yaml")
	_, err := Load(missing, Options{})
	if err == nil || err.Error() != missing+": cannot read job file: no such file or directory" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	_, err = Load(big, Options{MaxFileBytes: 100})
	if err == nil || err.Error() != big+": file is larger than 100 bytes" {
		t.Errorf("big file: %v", err)
	}
	_, err = Load(dir, Options{})
	if err == nil || err.Error() != dir+": not a regular file" {
		t.Errorf("directory: %v", err)
	}
}

// TestLoadOptionsInputFS: an explicit InputFS replaces the job file's
// directory.
func TestLoadOptionsInputFS(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"j.yaml": "tasks: [{argv: [x], size: 1, wall_clock_limit: 1m, inputs: [run.sh]}]\n", "run.sh": "on disk"})
	job, err := Load(filepath.Join(dir, "j.yaml"), Options{InputFS: testFS})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(job.Tasks[0].Inputs[0].Data); got != "#!/bin/sh\necho run\n" {
		t.Errorf("data %q", got)
	}
	if job.Tasks[0].WallClockLimit != time.Minute {
		t.Errorf("wall %v", job.Tasks[0].WallClockLimit)
	}
}
