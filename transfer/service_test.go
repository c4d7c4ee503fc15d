package transfer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// federation is the ledger and the membership the services check against:
// a real ledger driven by encoded commands, and a set of members. While
// unavailable > 0, Task answers with a transient error (a leader change, as
// the consistent read of the node sees it).
type federation struct {
	mu          sync.Mutex
	l           *ledger.Ledger
	idx         uint64
	members     map[peer.ID]bool
	unavailable int
}

func (f *federation) IsMember(p peer.ID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[p]
}

func (f *federation) PeerOf(org string) (peer.ID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.l.Org(org)
	if !ok {
		return "", p2p.Errorf(CodeNotFound, "organisation %q is not registered", org)
	}
	return peer.Decode(o.Peer)
}

func (f *federation) Task(_ context.Context, id string, check Check) (ledger.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unavailable > 0 {
		f.unavailable--
		return ledger.Task{}, p2p.Errorf(p2p.CodeUnavailable, "no leader")
	}
	t, ok := f.l.Task(id)
	if !ok {
		return t, p2p.Errorf(CodeNotFound, "task %q is not in the ledger", id)
	}
	return t, check(t, f.l)
}

func (f *federation) setUnavailable(n int) {
	f.mu.Lock()
	f.unavailable = n
	f.mu.Unlock()
}

