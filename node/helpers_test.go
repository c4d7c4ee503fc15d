package node

import (
	"context"
	"github.com/coopgrid/coopgrid/config"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/internal/testcluster"
	"github.com/coopgrid/coopgrid/leader"
	"github.com/coopgrid/coopgrid/ledger"
)

func TestMain(m *testing.M) { testcluster.Main(m) }

// testLogger is silent unless COOPGRID_TEST_LOG is set.
func testLogger(name string) *slog.Logger { return testcluster.Logger(name) }

// tnode is a real peer on its own data directory, restartable from it.
type tnode struct {
	tb     testing.TB
	org    string
	dir    string
	peerID string
	n      *Node
	// opts, when set, edits the Options of every start (load_test.go).
	opts func(*Options)
}

// running maps the peer ID of every started tnode to it, so that a joiner
// asks the member it bootstraps through for an invitation (invitationFor).
var running sync.Map

// invitationFor returns an invitation for tn issued by the running tnode
// that bootstrap names (its /p2p/ component), or "" when none is running.
func (tn *tnode) invitationFor(bootstrap []string) string {
	tn.tb.Helper()
	for _, a := range bootstrap {
		_, id, ok := strings.Cut(a, "/p2p/")
		if !ok {
			continue
		}
		v, ok := running.Load(id)
		if !ok || v.(*tnode).n == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		inv, err := v.(*tnode).n.Invite(ctx, api.InviteRequest{Org: tn.org, Peer: tn.peerID})
		cancel()
		if err != nil {
			tn.tb.Fatalf("%s invites %s: %v", v.(*tnode).org, tn.org, err)
		}
		return inv.Token
	}
	return ""
}

// testConfig shortens the timeouts so that a test federation reacts fast.
func testConfig(executorKind string) func(*config.Config) {
	return func(c *config.Config) {
		c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		c.API = "127.0.0.1:0"
		c.Executor.Kind = executorKind
		c.Executor.SimCompression = 40
		c.Executor.StopGrace = 2 * time.Second
		c.Heartbeat.Interval = 150 * time.Millisecond
		c.Heartbeat.Timeout = 2500 * time.Millisecond
		c.Consensus.ScheduleInterval = 300 * time.Millisecond
		c.Files.FetchTimeout = 10 * time.Second
	}
}

// newTNode initialises a data directory: a new federation when secret is
// "", else joining with that secret file. machines is the machines file's
// content ("" for none); edit changes the config further.
func newTNode(tb testing.TB, org, secret, machines string, edit func(*config.Config)) *tnode {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), org)
	o := config.InitOptions{DataDir: dir, Org: org, NewFederation: secret == "", SecretFile: secret, Config: edit}
	if machines != "" {
		mf := filepath.Join(tb.TempDir(), "machines.yaml")
		if err := os.WriteFile(mf, []byte(machines), 0o600); err != nil {
			tb.Fatal(err)
		}
		o.MachinesFile = mf
	}
	res, err := config.Init(context.Background(), o)
	if err != nil {
		tb.Fatalf("init %s: %v", org, err)
	}
	tn := &tnode{tb: tb, org: org, dir: dir, peerID: res.PeerID}
	running.Store(res.PeerID, tn)
	tb.Cleanup(func() { running.Delete(res.PeerID) })
	return tn
}

func (tn *tnode) start(bootstrap ...string) {
	tn.tb.Helper()
	tn.startWith(nil, bootstrap...)
}

// startWith starts tn like start, with tweak applied last to the
// consensus configuration (nil: none).
func (tn *tnode) startWith(tweak func(*consensus.Config), bootstrap ...string) {
	tn.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := Options{
		DataDir:           tn.dir,
		Bootstrap:         bootstrap,
		Invitation:        tn.invitationFor(bootstrap),
		Logger:            testLogger(tn.org),
		ReconcileInterval: 200 * time.Millisecond,
		ProgressInterval:  200 * time.Millisecond,
		Consensus: func(c *consensus.Config) {
			c.NoSync = true
			c.CheckInvariants = true
			c.MaintenanceInterval = 300 * time.Millisecond
			if tweak != nil {
				tweak(c)
			}
		},
		Leader: func(c *leader.Config) { c.ScheduleDebounce = 5 * time.Millisecond },
	}
	if tn.opts != nil {
		tn.opts(&opts)
	}
	n, err := Start(ctx, opts)
	if err != nil {
		tn.tb.Fatalf("start %s: %v", tn.org, err)
	}
	tn.n = n
	if err := n.WaitReady(ctx); err != nil {
		tn.tb.Fatalf("%s not ready: %v", tn.org, err)
	}
	tn.tb.Cleanup(func() { tn.close() })
}

