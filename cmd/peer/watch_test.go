package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
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

// TestWatchAndWaitAgainstNode drives `peer submit --wait` and `peer tasks
// --watch` against a real single-peer federation running real processes:
// --wait exits 0 when every task ended done and 3 when one failed, and
// --watch prints the listing, then each change of state as it happens.
func TestWatchAndWaitAgainstNode(t *testing.T) {
	ctx, peer := startPeer(t)
	tmp := t.TempDir()
	data := peer.DataDir
	write := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `name: good
defaults: {size: 0.5, wall_clock_limit: 1m}
tasks:
  - {name: one, argv: [/bin/sh, -c, 'sleep 0.3']}
  - {name: two, argv: [/bin/sh, -c, 'true']}
`)
	bad := write("bad.yaml", `name: bad
defaults: {size: 0.5, wall_clock_limit: 1m}
tasks:
  - {name: ok, argv: [/bin/sh, -c, 'true']}
  - {name: oops, argv: [/bin/sh, -c, 'exit 4']}
`)

	// tasks --watch, running meanwhile.
	wctx, stopWatch := context.WithCancel(ctx)
	var watchOut syncBuffer
	watched := make(chan int, 1)
	go func() { watched <- run(wctx, []string{"tasks", "--watch", "--data", data}, &watchOut, &watchOut) }()
	waitOut := func(what string, ok func(string) bool) {
		t.Helper()
		for !ok(watchOut.String()) {
			select {
			case <-ctx.Done():
				t.Fatalf("tasks --watch never printed %s:\n%s", what, watchOut.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	waitOut("that it watches", func(s string) bool { return strings.Contains(s, "watching;") })

	code, out, errs := runCLIContext(ctx, "submit", "--wait", good, "--data", data)
	if code != 0 || !strings.Contains(out, "ended: 2 done, 0 failed, 0 cancelled") {
		t.Fatalf("submit --wait of good tasks: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLIContext(ctx, "submit", "--wait", "--json", bad, "--data", data)
	var sub submitOutput
	if err := json.Unmarshal([]byte(out), &sub); err != nil {
		t.Fatalf("submit --wait --json: %v\n%s", err, out)
	}
	if code != 3 || !strings.Contains(errs, "1 of 2 tasks did not end done") || sub.States["alpha-3"] != "done" || sub.States["alpha-4"] != "failed" {
		t.Fatalf("submit --wait of a failing task: exit %d, states %v\n%s", code, sub.States, errs)
	}

	// The watch saw each task's whole life, in order.
	waitOut("alpha-4's failure", func(s string) bool { return strings.Contains(s, "alpha-4\talpha\trunning → failed") })
	stopWatch()
	if code := <-watched; code != 0 {
		t.Errorf("tasks --watch ended with exit %d:\n%s", code, watchOut.String())
	}
	s := watchOut.String()
	for _, id := range []string{"alpha-1", "alpha-2", "alpha-3"} {
		var seq []string
		for _, l := range strings.Split(s, "\n") {
			if f := strings.Split(l, "\t"); len(f) == 6 && f[1] == id {
				seq = append(seq, f[3])
			}
		}
		want := []string{"- → queued", "queued → assigned", "assigned → running", "running → done"}
		if strings.Join(seq, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s: the watch printed %q, want %q", id, seq, want)
		}
	}

	// A wrong token: refused, nothing watched.
	if err := os.WriteFile(filepath.Join(tmp, "wrong.token"), []byte("wrong-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLIContext(ctx, "tasks", "--watch", "--data", data, "--token-file", filepath.Join(tmp, "wrong.token"))
	if code != 1 || !strings.Contains(errs, "refused the token") {
		t.Errorf("tasks --watch with a wrong token: exit %d: %s", code, errs)
	}
}

func runCLIContext(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}
