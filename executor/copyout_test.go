package executor

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

// taskUser is the run_as user coopgrid-task, skipping (saying why) unless
// the test runs as root and the user exists.
func taskUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching to the run_as user coopgrid-task needs root")
	}
	u, err := user.Lookup("coopgrid-task")
	if err != nil {
		t.Skipf("no run_as user coopgrid-task (the systemd unit creates it): %v", err)
	}
	a, _ := strconv.ParseUint(u.Uid, 10, 32)
	b, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(a), uint32(b)
}

func needLandlock(t *testing.T) {
	t.Helper()
	if supervise.LandlockABI() < 1 {
		t.Skip("this kernel has no Landlock: the sandboxed copier cannot be tried")
	}
}

// TestOutputsPlantedRefused: a task that plants, among its outputs, a
// hard link, a symbolic link, a FIFO, a device and a file it does not own
// gets none of them shipped and each named with its reason; its own file
// ships, from the staging directory. Devices and another owner's file need
// root (the task runs as the test's user).
func TestOutputsPlantedRefused(t *testing.T) {
	root := os.Geteuid() == 0
	pol := allowShell()
	pol.Allow = append(pol.Allow, "ln", "mkfifo", "mknod", "chown")
	e := newProc(t, pol)
	script := `mkdir out
echo good > out/good.txt
echo mine > keep.dat
ln keep.dat out/hard.txt
ln -s /etc/passwd out/link.txt
mkfifo out/fifo.txt
`
	want := map[string]string{
		"out/hard.txt": "2 hard links",
		"out/link.txt": "symbolic link",
		"out/fifo.txt": "named pipe",
	}
	if root {
		script += `mknod out/dev.txt c 1 3
echo x > out/notmine.txt
chown 65534 out/notmine.txt
`
		want["out/dev.txt"] = "character device"
		want["out/notmine.txt"] = "owned by uid 65534"
	} else {
		t.Log("not root: the task cannot make a device or give a file away; those two cases are not tried")
	}
	s := sh("planted", script)
	s.OutputPatterns = []string{"out"}
	r := run(t, e, s)
	if !r.OK() {
		t.Fatalf("%s: %s (stderr %q)", r.Reason, r.Detail, readStream(t, r.StderrPath))
	}
	if len(r.Outputs) != 1 || readFile(t, r.Outputs["out/good.txt"]) != "good\n" {
		t.Fatalf("outputs %v: want out/good.txt only", r.Outputs)
	}
	if staging := e.stagingDir("planted", r.Attempt); !strings.HasPrefix(r.Outputs["out/good.txt"], staging+"/") {
		t.Errorf("output %s not staged under %s", r.Outputs["out/good.txt"], staging)
	}
	for name, why := range want {
		if !strings.Contains(r.Detail, name+" (") || !strings.Contains(r.Detail, why) {
			t.Errorf("detail %q does not name %s (%s)", r.Detail, name, why)
		}
	}
}

// swapToSecret replaces the listed outputs of work, after the listing,
// with ways to the secret: a symbolic link (a.txt), a hard link (b.txt),
// a directory turned into a link (d/), and, with rootCopy, a copy of it
// owned by root (c.txt). e.txt is left alone.
func swapToSecret(t *testing.T, secretDir, secret string, rootCopy bool) func(work string) {
	return func(work string) {
		must := func(err error) {
			if err != nil {
				t.Error(err)
			}
		}
		for _, n := range []string{"a.txt", "b.txt"} {
			must(os.Remove(filepath.Join(work, n)))
		}
		must(os.Symlink(secret, filepath.Join(work, "a.txt")))
		must(os.Link(secret, filepath.Join(work, "b.txt")))
		must(os.RemoveAll(filepath.Join(work, "d")))
		must(os.Symlink(secretDir, filepath.Join(work, "d")))
		if rootCopy {
			b, err := os.ReadFile(secret)
			must(err)
			must(os.Remove(filepath.Join(work, "c.txt")))
			must(os.WriteFile(filepath.Join(work, "c.txt"), b, 0o600))
		}
	}
}

