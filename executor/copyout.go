package executor

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"golang.org/x/sys/unix"
)

// The outputs of a run are copied out of its work directory by the output
// copier (supervise.CopierArg0), never read by the peer itself, which may
// be root: the copier has no privilege the task lacked (docs/EXECUTOR.md,
// "Outputs"). The peer only reads what the copier streams, as hostile.

// copyJob is one run's outputs to copy.
type copyJob struct {
	work, staging string
	// names are the listed outputs, slash-separated, relative to work.
	names []string
	uid   uint32
	// cred is the run_as user, nil for the peer's; sandbox the Landlock
	// ruleset of a sandboxed run, nil for none.
	cred     *syscall.Credential
	sandbox  *supervise.Landlock
	maxBytes int64
	maxFiles int
}

// stagingDir holds a run's copied outputs until they are delivered:
// TasksDir/<id>/outputs-N, the peer's (0700), outside the attempt
// directory that the task's user or sandbox may reach.
func (e *ProcessExecutor) stagingDir(id string, attempt int) string {
	return filepath.Join(e.cfg.TasksDir, id, "outputs-"+strconv.Itoa(attempt))
}

// stage has j's outputs copied into j.staging and returns them (relative
// path → staged file), the names the copier skipped with why, or the
// error that left nothing staged.
func (e *ProcessExecutor) stage(j copyJob) (map[string]string, []string, *taskError) {
	if err := os.RemoveAll(j.staging); err != nil {
		return nil, nil, failf(ReasonOutputFailed, "outputs: staging directory: %v", err)
	}
	if err := os.Mkdir(j.staging, 0o700); err != nil {
		return nil, nil, failf(ReasonOutputFailed, "outputs: staging directory: %v", err)
	}
	outs, skipped, err := e.runCopier(j)
	if err != nil {
		_ = os.RemoveAll(j.staging)
		reason := ReasonOutputFailed
		if errors.Is(err, errTooMany) {
			reason = ReasonOutputTooLarge
		}
		return nil, skipped, failf(reason, "outputs: %v", err)
	}
	return outs, skipped, nil
}

// copyTimeout bounds a copy: a minute, plus 20 MiB/s of the size limit.
func copyTimeout(maxBytes int64) time.Duration {
	return time.Minute + time.Duration(maxBytes/(20<<20))*time.Second
}

// runCopier runs the copier on j and takes in its stream.
func (e *ProcessExecutor) runCopier(j copyJob) (map[string]string, []string, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer cfgW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return nil, nil, err
	}
	defer outR.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		outW.Close()
		return nil, nil, err
	}
	defer repR.Close()
	stderr := &boundedBuffer{max: 2048}
	copier := e.copierPath
	if copier == "" {
		copier = e.cfg.SupervisorPath
	}
	cmd := &exec.Cmd{
		Path:       copier,
		Args:       []string{supervise.CopierArg0},
		Env:        []string{supervise.Env + "=" + supervise.CopierMode},
		Dir:        "/",
		Stdout:     outW,
		Stderr:     stderr,
		ExtraFiles: []*os.File{cfgR, repW},
		// Its stderr is copied by a goroutine of Wait's: whatever else
		// holds that pipe must not hold the run once the copier is gone.
		WaitDelay: 2 * time.Second,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: j.cred,
		},
	}
	done, err := startConfined(cmd, j.sandbox)
	cfgR.Close()
	outW.Close()
	repW.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("start the output copier %s: %w", copier, err)
	}
	var timedOut atomic.Bool
	limit := copyTimeout(j.maxBytes)
	timer := time.AfterFunc(limit, func() {
		timedOut.Store(true)
		_ = cmd.Process.Kill() // not by pid: it may be reaped already
	})
	defer timer.Stop()
	go func() {
		// Ends when the copier has read it, or exited (EPIPE).
		_ = json.NewEncoder(cfgW).Encode(supervise.CopyConfig{Root: j.work, Names: j.names, UID: int(j.uid), MaxBytes: j.maxBytes})
		cfgW.Close()
	}()
	report := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(repR, 1<<20))
		report <- b
	}()
	want := make(map[string]bool, len(j.names))
	for _, n := range j.names {
		want[n] = true
	}
	outs, rerr := receiveOutputs(outR, j.staging, want, j.maxBytes, j.maxFiles)
	outR.Close() // a copier still writing gets EPIPE
	if rerr != nil {
		_ = cmd.Process.Kill()
	}
	werr := <-done
	// A process the copier left holding the report pipe must not hold
	// this run.
	_ = repR.SetReadDeadline(time.Now().Add(2 * time.Second))
	rep := <-report
	switch {
	case timedOut.Load():
		return nil, nil, fmt.Errorf("the output copier did not finish within %v", limit)
	case rerr != nil:
		return nil, nil, rerr
	case werr != nil:
		var ee *exec.ExitError
		if errors.As(werr, &ee) && ee.ExitCode() == supervise.CopierExitTooLarge {
			return nil, nil, fmt.Errorf("%s: %w", stderr.text(), errTooMany)
		}
		return nil, nil, fmt.Errorf("the output copier failed (%v): %s", werr, stderr.text())
	}
	skipped, err := checkReport(rep, want, outs)
	return outs, skipped, err
}

