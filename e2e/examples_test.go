package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scriptPorts finds a BASE_PORT for examples/federation.sh whose six ports
// (base+{0,1,10,11,20,21}) are free on loopback now.
func scriptPorts(t *testing.T) int {
	t.Helper()
	for range 200 {
		base := 20000 + rand.IntN(40000)
		if portsFree(base) {
			return base
		}
	}
	t.Fatal("no free range of ports for examples/federation.sh")
	return 0
}

func portsFree(base int) bool {
	for _, off := range []int{0, 1, 10, 11, 20, 21} {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// script starts examples/federation.sh with PEER set to the test binary.
func script(t *testing.T, work string, base int, extraEnv ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot, "examples", "federation.sh"), work)
	cmd.Env = append(os.Environ(), append([]string{"PEER=" + peerBin, "BASE_PORT=" + strconv.Itoa(base), "TIMEOUT=120"}, extraEnv...)...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// If the test binary dies, the script's trap stops its peers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// waitScript waits for the script to exit (killing it after d) and returns
// its exit code.
func waitScript(t *testing.T, cmd *exec.Cmd, out *syncBuffer, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode()
			}
			t.Fatal(err)
		}
		return 0
	case <-time.After(d):
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		t.Fatalf("examples/federation.sh did not finish within %v:\n%s", d, out.String())
		return -1
	}
}

// assertStopped checks that no peer of the script still listens: the trap
// stopped them all.
func assertStopped(t *testing.T, base int) {
	t.Helper()
	waitFor(t, 45*time.Second, "the script's peers gone (their ports free)", func() (bool, string) {
		return portsFree(base), fmt.Sprintf("ports from %d still in use", base)
	})
}

// TestFederationScript runs examples/federation.sh as the README tells a
// newcomer to, with PEER pointing at the freshly built binary.
func TestFederationScript(t *testing.T) {
	skipShort(t)
	work := t.TempDir()
	base := scriptPorts(t)
	cmd, out := script(t, work, base)
	code := waitScript(t, cmd, out, 5*time.Minute)
	t.Cleanup(func() {
		if t.Failed() {
			for _, org := range []string{"uni-a", "uni-b", "uni-c"} {
				t.Logf("=== %s.log\n%s", org, tail(readFile(filepath.Join(work, org+".log")), 80))
			}
		}
	})
	if code != 0 {
		t.Fatalf("examples/federation.sh: exit %d\n%s", code, out.String())
	}
	s := out.String()
	lines := strings.Split(strings.TrimSpace(s), "\n")
	want := "federation.sh: OK: 24 tasks done, 24 output files returned; the data directories and logs are in " + work
	if !strings.Contains(s, want) {
		t.Fatalf("the script's output lacks %q; it ends with:\n%s", want, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	for _, step := range []string{
		"$ peer init --org uni-a", "--new-federation",
		"$ peer init --org uni-b", "--secret " + filepath.Join(work, "federation.key"),
		"--bootstrap /ip4/127.0.0.1/tcp/" + strconv.Itoa(base) + "/p2p/12D3KooW",
		"ready: organisation uni-c registered, 2 machine(s) offered",
		"$ peer limit set 80% --data", "uni-c: power limit 96 W",
		"submitted job sweep: 8 tasks",
		"task 7 of 8: alpha=1.0 seed=2",
		"$ peer ledger --data",
		"left the federation",
		"members (1):",
	} {
		if !strings.Contains(s, step) {
			t.Errorf("the script's output lacks %q", step)
		}
	}
	for _, org := range []string{"uni-a", "uni-b", "uni-c"} {
		files, _ := filepath.Glob(filepath.Join(work, org, "outputs", "*", "result-*.txt"))
		if len(files) != 8 {
			t.Errorf("%s has %d output files, want 8", org, len(files))
		}
	}
	assertStopped(t, base)
}

// TestFederationScriptInterrupted: Ctrl-C (SIGINT) while the federation is
// up stops every peer the script started.
func TestFederationScriptInterrupted(t *testing.T) {
	skipShort(t)
	work := t.TempDir()
	base := scriptPorts(t)
	cmd, out := script(t, work, base)
	waitFor(t, 2*time.Minute, "the script to start uni-b", func() (bool, string) {
		return strings.Contains(out.String(), "ready: organisation uni-b registered"), out.String()
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := waitScript(t, cmd, out, 2*time.Minute); code != 130 {
		t.Fatalf("interrupted script: exit %d, want 130\n%s", code, out.String())
	}
	assertStopped(t, base)
}

// TestFederationScriptErrors: the script refuses bad setups before it
// starts anything.
func TestFederationScriptErrors(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no binary", []string{"PEER=/nonexistent/peer"}, nil, "run 'make build' first"},
		{"two work directories", nil, []string{"a", "b"}, "usage: federation.sh [WORKDIR]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{filepath.Join(repoRoot, "examples", "federation.sh")}, tc.args...)
			cmd := exec.CommandContext(ctx, "bash", args...)
			cmd.Env = append(append(os.Environ(), "PEER="+peerBin), tc.env...)
			out, err := cmd.CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
				t.Fatalf("want exit 2 and %q; got %v\n%s", tc.want, err, out)
			}
		})
	}
	// A work directory that already holds a federation is refused.
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "uni-b"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot, "examples", "federation.sh"), work)
	cmd.Env = append(os.Environ(), "PEER="+peerBin)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "already exists") {
		t.Fatalf("non-empty work directory: %v\n%s", err, out)
	}
}
