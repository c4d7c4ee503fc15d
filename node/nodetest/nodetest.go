// Package nodetest starts a real federation of one or several peers (libp2p on
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
	"sync"
	"testing"
	"time"

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

	once sync.Once
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
	return start(ctx, t, peerSpec{org: "alpha", machines: "machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\npolicy:\n" + policy})
}

// Heartbeat timing of StartFederation's peers: a silent peer is
// unreachable, and its machines lost, after HeartbeatTimeout.
const (
	HeartbeatInterval = 200 * time.Millisecond
	HeartbeatTimeout  = 2 * time.Second
)

// StartFederation starts one peer per organisation in orgs (at least
// one), the first founding the federation and the others joining it with
// its invitation, each with one machine "m1" (10 GFLOPS, 100 W, /bin/sh
// allowed) and its own API; heartbeats every HeartbeatInterval with
// HeartbeatTimeout. It returns when every peer sees every organisation.
func StartFederation(ctx context.Context, t testing.TB, orgs ...string) []*Peer {
	t.Helper()
	fast := func(c *config.Config) {
		c.Heartbeat.Interval = HeartbeatInterval
		c.Heartbeat.Timeout = HeartbeatTimeout
	}
	machines := "machines:\n  - {name: m1, gflops: 10, busy_watts: 100}\npolicy:\n  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n"
	var out []*Peer
	for i, org := range orgs {
		spec := peerSpec{org: org, machines: machines, edit: fast}
		if i > 0 {
			first := out[0]
			spec.secret = filepath.Join(first.DataDir, "federation.key")
			spec.bootstrap = first.Node.Addrs()
			spec.invite = func(peerID string) (string, error) {
				inv, err := first.Node.Invite(ctx, api.InviteRequest{Org: org, Peer: peerID})
				return inv.Token, err
			}
		}
		out = append(out, start(ctx, t, spec))
	}
	for _, p := range out {
		for {
			os, err := p.Node.Orgs(ctx)
			if err == nil && len(os) == len(orgs) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s never saw the %d organisations: %v", p.DataDir, len(orgs), ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return out
}

// peerSpec is one peer to start: a founder when secret is "", else a
// joiner through bootstrap with an invitation from invite.
type peerSpec struct {
	org, machines string
	edit          func(*config.Config)
	secret        string
	bootstrap     []string
	invite        func(peerID string) (string, error)
}

func start(ctx context.Context, t testing.TB, spec peerSpec) *Peer {
	t.Helper()
	tmp := t.TempDir()
	machines := filepath.Join(tmp, "machines.yaml")
	if err := os.WriteFile(machines, []byte(spec.machines), 0o600); err != nil {
		t.Fatal(err)
	}
	// The API's port is chosen first so that config.yaml can name it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(tmp, spec.org)
	res, err := config.Init(ctx, config.InitOptions{
		DataDir: data, Org: spec.org, MachinesFile: machines, NewFederation: spec.secret == "", SecretFile: spec.secret,
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, API: ln.Addr().String(), Config: spec.edit,
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	opts := node.Options{DataDir: data, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Bootstrap: spec.bootstrap}
	if spec.invite != nil {
		if opts.Invitation, err = spec.invite(res.PeerID); err != nil {
			ln.Close()
			t.Fatalf("invite %s: %v", spec.org, err)
		}
	}
	n, err := node.Start(ctx, opts)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	p := &Peer{Node: n, DataDir: data, URL: "http://" + ln.Addr().String()}
	t.Cleanup(func() { p.Stop() })
	if err := n.WaitReady(ctx); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	if p.Token, err = n.APIToken(); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := api.NewServer(n, api.ServerOptions{Token: p.Token, Logger: opts.Logger})
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return p
}

// Stop stops the peer without leaving the federation, as a killed one
// would look to the others: its heartbeats stop and its machines are
// declared lost after the heartbeat timeout. Safe to call twice.
func (p *Peer) Stop() {
	p.once.Do(func() { p.Node.Close(context.Background()) })
}
