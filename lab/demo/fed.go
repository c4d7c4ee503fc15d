package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node"
)

// The demo's federation: one real peer per organisation in this process,
// each with its own data directory (identity, federation secret, bolt Raft
// store, config), a libp2p host on a random loopback port and the
// simulated executor. Nothing here is a stand-in: the peers find each
// other, replicate the ledger and schedule exactly as separate `peer run`
// processes would. Only the timings are shortened (heartbeats, scheduling
// tick, checkpoint block) to match the time compression.

// demoPeer is one organisation's peer.
type demoPeer struct {
	org  string
	dir  string
	n    *node.Node
	dead bool
	// closed receives the result of the dead peer's Close.
	closed chan error
}

// demoFed is the running federation.
type demoFed struct {
	peers []*demoPeer
	log   *slog.Logger
}

// demoTiming are the peers' settings for one compression factor.
type demoTiming struct {
	compression       float64
	heartbeat         time.Duration
	heartbeatTimeout  time.Duration
	scheduleInterval  time.Duration
	checkpointBlock   time.Duration
	reconcileInterval time.Duration
}

func newDemoTiming(compression float64) demoTiming {
	// The scheduler's tick and the checkpoint block are simulated times in
	// Model 1 (30 s, 5 min); the ledger measures run times by the wall
	// clock, so both are divided by the compression.
	real := func(simSeconds float64, lo, hi time.Duration) time.Duration {
		d := time.Duration(simSeconds / compression * float64(time.Second))
		return min(max(d, lo), hi)
	}
	return demoTiming{
		compression: compression,
		// Fast heartbeats so that the killed leader's machines are declared
		// lost within seconds; the timeout leaves room for a busy machine
		// running four peers (the node tests use the same margin).
		heartbeat:         250 * time.Millisecond,
		heartbeatTimeout:  2500 * time.Millisecond,
		scheduleInterval:  real(demoTickSeconds, 100*time.Millisecond, 5*time.Second),
		checkpointBlock:   real(demoCheckpointSeconds, time.Millisecond, 5*time.Minute),
		reconcileInterval: 250 * time.Millisecond,
	}
}

// wattsString writes milliwatts as the "W" limit syntax of config.yaml,
// exactly (three decimals).
func wattsString(mw int64) string {
	return strconv.FormatFloat(float64(mw)/1000, 'f', 3, 64) + "W"
}

// machinesYAML is one organisation's machines file: its machines of the
// instance, named m1, m2, ... as the scenario numbers them.
func machinesYAML(w *demoWorkload, org int) string {
	var b strings.Builder
	b.WriteString("# Written by peer demo: simulated machines of Model 1 (seed 000, table 2).\nmachines:\n")
	k := 0
	for _, m := range w.inst.Machines {
		if m.Owner != org {
			continue
		}
		k++
		fmt.Fprintf(&b, "  - name: m%d\n    gflops: %s\n    busy_watts: %s\n", k,
			strconv.FormatFloat(float64(m.MFLOPS)/1000, 'f', -1, 64),
			strconv.FormatFloat(float64(m.BusyMilliW)/1000, 'f', -1, 64))
	}
	return b.String()
}

