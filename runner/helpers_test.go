package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/internal/testcluster"
	"github.com/coopgrid/coopgrid/leader"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

func TestMain(m *testing.M) { testcluster.Main(m) }

// testLogger is silent unless COOPGRID_TEST_LOG is set.
func testLogger(name string) *slog.Logger { return testcluster.Logger(name) }

// testLedger is a real single-peer federation: a libp2p host on loopback,
// Raft on bolt stores, the EHOSEP leader, and one organisation, "alpha",
// registered with the given machines (all up). It has no node around it:
// the runner under test is the only thing that runs the allocations.
type testLedger struct {
	tb       testing.TB
	org      string
	dir      string
	machines []executor.MachineConfig
	host     *p2p.Host
	cons     *consensus.Node
}

// simMachines are n machines m0…m(n-1) of 10 GFLOPS and 100 W.
func simMachines(n int) []executor.MachineConfig {
	out := make([]executor.MachineConfig, n)
	for i := range out {
		out[i] = executor.MachineConfig{Name: fmt.Sprintf("m%d", i), GFLOPS: 10, BusyWatts: 100}
	}
	return out
}

// startLedger starts the federation; tweak (nil: none) edits the consensus
// configuration last.
func startLedger(tb testing.TB, machines []executor.MachineConfig, tweak func(*consensus.Config)) *testLedger {
	tb.Helper()
	return startLedgerWith(tb, machines, nil, tweak)
}