// leaderAndFollower returns the leader of a two-peer federation and the
// other peer.
func leaderAndFollower(t *testing.T, peers []*tnode) (leader, follower *tnode) {
	t.Helper()
	leader, follower = peers[0], peers[1]
	if !leader.n.cons.IsLeader() {
		leader, follower = follower, leader
	}
	if !leader.n.cons.IsLeader() {
		t.Fatal("no leader among the two peers")
	}
	return leader, follower
}

func (tn *tnode) close() {
	if tn.n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tn.n.InvariantError(); err != nil {
		tn.tb.Errorf("%s: ledger invariant broken: %v", tn.org, err)
	}
	if err := tn.n.Close(ctx); err != nil {
		tn.tb.Logf("%s: close: %v", tn.org, err)
	}
	tn.n = nil
}

// crash stops the peer as if its process died.
func (tn *tnode) crash() {
	tn.n.crash()
	tn.n = nil
}

func (tn *tnode) addr() string {
	tn.tb.Helper()
	as := tn.n.Addrs()
	if len(as) == 0 {
		tn.tb.Fatalf("%s has no address", tn.org)
	}
	return as[0]
}

func (tn *tnode) secret() string { return filepath.Join(tn.dir, "federation.key") }

// federation starts a first peer and joins the others through it.
func federation(tb testing.TB, kind string, orgs []string, machines map[string]string, edit map[string]func(*config.Config)) []*tnode {
	tb.Helper()
	var out []*tnode
	for i, org := range orgs {
		cfg := testConfig(kind)
		if e := edit[org]; e != nil {
			base := cfg
			cfg = func(c *config.Config) { base(c); e(c) }
		}
		secret := ""
		if i > 0 {
			secret = out[0].secret()
		}
		tn := newTNode(tb, org, secret, machines[org], cfg)
		if i == 0 {
			tn.start()
		} else {
			tn.start(out[0].addr())
		}
		out = append(out, tn)
	}
	// Every peer sees every organisation before the test goes on.
	for _, tn := range out {
		waitFor(tb, 20*time.Second, tn.org+" sees every organisation", func() bool {
			var k int
			tn.n.cons.View(func(l *ledger.Ledger) { k = len(l.Orgs()) })
			return k == len(orgs)
		})
	}
	return out
}

// waitsMostly marks a test that spends its seconds waiting (on task
// processes, sleeps, heartbeat timeouts, elections) while its few peers
// are mostly idle: it runs beside the other such tests (t.Parallel, at
// most -parallel at a time), after the package's sequential tests. Each
// has its own federation (its own secret, data directories and loopback
// ports), so they share nothing but the CPU, of which ./node uses about a
// sixth of a core (make test). A test whose assertions depend on how fast
// its own peers run (TestWasteAgreesWithSimulator, TestReportsAreBatched,
// TestProgressMigratesOnRealPeers, the Slurm tests) stays sequential, and
// so do two that each failed once in parallel on the shared host (load
// 10-30) when a machine was declared lost after missed heartbeats:
// TestLostMachineRunElsewhereAvoidingIt (it needs exactly one machine
// lost) and TestPreemptedTaskResumesElsewhere (its resumed run was lost).
func waitsMostly(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tn *tnode) task(id string) ledger.Task {
	var t ledger.Task
	tn.n.cons.View(func(l *ledger.Ledger) { t, _ = l.Task(id) })
	return t
}

func (tn *tnode) machine(id string) ledger.Machine {
	var m ledger.Machine
	tn.n.cons.View(func(l *ledger.Ledger) { m, _ = l.Machine(id) })
	return m
}
