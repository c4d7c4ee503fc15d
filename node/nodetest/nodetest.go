// Package nodetest starts a real single-peer federation (libp2p on
// loopback, Raft with bolt stores, the EHOSEP leader, the process executor)
// with its HTTP API, for the tests of the layers above the node: the CLI and
// the dashboard.
package nodetest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/node"
)

// Peer is a running single-peer federation.
type Peer struct {
	Node    *node.Node
	DataDir string
	// URL is the API's base URL, Token its bearer token.
	URL   string
	Token string
}

// Start initialises organisation "alpha" with one machine, m1 (10 GFLOPS,
// 100 W, /bin/sh allowed), in a temporary directory, starts it and serves
// its API on a loopback port that config.yaml names, so a client finds it
// from the data directory alone. The peer and the server stop when the test
// ends; ctx bounds the start-up.
func Start(ctx context.Context, t testing.TB) *Peer {
	t.Helper()
	return StartWithPolicy(ctx, t, "  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n")
}

// StartWithPolicy is Start with the machines file's policy block given:
// YAML lines indented by two spaces, under "policy:".
func StartWithPolicy(ctx context.Context, t testing.TB, policy string) *Peer {
	t.Helper()
	tmp := t.TempDir()
	machines := filepath.Join(tmp, "machines.yaml")
	if err := os.WriteFile(machines, []byte("machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\npolicy:\n"+policy), 0o600); err != nil {
		t.Fatal(err)
	}
	// The API's port is chosen first so that config.yaml can name it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(tmp, "alpha")
	if _, err := config.Init(ctx, config.InitOptions{
		DataDir: data, Org: "alpha", MachinesFile: machines, NewFederation: true,
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, API: ln.Addr().String(),
	}); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(ctx, node.Options{DataDir: data, Logger: quiet})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	if err := n.WaitReady(ctx); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	tok, err := n.APIToken()
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := api.NewServer(n, api.ServerOptions{Token: tok, Logger: quiet})
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &Peer{Node: n, DataDir: data, URL: "http://" + ln.Addr().String(), Token: tok}
}
