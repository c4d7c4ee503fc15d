// Package peerproc runs real `peer run` processes for the tests that need
// them (e2e/, chaos/): it builds the binary, starts a process with its
// output in log files, waits for a line, and stops, kills, pauses or
// resumes it by pid. It also edits a peer's config.yaml in place.
package peerproc

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// Build compiles ./cmd/peer of the module at repoRoot into dir and returns
// the binary's path.
func Build(repoRoot, dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build ./cmd/peer with the go tool: %w", err)
	}
	bin := filepath.Join(dir, "peer")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/peer")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/peer: %v\n%s", err, out)
	}
	return bin, nil
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call,
// picked at random below the kernel's ephemeral range when there is room
// there. A port of that range (what ":0" gives) can be taken, between this
// call and the caller's bind, by any outgoing connection or ":0" listener
// of the processes running beside (other tests' peers): a peer then failed
// with "address already in use" (seen in e2e's parallel tests).
func FreePort() (int, error) {
	const floor = 10000
	if lo := ephemeralLow(); lo > floor+1000 {
		for range 100 {
			port := floor + rand.IntN(lo-floor)
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err == nil {
				l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of Linux's ephemeral range (32768 by
// default), 0 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// Proc is one running process with its stdout and stderr in files.
type Proc struct {
	Name   string
	Cmd    *exec.Cmd
	Stdout string // file paths
	Stderr string

	done chan struct{}
	err  error // the exit, once done is closed

	mu     sync.Mutex
	paused bool
}

// Start runs bin with args, writing its output to logBase.stdout and
// logBase.stderr. The process dies with the test binary (Pdeathsig).
func Start(name, bin, logBase string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, Stdout: logBase + ".stdout", Stderr: logBase + ".stderr", done: make(chan struct{})}
	so, err := os.Create(p.Stdout)
	if err != nil {
		return nil, err
	}
	se, err := os.Create(p.Stderr)
	if err != nil {
		so.Close()
		return nil, err
	}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = so, se
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		so.Close()
		se.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		so.Close()
		se.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has ended; Err is then its exit.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error (nil for exit code 0), once Done.
func (p *Proc) Err() error { return p.err }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitLine waits until stdout matches re and returns the submatches; it
// fails early if the process exits.
func (p *Proc) WaitLine(re string, d time.Duration) ([]string, error) {
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(d)
	for {
		if m := rx.FindStringSubmatch(ReadFile(p.Stdout)); m != nil {
			return m, nil
		}
		if p.Exited() {
			if m := rx.FindStringSubmatch(ReadFile(p.Stdout)); m != nil {
				return m, nil
			}
			return nil, fmt.Errorf("%s exited (%v) before printing %q:\n%s%s", p.Name, p.err, re, ReadFile(p.Stdout), Tail(ReadFile(p.Stderr), 60))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not print %q within %v:\n%s%s", p.Name, re, d, ReadFile(p.Stdout), Tail(ReadFile(p.Stderr), 60))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Addrs are the full multiaddrs `peer run` printed ("listening on …").
func (p *Proc) Addrs() []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(ReadFile(p.Stdout)))
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok && strings.Contains(a, "/p2p/") {
			out = append(out, a)
		}
	}
	return out
}

// Kill9 kills the process with SIGKILL, as a crash, and waits for it.
func (p *Proc) Kill9() error {
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil && !p.Exited() {
		return fmt.Errorf("kill -9 %s: %w", p.Name, err)
	}
	<-p.done
	return nil
}

// Pause sends SIGSTOP to the process only (its children, e.g. the tasks
// it runs, keep running, as they would if the daemon hung).
func (p *Proc) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s: %w", p.Name, err)
	}
	p.paused = true
	return nil
}

// Resume sends SIGCONT.
func (p *Proc) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.Cmd.Process.Signal(syscall.SIGCONT); err != nil && !p.Exited() {
		return fmt.Errorf("SIGCONT %s: %w", p.Name, err)
	}
	p.paused = false
	return nil
}

// Paused reports whether Pause was the last of Pause and Resume.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Stop resumes a paused process, sends SIGTERM, waits up to grace for a
// clean stop, then SIGKILL. It returns the exit error (nil for code 0).
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return p.err
	}
	if p.Paused() {
		_ = p.Resume()
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	return p.err
}

// ReadFile is the file's content, or the error as text.
func ReadFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	return string(b)
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// EditConfig sets keys ("heartbeat.timeout") of a config.yaml written by
// peer init to YAML values ("500ms", "[/ip4/…]"), keeping the rest.
func EditConfig(path string, set map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for key, val := range set {
		n := doc.Content[0]
		parts := strings.Split(key, ".")
		for i, part := range parts {
			found := false
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == part {
					n, found = n.Content[j+1], true
					break
				}
			}
			if !found {
				return fmt.Errorf("%s: no key %s (at %s)", path, key, strings.Join(parts[:i+1], "."))
			}
		}
		var v yaml.Node
		if err := yaml.Unmarshal([]byte(val), &v); err != nil || len(v.Content) != 1 {
			return fmt.Errorf("%s: value %q for %s: %v", path, val, key, err)
		}
		*n = *v.Content[0]
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