// startLedgerWith is startLedger with reg (nil: none) editing alpha's
// registration: its rules, or machines declared otherwise than the
// executor runs them.
func startLedgerWith(tb testing.TB, machines []executor.MachineConfig, reg func(*ledger.RegisterOrg), tweak func(*consensus.Config)) *testLedger {
	tb.Helper()
	l := &testLedger{tb: tb, org: "alpha", dir: tb.TempDir(), machines: machines}
	psk, err := p2p.GenerateSecret()
	if err != nil {
		tb.Fatal(err)
	}
	l.host, err = p2p.New(p2p.Config{
		DataDir:     filepath.Join(l.dir, "p2p"),
		ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
		Secret:      psk,
		Logger:      testLogger(l.org),
	})
	if err != nil {
		tb.Fatalf("host: %v", err)
	}
	cfg := consensus.DefaultConfig(filepath.Join(l.dir, "raft"))
	cfg.NoSync = true
	cfg.CheckInvariants = true
	cfg.Logger = testLogger(l.org)
	// The leader's duties, as node wires them: the scheduling pass runs the
	// policy over this one-peer federation. Nothing gossips here, so lost
	// detection is given machines that are always heard of and a timeout
	// no test reaches.
	lcfg := leader.DefaultConfig()
	lcfg.Self, lcfg.Org = l.host.ID(), l.org
	lcfg.ScheduleInterval = 300 * time.Millisecond
	lcfg.ScheduleDebounce = 5 * time.Millisecond
	lcfg.LostTimeout = time.Hour
	lcfg.Logger = testLogger(l.org)
	lead, err := leader.New(lcfg, alwaysHeard{})
	if err != nil {
		l.host.Close()
		tb.Fatalf("leader: %v", err)
	}
	cfg.Admit = lead.Admit
	cfg.OnApply = lead.Applied
	cfg.OnLeadership = func(ctx context.Context, n *consensus.Node) { lead.Establish(ctx, n) }
	if tweak != nil {
		tweak(&cfg)
	}
	l.cons, err = consensus.New(cfg, l.host)
	if err != nil {
		l.host.Close()
		tb.Fatalf("consensus: %v", err)
	}
	tb.Cleanup(func() {
		if err := l.cons.InvariantError(); err != nil {
			tb.Errorf("ledger invariant broken: %v", err)
		}
		_ = l.cons.Shutdown()
		_ = l.host.Close()
	})
	if err := l.cons.Bootstrap(); err != nil {
		tb.Fatalf("bootstrap: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// WaitLeader answers no_quorum after the leader wait without a leader;
	// a loaded machine (and StoreDelay) can take longer than that to
	// elect this lone voter, so wait out the test's own deadline.
	for {
		_, err := l.cons.WaitLeader(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || !consensus.Retryable(err) {
			tb.Fatalf("no leader: %v", err)
		}
	}
	specs := make([]ledger.MachineSpec, len(machines))
	for i, m := range machines {
		specs[i] = ledger.MachineSpec{Name: m.Name, MFLOPS: m.MFLOPS(), BusyMilliW: m.BusyMilliW(), IdleMilliW: m.IdleMilliW()}
	}
	if _, err := l.propose(ctx, func(c *ledger.Command) {
		c.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: 1_000_000_000, Machines: specs}
		if reg != nil {
			reg(c.RegisterOrg)
		}
	}); err != nil {
		tb.Fatalf("register %s: %v", l.org, err)
	}
	return l
}

// propose is what node's propose does: the envelope for this peer's
// organisation, commit, wait for the local apply, the ledger's verdict.
func (l *testLedger) propose(ctx context.Context, body func(*ledger.Command)) (ledger.Result, error) {
	c := ledger.Command{Org: l.org, Peer: l.host.ID().String(), AtMs: time.Now().UnixMilli()}
	body(&c)
	data, err := ledger.EncodeCommand(c)
	if err != nil {
		return ledger.Result{}, err
	}
	res, err := l.cons.Propose(ctx, data)
	if err != nil {
		return res, err
	}
	if err := l.cons.WaitApplied(ctx, res.Index); err != nil {
		return res, err
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// retryable says a proposal failed for reasons that pass (node's
// classifier).
func retryable(err error) bool {
	var pe *p2p.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case consensus.CodeNoLeader, consensus.CodeNotLeader, consensus.CodeOutcomeUnknown, consensus.CodeTimeout, p2p.CodeUnavailable:
			return true
		}
		return false
	}
	return errors.Is(err, p2p.ErrUnreachable)
}

// submit submits tasks of the given sizes (simulated: no process) and
// returns their IDs.
func (l *testLedger) submit(sizes ...int64) []string {
	l.tb.Helper()
	specs := make([]ledger.TaskSpec, len(sizes))
	for i, s := range sizes {
		specs[i] = ledger.TaskSpec{SizeMFlop: s}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := l.propose(ctx, func(c *ledger.Command) { c.SubmitTasks = &ledger.SubmitTasks{Tasks: specs} })
	if err != nil || len(res.TaskIDs) != len(sizes) {
		l.tb.Fatalf("submit: %v (%d ids)", err, len(res.TaskIDs))
	}
	return res.TaskIDs
}

func (l *testLedger) task(id string) ledger.Task {
	var t ledger.Task
	l.cons.View(func(lg *ledger.Ledger) { t, _ = lg.Task(id) })
	return t
}

// simExecutor is a simulated executor of l's machines, 400 times faster
// than real time: a task of 1,000,000 MFlop on 10 GFLOPS takes 0.25 s.
func (l *testLedger) simExecutor() executor.Executor {
	l.tb.Helper()
	e, err := executor.NewSimExecutor(executor.SimConfig{Machines: l.machines, Compression: 400, Logger: testLogger(l.org)})
	if err != nil {
		l.tb.Fatal(err)
	}
	return e
}

// config is a runner configuration on l with exec: no inputs to fetch, no
// outputs to ship, machines declared lost as node does.
func (l *testLedger) config(exec executor.Executor) Config {
	names := make([]string, len(l.machines))
	for i, m := range l.machines {
		names[i] = m.Name
	}
	return Config{
		Org:       l.org,
		Self:      l.host.ID(),
		Machines:  names,
		Executor:  exec,
		StopGrace: time.Second,
		Ledger:    l.cons,
		Propose:   l.propose,
		Retryable: retryable,
		DeclareLost: func(ctx context.Context, machine string) error {
			_, err := l.propose(ctx, func(c *ledger.Command) { c.MachineLost = &ledger.MachineLostCmd{Machine: machine} })
			if err != nil && ledger.CodeOf(err) != ledger.CodeBadState {
				return err
			}
			return nil
		},
		FetchInputs:    func(context.Context, ledger.Task) (map[string][]byte, error) { return nil, nil },
		ShipOutputs:    func(context.Context, ledger.Task, string, map[string]string) error { return nil },
		Host:           l.host,
		TasksDir:       filepath.Join(l.dir, "tasks"),
		CheckpointsDir: filepath.Join(l.dir, "checkpoints"),
		Checkpoint: CheckpointConfig{
			Replication: 2, Grace: time.Second, TransferTimeout: 5 * time.Second, GCInterval: time.Second,
			MaxArchiveBytes: 1 << 20, MaxTaskBytes: 1 << 21, MaxPeerBytes: 1 << 22,
		},
		ReconcileInterval: 200 * time.Millisecond,
		Logger:            testLogger(l.org),
	}
}

// newRunner makes a runner of cfg that is closed, after its executor, when
// the test ends (before the ledger stops).
func newRunner(tb testing.TB, cfg Config) *Runner {
	tb.Helper()
	r, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		r.SetClosing(true)
		if cfg.Executor != nil {
			_ = cfg.Executor.Close(context.Background())
		}
		r.Close()
	})
	return r
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

// alwaysHeard stands for gossip in a federation of one: every machine was
// heard of just now, so the leader never declares one lost.
type alwaysHeard struct{}

func (alwaysHeard) LastSeen(string) (time.Time, bool) { return time.Now(), true }
func (alwaysHeard) OwnerClockMs(_ string, now time.Time) (int64, bool) {
	return now.UnixMilli(), true
}

// assignedMachines waits until every task of ids is assigned and returns
// the machine each is assigned to.
func assignedMachines(tb testing.TB, l *testLedger, ids []string) map[string]string {
	tb.Helper()
	machineOf := map[string]string{}
	waitFor(tb, 30*time.Second, "every task assigned", func() bool {
		for _, id := range ids {
			tk := l.task(id)
			if tk.State != ledger.TaskAssigned {
				return false
			}
			machineOf[id] = tk.Machine
		}
		return true
	})
	return machineOf
}