// startConfined starts cmd from a thread of its own with no_new_privs
// and, with sandbox, in that Landlock sandbox, which cmd inherits. The
// thread is never given back: it ends with its goroutine, once cmd has
// been waited for (cmd's death signal is tied to it). The Go runtime
// does not clone new threads from a locked one.
func startConfined(cmd *exec.Cmd, sandbox *supervise.Landlock) (<-chan error, error) {
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			started <- fmt.Errorf("no_new_privs: %w", err)
			return
		}
		if sandbox != nil {
			if err := sandbox.RestrictThread(); err != nil {
				started <- fmt.Errorf("sandbox: %w", err)
				return
			}
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// Per-entry allowance of the stream beyond the files' bytes: a header,
// an extended header for a long name, padding.
const streamEntryOverhead = 16 << 10

// receiveOutputs takes a copier's tar stream into staging, trusting none
// of it: every entry must be a regular file named exactly as one of want
// (a clean relative path), each at most once, within maxFiles files and
// maxBytes bytes, and the stream itself within those bounds. It writes
// through an os.Root on staging, creating files that did not exist. On an
// error the caller removes staging.
func receiveOutputs(r io.Reader, staging string, want map[string]bool, maxBytes int64, maxFiles int) (map[string]string, error) {
	root, err := os.OpenRoot(staging)
	if err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	defer root.Close()
	capped := &cappedReader{r: r, left: maxBytes + int64(maxFiles+2)*streamEntryOverhead}
	tr := tar.NewReader(capped)
	out := make(map[string]string)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("outputs stream from the copier: %w", err)
		}
		name := hdr.Name
		if err := checkEntry(hdr, want, out); err != nil {
			return nil, fmt.Errorf("outputs stream from the copier: entry %q: %w", name, err)
		}
		if total += hdr.Size; total > maxBytes {
			return nil, fmt.Errorf("outputs stream from the copier: more than %d bytes: %w", maxBytes, errTooMany)
		}
		if len(out) >= maxFiles {
			return nil, fmt.Errorf("outputs stream from the copier: more than %d files: %w", maxFiles, errTooMany)
		}
		if err := writeStaged(root, name, tr); err != nil {
			return nil, fmt.Errorf("outputs: stage %q: %w", name, err)
		}
		out[filepath.FromSlash(name)] = filepath.Join(staging, filepath.FromSlash(name))
	}
}

// checkEntry checks one header of the copier's stream.
func checkEntry(hdr *tar.Header, want map[string]bool, got map[string]string) error {
	name := hdr.Name
	switch {
	case hdr.Typeflag != tar.TypeReg:
		return fmt.Errorf("type %q: only regular files may be sent", hdr.Typeflag)
	case name == "" || path.Clean(name) != name || !filepath.IsLocal(filepath.FromSlash(name)):
		return errors.New("not a clean relative path")
	case !want[name]:
		return errors.New("not one of the outputs asked for")
	case got[filepath.FromSlash(name)] != "":
		return errors.New("sent twice")
	case hdr.Size < 0:
		return fmt.Errorf("negative size %d", hdr.Size)
	}
	return nil
}

// writeStaged creates name under root and copies the entry's data.
func writeStaged(root *os.Root, name string, r io.Reader) error {
	if d := path.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkReport reads the copier's report: the names it skipped, each one
// asked for and not sent. A name neither sent nor reported is skipped too.
func checkReport(b []byte, want map[string]bool, got map[string]string) ([]string, error) {
	var rep supervise.CopyReport
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("the output copier's report: %v", err)
	}
	said := make(map[string]bool)
	var skipped []string
	for _, s := range rep.Skipped {
		if !want[s.Name] || got[filepath.FromSlash(s.Name)] != "" || said[s.Name] {
			return nil, fmt.Errorf("the output copier's report names %q, not an output it was asked for and did not send", s.Name)
		}
		said[s.Name] = true
		skipped = append(skipped, fmt.Sprintf("%s (%s)", s.Name, printable(s.Reason, 200)))
	}
	var missing []string
	for n := range want {
		if got[filepath.FromSlash(n)] == "" && !said[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	for _, n := range missing {
		skipped = append(skipped, n+" (the output copier did not send it)")
	}
	return skipped, nil
}

// printable is s cut to max bytes, with control characters replaced.
func printable(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// cappedReader fails once more than left bytes were read.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("the stream is longer than its files allow: %w", errTooMany)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return printable(strings.TrimSpace(string(b.buf)), b.max)
}
