package leader

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/internal/testcluster"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/pnet"
)

// The leader's duties are tested on real clusters: libp2p hosts on
// loopback, Raft with bolt stores, the ledger as state machine, and a
// Leader wired into each peer's consensus hooks as node wires it.

// testLogger is silent unless COOPGRID_TEST_LOG is set.
func testLogger(name string) *slog.Logger { return testcluster.Logger(name) }

// tweak edits a peer's configurations before it starts.
type tweak func(c *consensus.Config, l *Config)

// tpeer is one real peer: a libp2p host, a consensus node on its own data
// directory and the leader's duties, restartable from the directory.
type tpeer struct {
	tb   testing.TB
	name string
	org  string
	dir  string
	psk  pnet.PSK
	mut  tweak
	live *fakeLiveness

	host    *p2p.Host
	node    *consensus.Node
	lead    *Leader
	running bool

	// terms counts the Establish calls running now (0 or 1); calls counts
	// every call the duties made to the replica, appends and proposals the
	// writes among them, over all terms.
	terms     atomic.Int32
	calls     atomic.Int64
	appends   atomic.Int64
	proposals atomic.Int64

	// verdicts holds what this peer's ledger said of each applied log
	// index: "" applied, else the refusal's code.
	verdictMu sync.Mutex
	verdicts  map[uint64]ledger.Code
	// kinds holds the kind of each applied log index.
	kinds map[uint64]ledger.Kind
	// onApply, when set, runs after each applied command on the state
	// machine's goroutine (a test slows a replay with it).
	onApply func(res *ledger.Result)
}

// record keeps the verdict of an applied entry (consensus' OnApply).
func (p *tpeer) record(res *ledger.Result) {
	p.verdictMu.Lock()
	defer p.verdictMu.Unlock()
	if p.verdicts == nil {
		p.verdicts = map[uint64]ledger.Code{}
		p.kinds = map[uint64]ledger.Kind{}
	}
	p.kinds[res.Index] = res.Kind
	var code ledger.Code
	if res.Err != nil {
		code = res.Err.Code
	}
	p.verdicts[res.Index] = code
}

// verdict is this peer's ledger's verdict on index (ok false before it
// applied it).
func (p *tpeer) verdict(index uint64) (ledger.Code, bool) {
	p.verdictMu.Lock()
	defer p.verdictMu.Unlock()
	c, ok := p.verdicts[index]
	return c, ok
}

// appliedKinds counts the kinds of the entries this peer applied, and
// how many of each were refused.
func (p *tpeer) appliedKinds() (applied, refused map[ledger.Kind]int) {
	p.verdictMu.Lock()
	defer p.verdictMu.Unlock()
	applied, refused = map[ledger.Kind]int{}, map[ledger.Kind]int{}
	for i, k := range p.kinds {
		if p.verdicts[i] == "" {
			applied[k]++
		} else {
			refused[k]++
		}
	}
	return applied, refused
}

func startPeer(tb testing.TB, name string, psk pnet.PSK, mut tweak) *tpeer {
	tb.Helper()
	p := &tpeer{tb: tb, name: name, org: name, dir: tb.TempDir(), psk: psk, mut: mut, live: newFakeLiveness()}
	p.start()
	tb.Cleanup(p.stop)
	return p
}

func (p *tpeer) start() {
	p.tb.Helper()
	h := testcluster.NewHost(p.tb, p.name, p.dir, p.psk)
	cfg := consensus.DefaultConfig(filepath.Join(p.dir, "raft"))
	cfg.CheckInvariants = true
	cfg.Logger = testLogger(p.name)
	cfg.MaintenanceInterval = 500 * time.Millisecond
	// Every command this peer authors is signed, as node wires it.
	cfg.Signer = h.PrivateKey()
	lcfg := DefaultConfig()
	lcfg.Self, lcfg.Org, lcfg.Signer = h.ID(), p.org, h.PrivateKey()
	lcfg.Logger = testLogger(p.name)
	if p.mut != nil {
		p.mut(&cfg, &lcfg)
	}
	lead, err := New(lcfg, p.live)
	if err != nil {
		h.Close()
		p.tb.Fatalf("%s: leader: %v", p.name, err)
	}
	cfg.Admit = lead.Admit
	onApply := p.onApply
	cfg.OnApply = func(res *ledger.Result) {
		p.record(res)
		lead.Applied(res)
		if onApply != nil {
			onApply(res)
		}
	}
	cfg.OnLeadership = func(ctx context.Context, n *consensus.Node) {
		p.terms.Add(1)
		defer p.terms.Add(-1)
		lead.Establish(ctx, countingReplica{Replica: n, p: p})
	}
	n, err := consensus.New(cfg, h)
	if err != nil {
		h.Close()
		p.tb.Fatalf("%s: node: %v", p.name, err)
	}
	p.host, p.node, p.lead, p.running = h, n, lead, true
}

// countingReplica counts what the leader's duties ask of the replica: a
// duty that stopped asks nothing.
type countingReplica struct {
	Replica
	p *tpeer
}

func (r countingReplica) IsLeader() bool {
	r.p.calls.Add(1)
	return r.Replica.IsLeader()
}

func (r countingReplica) View(fn func(l *ledger.Ledger)) {
	r.p.calls.Add(1)
	r.Replica.View(fn)
}

func (r countingReplica) Barrier(ctx context.Context) error {
	r.p.calls.Add(1)
	return r.Replica.Barrier(ctx)
}

