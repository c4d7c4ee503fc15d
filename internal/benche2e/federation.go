package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/internal/peerproc"
)

// Deadlines that bound a hung start; they measure nothing.
const (
	readyTimeout = 90 * time.Second
	callTimeout  = 30 * time.Second
)

// fedConfig describes the federation of one measurement.
type fedConfig struct {
	PeerBin  string
	Root     string // data directories, machines files, logs
	Orgs     int    // organisations, one peer each
	Machines int    // machines of each organisation
	// Set holds config.yaml keys to change on every peer ("key" → YAML
	// value); empty keeps peer init's defaults.
	Set      map[string]string
	LogLevel string
	TrueBin  string // the absolute path the owners' policy allows
}

// fedPeer is one organisation's data directory and `peer run` process.
type fedPeer struct {
	org    string
	data   string
	apiURL string
	client *api.Client
	proc   *peerproc.Proc
	id     string // libp2p peer ID, from Status once running
}

// federation is the running peers, first one created the federation.
type federation struct {
	cfg   fedConfig
	log   *slog.Logger
	peers []*fedPeer
}

// machinesFile offers n identical process machines whose owner allows
// only `true`. Identical machines make every organisation's 100 % limit
// exactly its own machines' draw.
func machinesFile(n int, trueBin string) string {
	var b strings.Builder
	b.WriteString("machines:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - name: m%02d\n    gflops: 10\n    busy_watts: 100\n    idle_watts: 20\n", i)
	}
	fmt.Fprintf(&b, "policy:\n  allow: [%s]\n  unsafe_run_as_peer_user: true\n  max_wall_clock: 10m\n  kill_grace: 2s\n", trueBin)
	return b.String()
}

// startFederation initialises cfg.Orgs organisations (org-1 creates the
// federation), starts their peers and waits until every peer sees every
// organisation registered, every peer a voter, and one leader. On error
// the peers already started are stopped.
func startFederation(ctx context.Context, log *slog.Logger, cfg fedConfig) (*federation, error) {
	f := &federation{cfg: cfg, log: log}
	if err := f.start(ctx); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func (f *federation) start(ctx context.Context) error {
	cfg := f.cfg
	logs := filepath.Join(cfg.Root, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	var boot string
	for i := 1; i <= cfg.Orgs; i++ {
		org := fmt.Sprintf("org-%d", i)
		port, err := peerproc.FreePort()
		if err != nil {
			return fmt.Errorf("free port for %s: %w", org, err)
		}
		p := &fedPeer{org: org, data: filepath.Join(cfg.Root, org), apiURL: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		mf := filepath.Join(cfg.Root, org+"-machines.yaml")
		if err := os.WriteFile(mf, []byte(machinesFile(cfg.Machines, cfg.TrueBin)), 0o644); err != nil {
			return err
		}
		args := []string{"init", "--org", org, "--data", p.data, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", p.apiURL, "--machines", mf}
		if i == 1 {
			args = append(args, "--new-federation")
		} else {
			args = append(args, "--secret", filepath.Join(f.peers[0].data, "federation.key"))
		}
		if err := runCLI(ctx, cfg.PeerBin, args...); err != nil {
			return err
		}
		if len(cfg.Set) > 0 {
			if err := peerproc.EditConfig(filepath.Join(p.data, "config.yaml"), cfg.Set); err != nil {
				return err
			}
		}
		tok, err := os.ReadFile(filepath.Join(p.data, api.TokenFile))
		if err != nil {
			return fmt.Errorf("read %s's API token: %w", org, err)
		}
		p.client = api.NewClient(p.apiURL, strings.TrimSpace(string(tok)), &http.Client{Timeout: callTimeout})
		f.peers = append(f.peers, p)
		run := []string{"run", "--data", p.data, "--log-level", cfg.LogLevel}
		if i > 1 {
			ictx, cancel := context.WithTimeout(ctx, callTimeout)
			inv, err := f.peers[0].client.Invite(ictx, api.InviteRequest{Org: org})
			cancel()
			if err != nil {
				return fmt.Errorf("invite %s: %w", org, err)
			}
			run = append(run, "--bootstrap", boot, "--invitation", inv.Token)
		}
		pr, err := peerproc.Start(org, cfg.PeerBin, filepath.Join(logs, org), run...)
		if err != nil {
			return err
		}
		p.proc = pr
		if _, err := pr.WaitLine(`(?m)^ready: `, readyTimeout); err != nil {
			return err
		}
		if i == 1 {
			as := pr.Addrs()
			if len(as) == 0 {
				return fmt.Errorf("%s printed no full multiaddr", org)
			}
			boot = as[0]
		}
	}
	return f.waitFormed(ctx)
}

// runCLI runs a short `peer` command (init) to completion.
func runCLI(ctx context.Context, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("peer %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// waitFormed waits until every peer sees every organisation, every peer as
// a voter, and the same leader.
func (f *federation) waitFormed(ctx context.Context) error {
	names := make([]string, len(f.peers))
	clients := make([]*api.Client, len(f.peers))
	for i, p := range f.peers {
		names[i], clients[i] = p.org, p.client
	}
	return eventually(ctx, readyTimeout, 200*time.Millisecond, "the federation to form", func(ctx context.Context) (bool, string) {
		ok, why, selves := peerproc.Formed(ctx, names, clients)
		for i, id := range selves {
			f.peers[i].id = id
		}
		return ok, why
	})
}

// leader is the peer every peer names as leader, or nil.
func (f *federation) leader(ctx context.Context) *fedPeer {
	s, err := f.peers[0].client.Status(ctx)
	if err != nil {
		return nil
	}
	for _, p := range f.peers {
		if p.id == s.Leader {
			return p
		}
	}
	return nil
}

// stop ends every peer by pid: SIGTERM, SIGKILL after a grace.
func (f *federation) stop() {
	for i := len(f.peers) - 1; i >= 0; i-- {
		p := f.peers[i]
		if p.proc == nil {
			continue
		}
		if err := p.proc.Stop(20 * time.Second); err != nil && !p.proc.Exited() {
			f.log.Warn("stop peer", "org", p.org, "err", err)
		}
	}
}

// eventually polls cond every period until it holds, ctx ends or d passes.
func eventually(ctx context.Context, d, period time.Duration, what string, cond func(ctx context.Context) (bool, string)) error {
	deadline := time.Now().Add(d)
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		ok, seen := cond(cctx)
		cancel()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %v waiting for %s; last seen: %s", d, what, seen)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("waiting for %s; last seen: %s", what, seen))
		case <-time.After(period):
		}
	}
}
