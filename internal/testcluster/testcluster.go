// Package testcluster is the shared part of the real-cluster test
// harnesses of package consensus and package leader: libp2p hosts on
// loopback, waiting for a leader and for convergence, encoding and
// proposing commands. It does not import consensus (consensus' own
// in-package tests use it): a peer's node is seen through Node, and each
// package's test peer implements Member. Its Main and Logger serve the
// tests of node and runner too.
package testcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	logging "github.com/ipfs/go-log/v2"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// LogEnv, when set, makes the test peers log at debug level to stderr.
const LogEnv = "COOPGRID_TEST_LOG"

// Main runs a package's tests. go-libp2p-raft logs through go-log; a
// closing connection at the end of a test is not worth an ERROR line on
// stderr.
func Main(m *testing.M) {
	if os.Getenv(LogEnv) == "" {
		_ = logging.SetLogLevel("raftlib", "fatal")
	}
	os.Exit(m.Run())
}

// Logger is silent unless LogEnv is set.
func Logger(name string) *slog.Logger {
	if os.Getenv(LogEnv) == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
}

// NewHost starts a libp2p host for a test peer on loopback, its identity
// in dir/p2p (so a restart keeps its peer ID).
func NewHost(tb testing.TB, name, dir string, psk pnet.PSK) *p2p.Host {
	tb.Helper()
	h, err := p2p.New(p2p.Config{
		DataDir:     filepath.Join(dir, "p2p"),
		ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
		Secret:      psk,
		Logger:      Logger(name),
	})
	if err != nil {
		tb.Fatalf("%s: host: %v", name, err)
	}
	return h
}

// Addr is a host's first full address (…/p2p/<id>), to join or dial.
func Addr(tb testing.TB, name string, h *p2p.Host) string {
	tb.Helper()
	as := h.FullAddrs()
	if len(as) == 0 {
		tb.Fatalf("%s has no address", name)
	}
	return as[0].String()
}

// Node is what the harness needs of a peer's consensus node
// (*consensus.Node).
type Node interface {
	ID() peer.ID
	IsLeader() bool
	Hash() (hash string, index uint64)
	InvariantError() error
	Propose(ctx context.Context, data []byte) (ledger.Result, error)
	View(fn func(l *ledger.Ledger))
}

// Member is one test peer of a cluster.
type Member interface {
	Name() string
	IsRunning() bool
	Node() Node
}

// Running lists the members that run, in order.
func Running[M Member](ms []M) []M {
	var out []M
	for _, m := range ms {
		if m.IsRunning() {
			out = append(out, m)
		}
	}
	return out
}

// WaitLeader waits until exactly one running member leads.
func WaitLeader[M Member](tb testing.TB, ms []M) M {
	tb.Helper()
	var leader M
	Eventually(tb, 20*time.Second, func() error {
		found := false
		for _, p := range Running(ms) {
			if p.Node().IsLeader() {
				if found {
					return fmt.Errorf("two leaders: %s and %s", leader.Name(), p.Name())
				}
				leader, found = p, true
			}
		}
		if !found {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	return leader
}

// Converge waits until every running member has applied the same index
// and holds the same state hash, and checks the invariants held after
// every entry on every member. It returns the common hash.
func Converge[M Member](tb testing.TB, ms []M) string {
	tb.Helper()
	var hash string
	Eventually(tb, 30*time.Second, func() error {
		hash = ""
		var idx uint64
		run := Running(ms)
		for i, p := range run {
			h, at := p.Node().Hash()
			if i == 0 {
				hash, idx = h, at
				continue
			}
			if at != idx || h != hash {
				return fmt.Errorf("%s at %d %.12s, %s at %d %.12s", run[0].Name(), idx, hash, p.Name(), at, h)
			}
		}
		return nil
	})
	for _, p := range Running(ms) {
		if err := p.Node().InvariantError(); err != nil {
			tb.Fatalf("%s: %v", p.Name(), err)
		}
	}
	return hash
}

// Encode encodes c as the command of org's peer id, at the current
// version and time unless c says otherwise; signed with key, as node signs,
// when key is not nil.
func Encode(tb testing.TB, c ledger.Command, org string, id peer.ID, key crypto.PrivKey) []byte {
	tb.Helper()
	c.V, _ = ledger.RequiredVersion(&c)
	if c.Org == "" {
		c.Org = org
	}
	if c.Peer == "" {
		c.Peer = id.String()
	}
	if c.AtMs == 0 {
		c.AtMs = time.Now().UnixMilli()
	}
	var b []byte
	var err error
	if key != nil {
		b, err = ledger.EncodeSigned(c, key)
	} else {
		b, err = ledger.EncodeCommand(c)
	}
	if err != nil {
		tb.Fatalf("encode: %v", err)
	}
	return b
}

// MustPropose proposes data through n and fails the test if it could not
// be committed (the ledger's verdict is the caller's to check).
func MustPropose(tb testing.TB, name string, n Node, data []byte) ledger.Result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := n.Propose(ctx, data)
	if err != nil {
		tb.Fatalf("%s propose: %v", name, err)
	}
	return res
}

// Machines are n identical machines m0…: 1000 MFLOPS, 100 W busy.
func Machines(n int) []ledger.MachineSpec {
	ms := make([]ledger.MachineSpec, n)
	for i := range ms {
		ms[i] = ledger.MachineSpec{Name: fmt.Sprintf("m%d", i), MFLOPS: 1000, BusyMilliW: 100_000}
	}
	return ms
}

// Tasks are n identical tasks of 60,000 MFlop (a minute on one machine).
func Tasks(n int) []ledger.TaskSpec {
	specs := make([]ledger.TaskSpec, n)
	for i := range specs {
		specs[i] = ledger.TaskSpec{SizeMFlop: 60_000}
	}
	return specs
}

// Placement returns task → machine for the placed tasks, as n sees them.
func Placement(n Node) map[string]string {
	out := map[string]string{}
	n.View(func(l *ledger.Ledger) {
		for _, t := range l.Tasks(ledger.TaskFilter{States: []ledger.TaskState{ledger.TaskAssigned, ledger.TaskRunning}}) {
			out[t.ID] = t.Machine
		}
	})
	return out
}

// Eventually retries f until it returns nil or the timeout passes. It is
// a wait for a distributed state to settle, not a timing assertion: the
// bound is generous.
func Eventually(tb testing.TB, timeout time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not settled after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
