package jobfile

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; an error comes with no job, is made of
// *Errors naming the file, and names the file on every line; a job that
// parses holds every promise of the Task documentation.
//
// The seed corpus is the example files plus testdata/fuzz/FuzzParse.
// Run longer with: go test -run '^$' -fuzz FuzzParse ./jobfile/
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(examplesDir, "*"))
	for _, p := range files {
		ext := filepath.Ext(p)
		if ext != ".yaml" && ext != ".json" {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, ext == ".json")
	}
	// A small task limit keeps each input cheap; the other limits are the
	// defaults.
	opts := Options{MaxTasks: 500, InputFS: testFS}
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		name := "fz.yaml"
		if asJSON {
			name = "fz.json"
		}
		job, err := Parse(name, data, opts)
		if err != nil {
			if job != nil {
				t.Fatal("job returned with an error")
			}
			var e *Error
			if !errors.As(err, &e) || e.File != name {
				t.Fatalf("error %q is not an *Error naming the file", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, name+":") {
					t.Fatalf("error line %q does not name the file", line)
				}
			}
			return
		}
		checkJob(t, job, opts.withDefaults())
	})
}

// checkJob asserts what a parsed Job promises.
func checkJob(t *testing.T, job *Job, opts Options) {
	t.Helper()
	if !validName(job.Name) {
		t.Fatalf("job name %q", job.Name)
	}
	if len(job.Tasks) == 0 || len(job.Tasks) > opts.MaxTasks {
		t.Fatalf("%d tasks", len(job.Tasks))
	}
	names := map[string]bool{}
	for i, tk := range job.Tasks {
		if !validName(tk.Name) || names[tk.Name] {
			t.Fatalf("task %d: name %q invalid or duplicate", i, tk.Name)
		}
		names[tk.Name] = true
		if len(tk.Argv) == 0 || tk.Argv[0] == "" || len(tk.Argv) > maxArgs {
			t.Fatalf("task %d: argv %q", i, tk.Argv)
		}
		for _, a := range tk.Argv {
			if len(a) > maxArgBytes || strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("task %d: argument %q", i, a)
			}
		}
		for k, v := range tk.Env {
			if !validEnvKey(k) || reservedEnv(k) || len(v) > maxArgBytes || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("task %d: env %q=%q", i, k, v)
			}
		}
		if tk.Env != nil && len(tk.Env) == 0 {
			t.Fatalf("task %d: empty non-nil env", i)
		}
		if tk.SizeMFlop <= 0 || tk.SizeMFlop > maxSizeMFlop {
			t.Fatalf("task %d: size %d", i, tk.SizeMFlop)
		}
		if tk.WallClockLimit <= 0 || tk.WallClockLimit > opts.MaxWallClock {
			t.Fatalf("task %d: wall-clock limit %v", i, tk.WallClockLimit)
		}
		seen := map[string]bool{}
		for _, o := range tk.Outputs {
			if !localClean(o) || seen[o] {
				t.Fatalf("task %d: output %q escapes, is not clean or is repeated", i, o)
			}
			if _, err := path.Match(o, ""); err != nil {
				t.Fatalf("task %d: output %q: %v", i, o, err)
			}
			seen[o] = true
		}
		seen = map[string]bool{}
		for _, in := range tk.Inputs {
			if !localClean(in.Name) || seen[in.Name] {
				t.Fatalf("task %d: input %q escapes, is not clean or is repeated", i, in.Name)
			}
			if int64(len(in.Data)) > opts.MaxInputFileBytes {
				t.Fatalf("task %d: input %q of %d bytes", i, in.Name, len(in.Data))
			}
			seen[in.Name] = true
		}
	}
}

func localClean(p string) bool {
	return p != "" && len(p) <= maxPathLen && path.Clean(p) == p && !path.IsAbs(p) && p != "." && p != ".." && !strings.HasPrefix(p, "../")
}

// TestCheckJobOnValidCases runs the fuzz checks over the examples, so that
// checkJob itself is exercised by a plain `go test`.
func TestCheckJobOnValidCases(t *testing.T) {
	for _, name := range []string{"sweep.yaml", "checkpoint-counter.yaml", "hello.json"} {
		checkJob(t, loadExample(t, name), Options{}.withDefaults())
	}
}