func (r countingReplica) WaitApplied(ctx context.Context, idx uint64) error {
	r.p.calls.Add(1)
	return r.Replica.WaitApplied(ctx, idx)
}

func (r countingReplica) AppendAsLeader(ctx context.Context, data []byte) (ledger.Result, error) {
	r.p.calls.Add(1)
	r.p.appends.Add(1)
	return r.Replica.AppendAsLeader(ctx, data)
}

func (r countingReplica) Propose(ctx context.Context, data []byte) (ledger.Result, error) {
	r.p.calls.Add(1)
	r.p.proposals.Add(1)
	return r.Replica.Propose(ctx, data)
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

func (p *tpeer) addr() string {
	p.tb.Helper()
	return testcluster.Addr(p.tb, p.name, p.host)
}

// The tpeer is a testcluster.Member.
func (p *tpeer) Name() string           { return p.name }
func (p *tpeer) IsRunning() bool        { return p.running }
func (p *tpeer) Node() testcluster.Node { return p.node }

// fakeLiveness stands for the gossip heartbeats: every machine is heard of
// now, except the silent ones.
type fakeLiveness struct {
	mu     sync.Mutex
	silent map[string]bool // machine ID → silent; "*" for all
}

func newFakeLiveness() *fakeLiveness { return &fakeLiveness{silent: map[string]bool{}} }

func (f *fakeLiveness) setSilent(id string, silent bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.silent[id] = silent
}

func (f *fakeLiveness) isSilent(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.silent[id] || f.silent["*"]
}

func (f *fakeLiveness) LastSeen(id string) (time.Time, bool) {
	if f.isSilent(id) {
		return time.Time{}, false
	}
	return time.Now(), true
}

func (f *fakeLiveness) OwnerClockMs(id string, now time.Time) (int64, bool) {
	if f.isSilent(id) {
		return 0, false
	}
	return now.UnixMilli(), true
}

// cluster is a federation of tpeers in one process.
type cluster struct {
	tb    testing.TB
	psk   pnet.PSK
	mut   tweak
	peers []*tpeer
}

// newCluster bootstraps the first peer and joins the others through it;
// every peer registers its organisation with the given machines.
func newCluster(tb testing.TB, size, machines int, mut tweak) *cluster {
	tb.Helper()
	return newClusterWithRules(tb, size, machines, nil, mut)
}

// newClusterWithRules is newCluster whose first registration fixes the
// federation's rules (nil: none, as before rules existed).
func newClusterWithRules(tb testing.TB, size, machines int, rules *ledger.Rules, mut tweak) *cluster {
	tb.Helper()
	psk, err := p2p.GenerateSecret()
	if err != nil {
		tb.Fatal(err)
	}
	c := &cluster{tb: tb, psk: psk, mut: mut}
	first := c.add()
	if err := first.node.Bootstrap(); err != nil {
		tb.Fatal(err)
	}
	c.waitLeader()
	c.registerWith(first, machines, rules)
	for i := 1; i < size; i++ {
		p := c.add()
		c.join(p, first)
		c.register(p, machines)
	}
	return c
}

func (c *cluster) add() *tpeer {
	c.tb.Helper()
	p := startPeer(c.tb, fmt.Sprintf("org%d", len(c.peers)), c.psk, c.mut)
	c.peers = append(c.peers, p)
	return p
}

func (c *cluster) join(p, via *tpeer) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inv, err := via.node.Invite(consensus.InviteRequest{Org: p.org, Peer: p.node.ID()})
	if err != nil {
		c.tb.Fatalf("%s invites %s: %v", via.name, p.name, err)
	}
	if _, err := p.node.Join(ctx, inv.Token(), via.addr()); err != nil {
		c.tb.Fatalf("%s joins via %s: %v", p.name, via.name, err)
	}
}

func (c *cluster) running() []*tpeer { return testcluster.Running(c.peers) }

// waitLeader waits until exactly one running peer leads.
func (c *cluster) waitLeader() *tpeer {
	c.tb.Helper()
	return testcluster.WaitLeader(c.tb, c.peers)
}

// other returns a running peer other than the ones given.
func (c *cluster) other(not ...*tpeer) *tpeer {
	c.tb.Helper()
next:
	for _, p := range c.running() {
		for _, q := range not {
			if p == q {
				continue next
			}
		}
		return p
	}
	c.tb.Fatal("no other running peer")
	return nil
}

func (c *cluster) register(p *tpeer, machines int) {
	c.tb.Helper()
	c.registerWith(p, machines, nil)
}

func (c *cluster) registerWith(p *tpeer, machines int, rules *ledger.Rules) {
	c.tb.Helper()
	res := mustPropose(c.tb, p, ledger.Command{RegisterOrg: &ledger.RegisterOrg{LimitMilliW: 1_000_000_000, Machines: testcluster.Machines(machines), Rules: rules}})
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

// command encodes c as p's own, signed by p's identity as node signs.
func command(p *tpeer, c ledger.Command) []byte {
	p.tb.Helper()
	return testcluster.Encode(p.tb, c, p.org, p.node.ID(), p.host.PrivateKey())
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

// placement returns task → machine for the placed tasks, as p sees them.
func placement(p *tpeer) map[string]string { return testcluster.Placement(p.node) }

// machineStates returns machine → state as p sees them.
func machineStates(p *tpeer) map[string]ledger.MachineState {
	out := map[string]ledger.MachineState{}
	p.node.View(func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			out[m.ID] = m.State
		}
	})
	return out
}
