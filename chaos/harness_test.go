package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/internal/peerproc"
)

// peerBin is the `peer` binary TestMain builds once for the run, as the
// e2e package does: the harness drives exactly what `make build` ships.
var peerBin string

func TestMain(m *testing.M) { os.Exit(peerproc.Main(m, "chaos", &peerBin)) }

// fastConfig makes a loopback federation react within seconds: Raft's lan
// preset elects in about a second, the leader declares a machine lost
// after 3 s of silence.
var fastConfig = map[string]string{
	"heartbeat.interval":          "500ms",
	"heartbeat.timeout":           "3s",
	"consensus.schedule_interval": "1s",
	"executor.stop_grace":         "2s",
	"files.fetch_timeout":         "15s",
	// Checkpointable tasks (checkpoint_test.go) are checkpointed every
	// second; a short grace and transfer timeout bound a stuck stop.
	"checkpoint.interval":         "1s",
	"checkpoint.grace":            "5s",
	"checkpoint.transfer_timeout": "20s",
}

// Deadlines bound a hung run; they assert nothing about speed.
const (
	readyTimeout = 90 * time.Second
	callTimeout  = 15 * time.Second
)

// peer is one organisation's data directory and, while it runs, its
// `peer run` process.
type peer struct {
	name   string
	data   string
	apiURL string
	logs   string
	client *api.Client
	proc   *proc // the latest process, nil before the first start
	runs   int
}

// proc is one `peer run` process.
type proc = peerproc.Proc

// cluster is a federation of n peers under root.
type cluster struct {
	t     *testing.T
	root  string
	peers []*peer
	ck    *ckWork // the checkpointable workload, if the scenario has one
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := peerproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// runCLI runs a short `peer` command (init) to completion.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, peerBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("peer %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// machinesFile offers n process machines allowing /bin/sh only.
func machinesFile(prefix string, n int) string {
	var b strings.Builder
	b.WriteString("machines:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - name: %s%d\n    gflops: 10\n    busy_watts: %d\n", prefix, i, 40+10*i)
	}
	b.WriteString("policy:\n  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n  max_wall_clock: 10m\n  kill_grace: 2s\n")
	return b.String()
}

// newCluster initialises n organisations (uni-1 creates the federation),
// starts them, waits until every peer sees n voters and one leader, and
// raises every organisation's limit so that the workload keeps all
// machines busy.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, root: t.TempDir()}
	logs := filepath.Join(c.root, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	var boot string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("uni-%d", i)
		p := &peer{name: name, data: filepath.Join(c.root, name), logs: logs,
			apiURL: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
		mf := filepath.Join(c.root, name+"-machines.yaml")
		if err := os.WriteFile(mf, []byte(machinesFile(fmt.Sprintf("m%d-", i), 2)), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"init", "--org", name, "--data", p.data, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", p.apiURL, "--machines", mf}
		if i == 1 {
			args = append(args, "--new-federation")
		} else {
			args = append(args, "--secret", filepath.Join(c.peers[0].data, "federation.key"))
		}
		runCLI(t, args...)
		editConfig(t, filepath.Join(p.data, "config.yaml"), fastConfig)
		tok, err := os.ReadFile(filepath.Join(p.data, api.TokenFile))
		if err != nil {
			t.Fatal(err)
		}
		p.client = api.NewClient(p.apiURL, strings.TrimSpace(string(tok)), &http.Client{Timeout: callTimeout})
		c.peers = append(c.peers, p)
		if i == 1 {
			c.start(p)
			boot = bootstrap(t, p.proc)
		} else {
			// The first organisation invites each of the others.
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			inv, err := c.peers[0].client.Invite(ctx, api.InviteRequest{Org: name})
			cancel()
			if err != nil {
				t.Fatalf("invite %s: %v", name, err)
			}
			c.start(p, "--bootstrap", boot, "--invitation", inv.Token)
		}
	}
	c.waitFormed()
	hundredfold := 1000.0
	for _, p := range c.peers {
		c.eventually(30*time.Second, p.name+" raises its limit", func(ctx context.Context) (bool, string) {
			_, err := p.client.SetLimit(ctx, api.LimitRequest{Percent: &hundredfold})
			return err == nil, fmt.Sprint(err)
		})
	}
	return c
}

// start runs `peer run` for p and waits for its `ready:` line. The process
// dies with the test (SIGCONT then SIGTERM, SIGKILL after a grace).
func (c *cluster) start(p *peer, extra ...string) {
	t := c.t
	t.Helper()
	p.runs++
	base := filepath.Join(p.logs, fmt.Sprintf("%s-run%d", p.name, p.runs))
	// --fault-injection: the test-only surface faults_test.go drives
	// (unused by the other faults; it changes nothing until asked).
	args := append([]string{"run", "--data", p.data, "--log-level", "info", "--fault-injection"}, extra...)
	pr, err := peerproc.Start(fmt.Sprintf("%s (run %d)", p.name, p.runs), peerBin, base, args...)
	if err != nil {
		t.Fatalf("start peer run for %s: %v", p.name, err)
	}
	t.Cleanup(func() {
		_ = pr.Stop(15 * time.Second)
		if t.Failed() {
			t.Logf("=== %s: stderr (last 80 lines)\n%s", pr.Name, peerproc.Tail(peerproc.ReadFile(pr.Stderr), 80))
		}
	})
	p.proc = pr
	if _, err := pr.WaitLine(`(?m)^ready: `, readyTimeout); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
}

// bootstrap is the first full multiaddr the process printed.
func bootstrap(t *testing.T, pr *proc) string {
	t.Helper()
	as := pr.Addrs()
	if len(as) == 0 {
		t.Fatalf("%s printed no full multiaddr:\n%s", pr.Name, peerproc.ReadFile(pr.Stdout))
	}
	return as[0]
}

// up reports whether p's process runs and is not paused.
func (p *peer) up() bool {
	if p.proc == nil || p.proc.Exited() {
		return false
	}
	return !p.proc.Paused()
}

// eventually polls cond (each call bounded by callTimeout) until it holds.
func (c *cluster) eventually(d time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		ok, seen := cond(ctx)
		cancel()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("gave up after %v waiting for %s; last seen: %s", d, what, seen)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitFormed waits until every running peer sees every peer as a voter and
// agrees on one leader.
func (c *cluster) waitFormed() {
	c.t.Helper()
	names := make([]string, len(c.peers))
	clients := make([]*api.Client, len(c.peers))
	for i, p := range c.peers {
		names[i], clients[i] = p.name, p.client
	}
	c.eventually(readyTimeout, "the federation formed with one leader", func(ctx context.Context) (bool, string) {
		ok, why, _ := peerproc.Formed(ctx, names, clients)
		return ok, why
	})
}

// leader returns the peer every running peer names as leader, or nil.
func (c *cluster) leader(ctx context.Context) *peer {
	for _, p := range c.peers {
		if !p.up() {
			continue
		}
		s, err := p.client.Status(ctx)
		if err != nil || s.Leader == "" {
			continue
		}
		for _, q := range c.peers {
			qs, err := q.client.Status(ctx)
			if err == nil && qs.Self == s.Leader {
				return q
			}
		}
	}
	return nil
}

// editConfig sets keys ("heartbeat.timeout") of a config.yaml written by
// peer init, keeping the rest of the file.
func editConfig(t *testing.T, path string, set map[string]string) {
	t.Helper()
	if err := peerproc.EditConfig(path, set); err != nil {
		t.Fatal(err)
	}
}
