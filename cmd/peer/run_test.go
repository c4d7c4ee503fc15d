package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// lockedBuffer is an io.Writer safe to read while a command writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemon is `peer run` in this process, stopped as by SIGTERM.
type daemon struct {
	out, errs lockedBuffer
	stop      context.CancelFunc
	exit      chan int
}

func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{stop: cancel, exit: make(chan int, 1)}
	go func() { d.exit <- run(ctx, append([]string{"run"}, args...), &d.out, &d.errs) }()
	t.Cleanup(func() { d.shutdown(t) })
	return d
}

// wait returns the first match of re in the daemon's output.
func (d *daemon) wait(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(d.out.String()); m != nil {
			return m
		}
		select {
		case code := <-d.exit:
			d.exit <- code
			t.Fatalf("peer run exited with %d before printing %q:\n%s\n%s", code, re, d.out.String(), d.errs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("peer run did not print %q:\n%s\n%s", re, d.out.String(), d.errs.String())
	return nil
}

func (d *daemon) shutdown(t *testing.T) int {
	d.stop()
	select {
	case code := <-d.exit:
		d.exit <- code
		return code
	case <-time.After(40 * time.Second):
		t.Fatalf("peer run did not stop:\n%s", d.out.String())
		return -1
	}
}

// TestRunCommand: two institutions initialise; the first runs and prints
// its addresses and API; the second joins through the first's printed
// address; both answer on their APIs; SIGTERM stops them cleanly; the
// second restarts from its data directory alone.
func TestRunCommand(t *testing.T) {
	tmp := t.TempDir()
	machines := filepath.Join(tmp, "machines.yaml")
	if err := os.WriteFile(machines, []byte("machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	local := []string{"--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0"}
	if code, _, errs := runCLI(t, append([]string{"init", "--org", "uni-a", "--data", a, "--machines", machines, "--new-federation"}, local...)...); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := runCLI(t, append([]string{"init", "--org", "uni-b", "--data", b, "--machines", machines, "--secret", filepath.Join(a, "federation.key")}, local...)...); code != 0 {
		t.Fatal(errs)
	}

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{nil, 2, "--data is required"},
			{[]string{"--data", tmp}, 1, "peer init"},
			{[]string{"--data", b}, 2, "--bootstrap"}, // not a member, no way to join
			{[]string{"--data", a, "--listen", "/ip4/127.0.0.1/udp/1"}, 2, "--listen"},
			{[]string{"--data", a, "--bootstrap", "/ip4/127.0.0.1/tcp/1"}, 2, "--bootstrap"},
		} {
			code, _, errs := runCLI(t, append([]string{"run"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("run %v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
			}
		}
	})

	da := startDaemon(t, "--data", a)
	addr := da.wait(t, `listening on (/ip4/127\.0\.0\.1/tcp/\d+/p2p/\w+)`)[1]
	apiA := da.wait(t, `API on http://(127\.0\.0\.1:\d+)`)[1]
	da.wait(t, `ready: organisation uni-a registered, 1 machine`)

	// Joining needs an invitation: without one the leader refuses.
	if code, _, errs := runCLI(t, "run", "--data", b, "--bootstrap", addr); code == 0 || !strings.Contains(errs, "invitation") {
		t.Fatalf("run without an invitation: exit %d, stderr %q", code, errs)
	}
	invFile := filepath.Join(tmp, "uni-b.invitation")
	if code, out, errs := runCLI(t, "invite", "uni-b", "--data", a, "--api", apiA, "-o", invFile); code != 0 {
		t.Fatalf("peer invite: exit %d: %s %s", code, out, errs)
	}
	db := startDaemon(t, "--data", b, "--bootstrap", addr, "--invitation", invFile)
	apiB := db.wait(t, `API on http://(127\.0\.0\.1:\d+)`)[1]
	db.wait(t, `ready: organisation uni-b registered`)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token := func(dir string) string {
		tok, err := os.ReadFile(filepath.Join(dir, api.TokenFile))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(tok))
	}
	st, err := api.NewClient(apiB, token(b), nil).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Org != "uni-b" || st.Leader == "" || len(st.Peers) != 2 || len(st.Orgs) != 2 {
		t.Fatalf("status of uni-b %+v", st)
	}
	if _, err := api.NewClient(apiA, token(b), nil).Status(ctx); err == nil {
		t.Fatal("uni-a's API accepted uni-b's token")
	}

	if code := db.shutdown(t); code != 0 {
		t.Fatalf("uni-b stopped with %d:\n%s", code, db.errs.String())
	}
	if !strings.Contains(db.out.String(), "stopping") {
		t.Fatalf("output %s", db.out.String())
	}
	// Restart without --bootstrap: the data directory suffices.
	db2 := startDaemon(t, "--data", b)
	apiB = db2.wait(t, `API on http://(127\.0\.0\.1:\d+)`)[1]
	db2.wait(t, `ready: organisation uni-b registered`)
	if st, err := api.NewClient(apiB, token(b), nil).Status(ctx); err != nil || len(st.Peers) != 2 || st.Leader == "" {
		t.Fatalf("status after restart %+v %v", st, err)
	}
	if code := db2.shutdown(t); code != 0 {
		t.Fatalf("uni-b stopped with %d:\n%s", code, db2.errs.String())
	}
	if code := da.shutdown(t); code != 0 {
		t.Fatalf("uni-a stopped with %d:\n%s", code, da.errs.String())
	}
}