// TestOutputSwapAfterListing: the listed outputs are swapped for ways to
// a secret of the peer between the listing and the copy (as a process of
// the task that outlived it could): the copier, as the task's user or in
// its sandbox, ships none of them and says why; the untouched output
// ships. Run as the run_as user coopgrid-task, and in the Landlock
// sandbox of a task that runs as the peer's user.
func TestOutputSwapAfterListing(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T) Policy
		cfg   func(c *ProcessConfig)
	}{
		{"run_as", func(t *testing.T) Policy {
			taskUser(t)
			return Policy{Allow: []string{"sh"}, RunAs: "coopgrid-task"}
		}, func(c *ProcessConfig) {}},
		{"landlock", func(t *testing.T) Policy {
			needLandlock(t)
			return Policy{Allow: []string{"sh"}}
		}, func(c *ProcessConfig) { c.Landlock = LandlockAlways }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol := c.setup(t)
			data := searchableTempDir(t)
			secretDir := filepath.Join(data, "keys")
			if err := os.Mkdir(secretDir, 0o700); err != nil {
				t.Fatal(err)
			}
			secret := filepath.Join(secretDir, "b.txt") // d/b.txt, through the swapped d
			if err := os.WriteFile(secret, []byte("peer-secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := ProcessConfig{TasksDir: filepath.Join(data, "tasks"), Policy: pol, DisableRAPL: true}
			c.cfg(&cfg)
			e := newProcCfg(t, cfg)
			// A root-owned copy stands for a file the task's user cannot
			// read; in the sandbox the test's own file would be the
			// task's own.
			e.afterListing = swapToSecret(t, secretDir, secret, c.name == "run_as")
			s := TaskSpec{ID: "swap", Argv: []string{"sh", "-c", "for f in a b c e; do echo $f > $f.txt; done; mkdir d; echo b > d/b.txt"},
				OutputPatterns: []string{"*.txt", "d"}}
			r := run(t, e, s)
			if !r.OK() {
				t.Fatalf("%s: %s", r.Reason, r.Detail)
			}
			for rel, p := range r.Outputs {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), "peer-secret") {
					t.Errorf("output %s shipped the secret", rel)
				}
			}
			wantOut := map[string]string{"e.txt": "e\n"}
			if c.name != "run_as" {
				wantOut["c.txt"] = "c\n"
			}
			if len(r.Outputs) != len(wantOut) {
				t.Errorf("outputs %v: want %v", r.Outputs, wantOut)
			}
			for rel, body := range wantOut {
				if got := readFile(t, r.Outputs[rel]); got != body {
					t.Errorf("%s: %q, want %q", rel, got, body)
				}
			}
			// As coopgrid-task the copier cannot even open the hard link
			// to the peer's file; in the sandbox (the work directory is
			// the copier's) the link count refuses it.
			hard := "b.txt (not a regular file: it has 2 hard links"
			if c.name == "run_as" {
				hard = "b.txt (the run's user may not read it)"
			}
			for _, w := range []string{"a.txt (a symbolic link", hard, "d/b.txt (a symbolic link"} {
				if !strings.Contains(r.Detail, w) {
					t.Errorf("detail %q does not say %q", r.Detail, w)
				}
			}
			if c.name == "run_as" && !strings.Contains(r.Detail, "c.txt (the run's user may not read it)") {
				t.Errorf("detail %q does not refuse c.txt", r.Detail)
			}
		})
	}
}

