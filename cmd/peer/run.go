package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/node"
)

// shutdownTimeout bounds a clean stop: the running tasks get their grace
// period, the peer's machines are released, Raft and the host close.
const shutdownTimeout = 30 * time.Second

func newRunCmd() *cobra.Command {
	var o node.Options
	cmd := &cobra.Command{
		Use:   "run --data DIR [--listen MULTIADDR…] [--api HOST:PORT] [--bootstrap MULTIADDR… --invitation FILE|TOKEN]",
		Short: "Run the peer: join the federation, run the tasks placed on this peer's machines, serve the API",
		Long: `Run the peer of the data directory made by peer init, until SIGINT or
SIGTERM (or peer leave).

The first start of a peer that joins needs --bootstrap with the address of
any member (printed by that member's peer run, ending in /p2p/<peer id>)
and --invitation with the invitation a member organisation issued for this
peer's organisation (peer invite ORG, on that member); later starts find
the members from the data directory and need no invitation. Only the peer
initialised with --new-federation starts a federation, and only when it has
no state, no bootstrap address and no known peers.

The peer registers its organisation and machines, runs what the replicated
log places on its machines, sends heartbeats, and serves the HTTP API on
localhost with the token of DATA/api.token. Flags override the keys of
DATA/config.yaml (docs/CONFIG.md). Use --log-level info to follow what it
does.`,
		Example: `  peer run --data /var/lib/coopgrid
  peer run --data ./b --bootstrap /ip4/192.0.2.10/tcp/9440/p2p/12D3KooW… --invitation uni-b.invitation --log-level info`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.DataDir == "" {
				return usageErr("--data is required (or set " + envData + ")")
			}
			var err error
			if o.Invitation, err = readInvitation(o.Invitation); err != nil {
				return err
			}
			return runPeer(cmd, o)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	fl := cmd.Flags()
	fl.StringVar(&o.DataDir, "data", "", "the data directory made by peer init")
	fl.StringArrayVar(&o.Listen, "listen", nil, "TCP multiaddr to listen on, repeatable (default: config.yaml's listen)")
	fl.StringVar(&o.API, "api", "", "the HTTP API's HOST:PORT (default: config.yaml's api)")
	fl.StringArrayVar(&o.Bootstrap, "bootstrap", nil, "address of a member to join through, repeatable (/ip4/…/tcp/…/p2p/<peer id>)")
	fl.StringVar(&o.Invitation, "invitation", "", "the invitation (a file, or the token itself) a member issued with peer invite; needed to join, not to restart")
	// Test-only (the chaos harness, docs/RELIABILITY.md): hidden from help.
	fl.BoolVar(&o.FaultInjection, "fault-injection", false, "TEST ONLY: serve POST /v1/debug/faults (partitions, clock steps, slow disk)")
	fl.DurationVar(&o.FaultClockOffset, "fault-clock-offset", 0, "TEST ONLY: start with the wall clock stepped by this much (needs --fault-injection)")
	_ = fl.MarkHidden("fault-injection")
	_ = fl.MarkHidden("fault-clock-offset")
	return cmd
}

func runPeer(cmd *cobra.Command, o node.Options) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	log := slog.Default()
	o.Logger = log
	o.BuildVersion = buildInfo().Version
	if err := raiseTimerSlack(ctx, log); err != nil { // timerslack.go
		return err
	}
	defer followRole(&o, log)()
	restoreGC := relaxStartGC() // until ready (startgc.go)
	defer restoreGC()
	n, err := node.Start(ctx, o)
	if err != nil {
		var (
			ce  *config.Error
			bad *config.InputError
		)
		if errors.As(err, &ce) || errors.As(err, &bad) || errors.Is(err, node.ErrNoWayToJoin) {
			return &exitError{code: 2, err: err}
		}
		return err
	}
	stopNode := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return n.Close(sctx)
	}
	token, err := n.APIToken()
	if err != nil {
		return errors.Join(err, stopNode())
	}
	build := buildInfo()
	srv := api.NewServer(n, api.ServerOptions{Token: token, Logger: log, Build: build, Collectors: n.Collectors()})
	ln, err := srv.Listen(n.APIAddr())
	if err != nil {
		return errors.Join(err, stopNode())
	}
	fmt.Fprintf(out, "peer %s of organisation %s, version %s\n", n.ID(), n.Org(), versionLine(build))
	for _, a := range n.Addrs() {
		fmt.Fprintf(out, "listening on %s\n", a)
	}
	fmt.Fprintf(out, "API on http://%s (token in %s)\n", ln.Addr(), n.TokenPath())
	if o.FaultInjection {
		fmt.Fprintln(out, "fault injection ON (test only): POST /v1/debug/faults")
	}

	sctx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()

	var runErr error
	ready := n.Ready()
	for done := false; !done; {
		select {
		case <-ready:
			restoreGC()
			fmt.Fprintf(out, "ready: organisation %s registered, %d machine(s) offered\n", n.Org(), len(n.OfferedMachines()))
			ready = nil
		case <-ctx.Done():
			fmt.Fprintln(out, "stopping")
			done = true
		case <-n.Done():
			if runErr = n.Err(); runErr == nil {
				fmt.Fprintln(out, "left the federation; stopping")
			}
			done = true
		case err := <-served:
			runErr, served = err, nil
			done = true
		}
	}
	stopServe()
	if served != nil {
		if err := <-served; err != nil && runErr == nil {
			runErr = err
		}
	}
	if err := stopNode(); err != nil && runErr == nil {
		runErr = fmt.Errorf("shut down: %w", err)
	}
	return runErr
}
