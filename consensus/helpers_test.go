package consensus

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/internal/testcluster"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// fixedPressure is a host whose CPU pressure always reads the same.
type fixedPressure bool

func (f fixedPressure) Starved() bool { return bool(f) }

// testLogger is silent unless COOPGRID_TEST_LOG is set.
func testLogger(name string) *slog.Logger { return testcluster.Logger(name) }

// tpeer is one real peer: a libp2p host and a consensus node on its own
// data directory, restartable from it.
type tpeer struct {
	tb   testing.TB
	name string
	org  string
	dir  string
	psk  pnet.PSK
	mut  func(*Config)
	opts []Option

	host    *p2p.Host
	node    *Node
	running bool
}

func startPeer(tb testing.TB, name string, psk pnet.PSK, mut func(*Config), opts ...Option) *tpeer {
	tb.Helper()
	p := &tpeer{tb: tb, name: name, org: name, dir: tb.TempDir(), psk: psk, mut: mut, opts: opts}
	p.start()
	tb.Cleanup(p.stop)
	return p
}

func (p *tpeer) start() {
	p.tb.Helper()
	h := testcluster.NewHost(p.tb, p.name, p.dir, p.psk)
	cfg := DefaultConfig(filepath.Join(p.dir, "raft"))
	cfg.CheckInvariants = true
	cfg.Logger = testLogger(p.name)
	cfg.MaintenanceInterval = 500 * time.Millisecond
	if p.mut != nil {
		p.mut(&cfg)
	}
	// The preset's timings, however loaded the machine running the
	// tests is (starve.go), unless the test gives a reading.
	n, err := New(cfg, h, append([]Option{WithPressure(fixedPressure(false))}, p.opts...)...)
	if err != nil {
		h.Close()
		p.tb.Fatalf("%s: node: %v", p.name, err)
	}
	p.host, p.node, p.running = h, n, true
}

// stop is an abrupt stop: Raft shuts down and the host closes, as when the
// process dies (the data directory stays).
func (p *tpeer) stop() {
	if !p.running {
		return
	}
	p.running = false
	if err := p.node.Shutdown(); err != nil {
		p.tb.Logf("%s: shutdown: %v", p.name, err)
	}
	p.host.Close()
}

func (p *tpeer) restart() {
	p.tb.Helper()
	p.stop()
	p.start()
}

func (p *tpeer) addr() string {
	p.tb.Helper()
	return testcluster.Addr(p.tb, p.name, p.host)
}

// The tpeer is a testcluster.Member.
func (p *tpeer) Name() string           { return p.name }
func (p *tpeer) IsRunning() bool        { return p.running }
func (p *tpeer) Node() testcluster.Node { return p.node }

// cluster is a federation of tpeers in one process.
type cluster struct {
	tb    testing.TB
	psk   pnet.PSK
	mut   func(*Config)
	opts  []Option
	peers []*tpeer
}

// newCluster bootstraps the first peer and joins the others through it;
// every peer registers its organisation with the given machines.
func newCluster(tb testing.TB, size, machines int, mut func(*Config)) *cluster {
	tb.Helper()
	return newClusterWith(tb, size, machines, mut)
}

// newClusterWith is newCluster with options for every peer's New.
func newClusterWith(tb testing.TB, size, machines int, mut func(*Config), opts ...Option) *cluster {
	tb.Helper()
	psk, err := p2p.GenerateSecret()
	if err != nil {
		tb.Fatal(err)
	}
	c := &cluster{tb: tb, psk: psk, mut: mut, opts: opts}
	first := c.add()
	if err := first.node.Bootstrap(); err != nil {
		tb.Fatal(err)
	}
	c.waitLeader()
	c.register(first, machines)
	for i := 1; i < size; i++ {
		p := c.add()
		c.join(p, first)
		c.register(p, machines)
	}
	return c
}

func (c *cluster) add() *tpeer {
	c.tb.Helper()
	p := startPeer(c.tb, fmt.Sprintf("org%d", len(c.peers)), c.psk, c.mut, c.opts...)
	c.peers = append(c.peers, p)
	return p
}