// startDemoFederation initialises one data directory per organisation under
// dir and starts the peers: the last organisation creates the federation
// (so it leads first: the peer the demo will kill), the others join through
// its address. Every organisation registers with its limit of the
// instance; the late one registers at "system" like the others and lowers
// its limit when it arrives. It returns once every peer sees every
// organisation with all its machines up.
func startDemoFederation(ctx context.Context, w *demoWorkload, dir string, tm demoTiming, log *slog.Logger) (*demoFed, error) {
	f := &demoFed{log: log}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("demo: %w", err)
	}
	system := w.inst.SystemMilliW()
	first := len(w.inst.Orgs) - 1
	order := append([]int{first}, seq(first)...)
	f.peers = make([]*demoPeer, len(w.inst.Orgs))
	var secret, bootstrap string
	for _, i := range order {
		org := w.inst.Orgs[i]
		p := &demoPeer{org: org.Name, dir: filepath.Join(dir, org.Name)}
		mf := filepath.Join(dir, org.Name+".machines.yaml")
		if err := os.WriteFile(mf, []byte(machinesYAML(w, i)), 0o600); err != nil {
			return f, fmt.Errorf("demo: machines file of %s: %w", org.Name, err)
		}
		limit := org.LimitMilliW
		if i == w.late {
			limit = system
		}
		_, err := config.Init(ctx, config.InitOptions{
			DataDir: p.dir, Org: org.Name, MachinesFile: mf,
			NewFederation: secret == "", SecretFile: secret,
			Config: func(c *config.Config) {
				c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
				c.API = "127.0.0.1:0"
				c.Limit = wattsString(limit)
				c.Executor.Kind = "sim"
				c.Executor.SimCompression = tm.compression
				c.Executor.StopGrace = time.Second
				c.Heartbeat.Interval = tm.heartbeat
				c.Heartbeat.Timeout = tm.heartbeatTimeout
				c.Consensus.Policy = "ehosep"
				c.Consensus.ScheduleInterval = tm.scheduleInterval
				c.Consensus.CheckpointBlock = tm.checkpointBlock
			},
		})
		if err != nil {
			return f, fmt.Errorf("demo: init %s: %w", org.Name, err)
		}
		var (
			boots      []string
			invitation string
		)
		if bootstrap != "" {
			boots = []string{bootstrap}
			// The federation's first organisation invites each of the others.
			inv, err := f.peers[first].n.Invite(ctx, api.InviteRequest{Org: org.Name})
			if err != nil {
				return f, fmt.Errorf("demo: invite %s: %w", org.Name, err)
			}
			invitation = inv.Token
		}
		n, err := node.Start(ctx, node.Options{
			DataDir:           p.dir,
			Bootstrap:         boots,
			Invitation:        invitation,
			Logger:            log.With("org", org.Name),
			JoinTimeout:       30 * time.Second,
			ReconcileInterval: tm.reconcileInterval,
			Consensus: func(c *node.ReplicationConfig) {
				// Every peer checks the ledger's invariants (PI ≤ Lim among
				// them) after every entry it applies: the demo's proof that
				// every committed state respected the limits.
				c.CheckInvariants = true
				// A throwaway federation: bolt skips fsync.
				c.NoSync = true
				c.MaintenanceInterval = 500 * time.Millisecond
			},
			Leader: func(c *node.LeaderConfig) { c.ScheduleDebounce = 5 * time.Millisecond },
		})
		if err != nil {
			return f, fmt.Errorf("demo: start %s: %w", org.Name, err)
		}
		p.n = n
		f.peers[i] = p
		if err := n.WaitReady(ctx); err != nil {
			return f, fmt.Errorf("demo: %s: %w", org.Name, err)
		}
		if secret == "" {
			secret = filepath.Join(p.dir, "federation.key")
			addrs := n.Addrs()
			if len(addrs) == 0 {
				return f, fmt.Errorf("demo: %s has no address to join through", org.Name)
			}
			bootstrap = addrs[0]
		}
	}
	want := len(w.inst.Machines)
	err := waitUntil(ctx, 30*time.Second, "every peer to see every organisation and machine", func() bool {
		for _, p := range f.peers {
			up, orgs := 0, 0
			p.n.ViewLedger(func(l *ledger.Ledger) {
				orgs = len(l.Orgs())
				for _, m := range l.Machines() {
					if m.State == ledger.MachineUp {
						up++
					}
				}
			})
			if orgs != len(f.peers) || up != want {
				return false
			}
		}
		return true
	})
	return f, err
}

// seq returns 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// waitUntil polls cond every 10 ms until it holds, d passes or ctx ends.
func waitUntil(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// byOrg returns the peer of an organisation.
func (f *demoFed) byOrg(org string) *demoPeer {
	for _, p := range f.peers {
		if p != nil && p.org == org {
			return p
		}
	}
	return nil
}

// alive returns the peers still running.
func (f *demoFed) alive() []*demoPeer {
	var out []*demoPeer
	for _, p := range f.peers {
		if p != nil && p.n != nil && !p.dead {
			out = append(out, p)
		}
	}
	return out
}

// leader is the organisation whose peer leads, as the surviving peers see
// it: a peer that is Raft leader right now. "" while there is none.
func (f *demoFed) leader() string {
	for _, p := range f.alive() {
		if p.n.IsLeader() {
			return p.org
		}
	}
	return ""
}

// kill stops a peer abruptly, as if its process died: its network goes
// first (connections reset, no more heartbeats or Raft messages), then
// its Raft member, so that it proposes nothing on its way out: its
// machines are not released, the new leader must notice their silence.
// The rest of Close (stopping the simulated runs, freeing goroutines and
// files) continues in the background; wait for it with p.closed.
func (f *demoFed) kill(p *demoPeer) {
	p.dead = true
	if err := p.n.Halt(); err != nil {
		f.log.Info("demo: kill: halt", "org", p.org, "err", err)
	}
	p.closed = make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		p.closed <- p.n.Close(ctx)
	}()
}

// close stops every peer still running (cleanly) and waits for the killed
// ones to finish closing.
func (f *demoFed) close() error {
	var errs []error
	for _, p := range f.peers {
		if p == nil || p.n == nil {
			continue
		}
		if p.dead {
			if p.closed != nil {
				<-p.closed // its errors are the kill's, expected
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		if err := p.n.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", p.org, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}