func (f *federation) must(t *testing.T, org string, p peer.ID, body func(*ledger.Command)) {
	t.Helper()
	c := ledger.Command{Org: org, Peer: p.String(), AtMs: 1_700_000_000_000 + int64(f.idx)}
	body(&c)
	data, err := ledger.EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	f.idx++
	if r := f.l.Apply(f.idx, data); r.Err != nil {
		t.Fatalf("command %d: %v", f.idx, r.Err)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type testPeer struct {
	h   *p2p.Host
	s   *Service
	dir string
}

func newTestPeer(t *testing.T, psk pnet.PSK, org string, fed *federation) *testPeer {
	t.Helper()
	dir := t.TempDir()
	h, err := p2p.New(p2p.Config{DataDir: dir, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s, err := New(Config{
		Host: h, Org: org, Members: fed, Tasks: fed, Logger: quietLogger(),
		Dirs:   Dirs{Blobs: filepath.Join(dir, "blobs"), Outputs: filepath.Join(dir, "outputs"), Tasks: filepath.Join(dir, "tasks")},
		Limits: Limits{MaxInputBytes: 1 << 20, MaxOutputBytes: 1 << 20, MaxLogBytes: 1 << 10, FetchTimeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &testPeer{h: h, s: s, dir: dir}
}

// TestServiceAlone: the three protocols between a submitting peer (sub), the
// peer whose machine runs the task (run) and a connected host that is not a
// member (outsider), without a node: inputs are fetched with retries at
// the documented pace, outputs land with the submitter, logs go to the
// task's organisation only, and Close withdraws the protocols.
func TestServiceAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	fed := &federation{l: ledger.New(), members: map[peer.ID]bool{}}
	sub := newTestPeer(t, psk, "sub", fed)
	run := newTestPeer(t, psk, "run", fed)
	outsider := newTestPeer(t, psk, "out", fed)
	fed.members[sub.h.ID()], fed.members[run.h.ID()] = true, true
	for _, p := range []*testPeer{run, outsider} {
		if _, err := p.h.ConnectAddr(ctx, sub.h.FullAddrs()[0].String()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := outsider.h.ConnectAddr(ctx, run.h.FullAddrs()[0].String()); err != nil {
		t.Fatal(err)
	}

	input := []byte("the input\n")
	digest, err := sub.s.PutBlob(input)
	if err != nil || digest != Digest(input) {
		t.Fatalf("PutBlob: %s %v", digest, err)
	}
	fed.must(t, "sub", sub.h.ID(), func(c *ledger.Command) { c.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: 100_000} })
	fed.must(t, "run", run.h.ID(), func(c *ledger.Command) {
		c.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: 100_000, Machines: []ledger.MachineSpec{{Name: "m1", MFLOPS: 1000, BusyMilliW: 50_000}}}
	})
	fed.must(t, "sub", sub.h.ID(), func(c *ledger.Command) {
		c.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1000, Spec: ledger.Spec{
			Argv: []string{"/bin/true"}, Inputs: []string{"data/in.bin"}, InputDigests: []string{digest}, Outputs: []string{"*.txt"},
		}}}}
	})
	fed.must(t, "run", run.h.ID(), func(c *ledger.Command) {
		c.Decisions = &ledger.Decisions{Decisions: []ledger.Decision{{Kind: ledger.DecideAllocate, Task: "sub-1", Machine: "run/m1"}}}
	})
	fed.must(t, "run", run.h.ID(), func(c *ledger.Command) { c.TaskStarted = &ledger.TaskStarted{Task: "sub-1", Machine: "run/m1"} })
	task, _ := fed.l.Task("sub-1")

	t.Run("fetch gives up when the context ends, with the last error", func(t *testing.T) {
		fed.setUnavailable(1 << 30)
		defer fed.setUnavailable(0)
		start := time.Now()
		_, err := run.s.FetchInputs(ctx, task)
		if err == nil || !strings.Contains(err.Error(), "context deadline exceeded (last error:") || !strings.Contains(err.Error(), "no leader") {
			t.Fatalf("FetchInputs: %v", err)
		}
		if d := time.Since(start); d < time.Second || d > 5*time.Second {
			t.Fatalf("gave up after %v, want the 1s FetchTimeout", d)
		}
	})
	t.Run("fetch retries transient failures at 100ms, 200ms, ...", func(t *testing.T) {
		fed.setUnavailable(2)
		start := time.Now()
		got, err := run.s.FetchInputs(ctx, task)
		if err != nil || string(got["data/in.bin"]) != string(input) || len(got) != 1 {
			t.Fatalf("FetchInputs: %q %v", got, err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("two retries took %v, want at least 100ms + 200ms", d)
		}
	})
	t.Run("a refused fetch is not retried", func(t *testing.T) {
		start := time.Now()
		_, err := outsider.s.FetchInputs(ctx, task)
		if p2p.Code(err) != CodeForbidden {
			t.Fatalf("outsider's FetchInputs: %v", err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("a refusal took %v: retried", d)
		}
	})

	t.Run("outputs", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "out.txt")
		if err := os.WriteFile(src, []byte("result\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := run.s.ShipOutputs(ctx, task, "run/m1", map[string]string{"out.txt": src}); err != nil {
			t.Fatal(err)
		}
		outs := sub.s.ListOutputs("sub-1")
		if len(outs) != 1 || outs[0] != filepath.Join(sub.dir, "outputs", "sub-1", "out.txt") {
			t.Fatalf("outputs %v", outs)
		}
		if b, err := os.ReadFile(outs[0]); err != nil || string(b) != "result\n" {
			t.Fatalf("out.txt: %q %v", b, err)
		}
		if err := outsider.s.ShipOutputs(ctx, task, "run/m1", map[string]string{"out.txt": src}); p2p.Code(err) != CodeForbidden {
			t.Fatalf("an outsider ships an output: %v", err)
		}
	})

	t.Run("logs", func(t *testing.T) {
		attempt := filepath.Join(run.dir, "tasks", "sub-1", "attempt-1")
		if err := os.MkdirAll(attempt, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(attempt, "stdout"), []byte("hello\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(LogsRequest{Task: "sub-1", Stream: "stdout"})
		if got, err := sub.h.Request(ctx, run.h.ID(), ProtoLogs, body); err != nil || string(got) != "hello\n" {
			t.Fatalf("the task's organisation reads its logs: %q %v", got, err)
		}
		if _, err := outsider.h.Request(ctx, run.h.ID(), ProtoLogs, body); p2p.Code(err) != CodeForbidden {
			t.Fatalf("an outsider reads the logs: %v", err)
		}
	})

	t.Run("close withdraws the protocols", func(t *testing.T) {
		sub.s.Close()
		body, _ := json.Marshal(BlobRequest{Task: "sub-1", Digest: digest})
		if _, err := run.h.Request(ctx, sub.h.ID(), ProtoBlob, body); err == nil {
			t.Fatal("a closed service still serves blobs")
		}
	})
}