// invite returns an invitation for p's organisation, issued by the first
// running member whose organisation is registered.
func (c *cluster) invite(p *tpeer) string {
	c.tb.Helper()
	var errs []error
	for _, m := range c.running() {
		if m == p {
			continue
		}
		inv, err := m.node.Invite(InviteRequest{Org: p.org, Peer: p.node.ID()})
		if err == nil {
			return inv.Token()
		}
		errs = append(errs, err)
	}
	c.tb.Fatalf("no member could invite %s: %v", p.name, errs)
	return ""
}

func (c *cluster) join(p, via *tpeer) JoinResult {
	c.tb.Helper()
	token := c.invite(p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.node.Join(ctx, token, via.addr())
	if err != nil {
		c.tb.Fatalf("%s joins via %s: %v", p.name, via.name, err)
	}
	return res
}

func (c *cluster) running() []*tpeer { return testcluster.Running(c.peers) }

// waitLeader waits until exactly one running peer leads.
func (c *cluster) waitLeader() *tpeer {
	c.tb.Helper()
	return testcluster.WaitLeader(c.tb, c.peers)
}

func (c *cluster) register(p *tpeer, machines int) {
	c.tb.Helper()
	res := mustPropose(c.tb, p, ledger.Command{RegisterOrg: &ledger.RegisterOrg{LimitMilliW: 1_000_000_000, Machines: testcluster.Machines(machines)}})
	if !res.Applied() {
		c.tb.Fatalf("register %s: %v", p.org, res.Err)
	}
}

// converge waits until every running peer has applied the same index and
// holds the same state hash, and checks the invariants held after every
// entry on every peer. It returns the common hash.
func (c *cluster) converge() string {
	c.tb.Helper()
	return testcluster.Converge(c.tb, c.peers)
}

func command(p *tpeer, c ledger.Command) []byte {
	p.tb.Helper()
	return testcluster.Encode(p.tb, c, p.org, p.node.ID(), nil)
}

func mustPropose(tb testing.TB, p *tpeer, c ledger.Command) ledger.Result {
	tb.Helper()
	return testcluster.MustPropose(tb, p.name, p.node, command(p, c))
}

func submit(tb testing.TB, p *tpeer, count int) []string {
	tb.Helper()
	res := mustPropose(tb, p, ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: testcluster.Tasks(count)}})
	if !res.Applied() || len(res.TaskIDs) != count {
		tb.Fatalf("submit on %s: %v (%d ids)", p.name, res.Err, len(res.TaskIDs))
	}
	return res.TaskIDs
}

// eventually is testcluster.Eventually: a wait for a distributed state to
// settle, not a timing assertion.
func eventually(tb testing.TB, timeout time.Duration, f func() error) {
	tb.Helper()
	testcluster.Eventually(tb, timeout, f)
}

// collect gathers a subscription's events in the background.
type collector struct {
	mu     sync.Mutex
	events []Event
	done   chan struct{}
}

func collect(s *Subscription) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ev := range s.C() {
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) list() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}

// allocate places tasks on free machines with one decisions entry appended
// by the leader, as the leader's scheduling pass would (package leader runs
// the real one).
func allocate(tb testing.TB, leader *tpeer, tasks []string) ledger.Result {
	tb.Helper()
	var free []string
	leader.node.View(func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			if m.State == ledger.MachineUp && m.Task == "" {
				free = append(free, m.ID)
			}
		}
	})
	if len(free) < len(tasks) {
		tb.Fatalf("%d free machines for %d tasks", len(free), len(tasks))
	}
	ds := make([]ledger.Decision, len(tasks))
	for i, task := range tasks {
		ds[i] = ledger.Decision{Kind: ledger.DecideAllocate, Task: task, Machine: free[i]}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := leader.node.AppendAsLeader(ctx, command(leader, ledger.Command{Decisions: &ledger.Decisions{Decisions: ds}}))
	if err != nil {
		tb.Fatalf("allocate on %s: %v", leader.name, err)
	}
	if got := res.AcceptedDecisions(); got != len(tasks) {
		tb.Fatalf("%d of %d decisions accepted: %+v", got, len(tasks), res.Decisions)
	}
	return res
}