// TestCopierCannotReadPeerSecret: the copier's privileges are the task's,
// whatever the open checks let through. It is asked for a key in the
// peer's data directory, owned as expected (the peer's), regular, one
// link: as the peer with nothing dropped (the unsafe opt-in) it copies
// it, which is what the other cases would do without their drop; as the
// run_as user coopgrid-task, and in the Landlock sandbox that hides the
// data directory, it cannot read it and nothing is staged.
func TestCopierCannotReadPeerSecret(t *testing.T) {
	cases := []struct {
		name string
		// job completes the copy job; it skips when impossible here.
		job  func(t *testing.T, j *copyJob, data string)
		leak bool
	}{
		{"peer user, nothing dropped", func(t *testing.T, j *copyJob, data string) {}, true},
		{"run_as", func(t *testing.T, j *copyJob, data string) {
			uid, gid := taskUser(t)
			j.cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
		}, false},
		{"landlock", func(t *testing.T, j *copyJob, data string) {
			needLandlock(t)
			work := filepath.Join(data, "tasks", "x", "attempt-1", "work")
			if err := os.MkdirAll(work, 0o700); err != nil {
				t.Fatal(err)
			}
			j.sandbox = &supervise.Landlock{Hide: data, Allow: []string{work}}
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := searchableTempDir(t)
			if err := os.WriteFile(filepath.Join(data, "federation.key"), []byte("peer-secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			e := newProc(t, allowShell())
			j := copyJob{work: data, staging: filepath.Join(t.TempDir(), "staging"), names: []string{"federation.key"},
				uid: uint32(os.Geteuid()), maxBytes: 1 << 20, maxFiles: 10}
			c.job(t, &j, data)
			outs, skipped, te := e.stage(j)
			if te != nil {
				t.Fatalf("copy: %v", te)
			}
			if c.leak {
				if readFile(t, outs["federation.key"]) != "peer-secret" {
					t.Fatalf("the undropped copier did not copy the key (outputs %v, skipped %v): the test proves nothing", outs, skipped)
				}
				return
			}
			if len(outs) != 0 {
				t.Fatalf("the copier copied %v", outs)
			}
			if len(skipped) != 1 || !strings.Contains(skipped[0], "federation.key (the run's user may not read it)") {
				t.Errorf("skipped %q", skipped)
			}
			ents, _ := os.ReadDir(j.staging)
			if len(ents) != 0 {
				t.Errorf("staging holds %v", ents)
			}
		})
	}
}

// tarOf builds a tar stream of regular entries (or one typed entry).
type tarEntry struct {
	name string
	typ  byte
	body string
	size int64 // header size when > 0, else len(body)
}

func tarOf(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, en := range entries {
		typ := en.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		size := int64(len(en.body))
		if en.size > 0 {
			size = en.size
		}
		h := &tar.Header{Name: en.name, Typeflag: typ, Size: size, Mode: 0o600, Format: tar.FormatPAX}
		if typ == tar.TypeSymlink {
			h.Linkname, h.Size = "/etc/passwd", 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(en.body)); err != nil && en.size == 0 {
			t.Fatal(err)
		}
	}
	// A short body (size > len(body)) leaves the stream truncated: Close
	// says so, which is the point.
	_ = tw.Close()
	return buf.Bytes()
}

// TestReceiveOutputsRefusesHostileStream: the peer's reader of the
// copier's stream takes only the regular files it asked for, by clean
// relative names, once each, within the limits; anything else is refused
// with a clear error and nothing is written outside staging.
func TestReceiveOutputsRefusesHostileStream(t *testing.T) {
	want := map[string]bool{"a.txt": true, "d/b.txt": true}
	cases := []struct {
		name    string
		stream  []tarEntry
		err     string
		tooMany bool
	}{
		{"parent", []tarEntry{{name: "../x", body: "evil"}}, `"../x": not a clean relative path`, false},
		{"absolute", []tarEntry{{name: "/tmp/x", body: "evil"}}, "not a clean relative path", false},
		{"unclean", []tarEntry{{name: "d/../a.txt", body: "evil"}}, "not a clean relative path", false},
		{"unrequested", []tarEntry{{name: "x", body: "evil"}}, `"x": not one of the outputs asked for`, false},
		{"twice", []tarEntry{{name: "a.txt", body: "1"}, {name: "a.txt", body: "2"}}, "sent twice", false},
		{"symlink", []tarEntry{{name: "a.txt", typ: tar.TypeSymlink}}, "only regular files", false},
		{"directory", []tarEntry{{name: "d", typ: tar.TypeDir}}, "only regular files", false},
		{"oversize", []tarEntry{{name: "a.txt", body: strings.Repeat("x", 200)}}, "more than 100 bytes", true},
		{"truncated", []tarEntry{{name: "a.txt", body: "short", size: 50}}, "unexpected EOF", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			staging := filepath.Join(parent, "staging")
			if err := os.Mkdir(staging, 0o700); err != nil {
				t.Fatal(err)
			}
			_, err := receiveOutputs(bytes.NewReader(tarOf(t, c.stream...)), staging, want, 100, 10)
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			if errors.Is(err, errTooMany) != c.tooMany {
				t.Errorf("error %v: too large %v, want %v", err, !c.tooMany, c.tooMany)
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 || ents[0].Name() != "staging" {
				t.Errorf("written beside staging: %v", ents)
			}
			if _, err := os.Lstat("/tmp/x"); err == nil && c.name == "absolute" {
				t.Error("/tmp/x written")
			}
		})
	}
	t.Run("too many files", func(t *testing.T) {
		staging := t.TempDir()
		_, err := receiveOutputs(bytes.NewReader(tarOf(t, tarEntry{name: "a.txt", body: "1"}, tarEntry{name: "d/b.txt", body: "2"})), staging, want, 100, 1)
		if !errors.Is(err, errTooMany) || !strings.Contains(err.Error(), "more than 1 files") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("endless stream", func(t *testing.T) {
		// Extended headers without end: cut at the stream's bound.
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Size: 0, PAXRecords: map[string]string{"comment": strings.Repeat("x", 60<<10)}})
		_ = tw.Close()
		_, err := receiveOutputs(bytes.NewReader(buf.Bytes()), t.TempDir(), want, 100, 1)
		if !errors.Is(err, errTooMany) {
			t.Fatalf("error %v, want the stream refused as too long", err)
		}
	})
	t.Run("good", func(t *testing.T) {
		staging := t.TempDir()
		got, err := receiveOutputs(bytes.NewReader(tarOf(t, tarEntry{name: "a.txt", body: "1"}, tarEntry{name: "d/b.txt", body: "2"})), staging, want, 100, 10)
		if err != nil || len(got) != 2 || readFile(t, got["d/b.txt"]) != "2" || got["a.txt"] != filepath.Join(staging, "a.txt") {
			t.Fatalf("%v %v", got, err)
		}
	})
}

// TestHostileCopierStandIn: a real process in the copier's place (a
// script that writes a crafted stream) cannot make the peer write outside
// its staging directory nor ship what it was not asked for: the run gets
// output_failed (output_too_large for oversize data) with the reason, no
// outputs, and the staging directory is gone.
func TestHostileCopierStandIn(t *testing.T) {
	cases := []struct {
		name   string
		stream []tarEntry
		reason string
		detail string
	}{
		{"parent", []tarEntry{{name: "../x", body: "evil"}}, ReasonOutputFailed, `"../x": not a clean relative path`},
		{"unrequested", []tarEntry{{name: "out.txt", body: "ok"}, {name: "secret.txt", body: "evil"}}, ReasonOutputFailed, `"secret.txt": not one of the outputs asked for`},
		{"oversize", []tarEntry{{name: "out.txt", body: strings.Repeat("x", 5000)}}, ReasonOutputTooLarge, "more than 1000 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			stream := filepath.Join(dir, "stream.tar")
			if err := os.WriteFile(stream, tarOf(t, c.stream...), 0o644); err != nil {
				t.Fatal(err)
			}
			standIn := filepath.Join(dir, "copier")
			if err := os.WriteFile(standIn, []byte("#!/bin/sh\nexec cat "+stream+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			pol := allowShell()
			pol.MaxOutputBytes = 1000
			e := newProc(t, pol)
			e.copierPath = standIn
			s := sh("hostile", "echo out > out.txt")
			s.OutputPatterns = []string{"*.txt"}
			r := run(t, e, s)
			if r.Reason != c.reason || !strings.Contains(r.Detail, c.detail) {
				t.Fatalf("result %q %q, want %q with %q", r.Reason, r.Detail, c.reason, c.detail)
			}
			if len(r.Outputs) != 0 {
				t.Errorf("outputs %v", r.Outputs)
			}
			taskDir := filepath.Join(e.cfg.TasksDir, "hostile")
			for _, p := range []string{e.stagingDir("hostile", r.Attempt), filepath.Join(taskDir, "x"), filepath.Join(e.cfg.TasksDir, "x")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s exists", p)
				}
			}
		})
	}
}

// TestCopierSandboxRefusesLinkedWorkDir: a work directory replaced by a
// symbolic link to the data directory (a sandboxed task may rename its
// own work directory) does not grant the copier the link's target: the
// sandbox is refused and nothing is copied.
func TestCopierSandboxRefusesLinkedWorkDir(t *testing.T) {
	needLandlock(t)
	data := searchableTempDir(t)
	if err := os.WriteFile(filepath.Join(data, "federation.key"), []byte("peer-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	attempt := filepath.Join(data, "tasks", "x", "attempt-1")
	if err := os.MkdirAll(attempt, 0o711); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(attempt, "work")
	if err := os.Symlink(data, work); err != nil {
		t.Fatal(err)
	}
	e := newProc(t, allowShell())
	j := copyJob{work: work, staging: filepath.Join(t.TempDir(), "staging"), names: []string{"federation.key"},
		uid: uint32(os.Geteuid()), maxBytes: 1 << 20, maxFiles: 10,
		sandbox: &supervise.Landlock{Hide: data, Allow: []string{work}}}
	outs, _, te := e.stage(j)
	if te == nil || !strings.Contains(te.detail, "symbolic link") {
		t.Fatalf("copy through a linked work directory: outputs %v, error %v", outs, te)
	}
	if _, err := os.Stat(j.staging); err == nil {
		t.Error("the staging directory is left")
	}
}

// BenchmarkStageOutputs: one run's outputs (one 4 KiB file) copied out by
// the copier process into a staging directory.
func BenchmarkStageOutputs(b *testing.B) {
	dir := b.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "out.txt"), bytes.Repeat([]byte("x"), 4096), 0o600); err != nil {
		b.Fatal(err)
	}
	e, err := NewProcessExecutor(ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Policy: allowShell(), DisableRAPL: true, Logger: quiet, Machines: testMachines})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	for i := 0; b.Loop(); i++ {
		j := copyJob{work: work, staging: filepath.Join(dir, "staging-"+strconv.Itoa(i)), names: []string{"out.txt"},
			uid: uint32(os.Geteuid()), maxBytes: 1 << 20, maxFiles: 10}
		if _, _, te := e.stage(j); te != nil {
			b.Fatal(te)
		}
	}
}
